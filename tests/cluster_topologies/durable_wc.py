"""Word count over a durable, replayable source, with results in files the tests can check.

Config keys: ``test.input`` (a file of ``id<TAB>sentence`` lines), ``test.state.dir`` (where the
spout records acked ids and the bolts record counts and processed ids), ``test.workers``.

* DurableSpout: each task owns the ids with ``id % tasks == index``; acked ids are appended to
  ``acked-<index>.log``; on (re)start the task replays every owned id not acked yet — a durable
  queue, like Kestrel or RabbitMQ in Storm's reliability model (docs/storm-model.md §11).
* CountToFile: running word counts, written atomically to ``counts-<task>.json`` every second.
* RecordSink: appends the sentence id of every tuple it processes to ``sink-<task>.log`` before
  acking it (at-least-once evidence: every id must appear at least once).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from gale import BasicBolt, Bolt, Spout, TopologyBuilder


class DurableSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(["id", "sentence"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.dir = Path(conf["test.state.dir"])
        self.dir.mkdir(parents=True, exist_ok=True)
        index, n = context.this_task_index, len(context.this_component_tasks)
        self.log_path = self.dir / f"acked-{index}.log"
        done = set()
        if self.log_path.exists():
            done = {int(x) for x in self.log_path.read_text().split()}
        self.sentences = {}
        with open(conf["test.input"]) as fh:
            for line in fh:
                i, _, s = line.rstrip("\n").partition("\t")
                i = int(i)
                if i % n == index and i not in done:
                    self.sentences[i] = s
        self.queue = sorted(self.sentences, reverse=True)
        self.log = open(self.log_path, "a")

    def next_tuple(self):
        if self.queue:
            i = self.queue.pop()
            self.collector.emit([i, self.sentences[i]], msg_id=i)

    def ack(self, msg_id):
        self.log.write(f"{msg_id}\n")
        self.log.flush()
        self.sentences.pop(msg_id, None)

    def fail(self, msg_id):
        if msg_id in self.sentences:
            self.queue.append(msg_id)

    def close(self):
        self.log.close()


class SplitSentence(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["id", "word"])

    def execute(self, tup):
        for word in tup["sentence"].split():
            self.collector.emit([tup["id"], word])


class CountToFile(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["word", "count"])

    def component_configuration(self):
        return {"topology.tick.tuple.freq.secs": 1}

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts = Counter()
        self.path = Path(conf["test.state.dir"]) / f"counts-{context.task_id}.json"

    def execute(self, tup):
        if tup.is_tick():
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.counts))
            os.replace(tmp, self.path)
            return
        self.counts[tup["word"]] += 1
        self.collector.emit([tup["word"], self.counts[tup["word"]]], anchors=tup)
        self.collector.ack(tup)


class RecordSink(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        Path(conf["test.state.dir"]).mkdir(parents=True, exist_ok=True)
        self.log = open(Path(conf["test.state.dir"]) / f"sink-{context.task_id}.log", "a")
        self.delay = float(conf.get("test.sink.delay.secs", 0))

    def execute(self, tup):
        if self.delay:
            time.sleep(self.delay)  # workload: a slow sink by design (test.sink.delay.secs)
        self.log.write(f"{tup['id']}\n")
        self.log.flush()
        self.collector.ack(tup)


def topology(conf=None):
    conf = conf or {}
    b = TopologyBuilder()
    b.set_spout("source", DurableSpout, int(conf.get("test.spouts", 2)))
    b.set_bolt("split", SplitSentence, 4).shuffle_grouping("source")
    b.set_bolt("count", CountToFile, 4).fields_grouping("split", ["word"])
    b.set_bolt("sink", RecordSink, 2).shuffle_grouping("source")
    return b.create_topology(conf={"topology.workers": int(conf.get("test.workers", 2)),
                                   "topology.max.spout.pending": 200})
