"""Gale-side components of the multi-lang tests (module level, so workers can import them)."""

from __future__ import annotations

import json
import os
import sys

from gale import Bolt, ShellBolt, Spout


class SentenceSpout(Spout):
    """Emits ``test.n`` sentences ``"sentence <i> ..."`` with message id ``i``; replays failed ones;
    records acked ids to ``<test.out>/acked-<task>.log``."""

    def declare_output_fields(self, declarer):
        declarer.declare(["sentence"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.out = conf["test.out"]
        words = conf.get("test.words", "alpha beta gamma")
        idx, n = context.this_task_index, len(context.this_component_tasks)
        self.todo = [i for i in range(conf["test.n"]) if i % n == idx][::-1]
        self.sentences = {i: f"s{i} {words}" for i in self.todo}
        self.log = open(os.path.join(self.out, f"acked-{context.task_id}.log"), "a")

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop()
            self.collector.emit([self.sentences[i]], msg_id=i)

    def ack(self, msg_id):
        self.log.write(f"{msg_id}\n")
        self.log.flush()

    def fail(self, msg_id):
        self.todo.append(msg_id)

    def close(self):
        self.log.close()


class RecordSink(Bolt):
    """Appends every input's values (JSON) to ``<test.out>/sink-<task>.log``, then acks it."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.fh = open(os.path.join(conf["test.out"], f"sink-{context.task_id}.log"), "a")

    def execute(self, tup):
        self.fh.write(json.dumps(list(tup.values)) + "\n")
        self.fh.flush()
        self.collector.ack(tup)

    def cleanup(self):
        self.fh.close()


def read_lines(out: str, prefix: str) -> list:
    rows = []
    for name in sorted(os.listdir(out)):
        if name.startswith(prefix):
            with open(os.path.join(out, name)) as fh:
                rows += [json.loads(line) for line in fh if line.strip()]
    return rows


class FailFirst(Bolt):
    """Fails each value the first time this task sees it, acks it afterwards (replays must come)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen = set()

    def execute(self, tup):
        value = tup.values[0]
        if value not in self.seen:
            self.seen.add(value)
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


class MixedSpout(SentenceSpout):
    """SentenceSpout whose sentence 3 is bytes (JSON cannot carry it)."""

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop()
            self.collector.emit([b"raw bytes" if i == 3 else self.sentences[i]], msg_id=i)


FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "multilang")


class SplitSentence(ShellBolt):
    """Storm's way: a ShellBolt subclass naming its command and outputs."""

    command = [sys.executable, "pystorm_components.py", "SplitBolt"]
    outputs = ["word"]
    cwd = FIXTURES
