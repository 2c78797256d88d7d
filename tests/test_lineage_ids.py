"""Lineage ids: the identity a replay of the same spout message reproduces (gale.worker.runtime.lineage)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gale import BasicBolt, Bolt, Spout, TopologyBuilder
from gale.topology.tuple import Fields, Tuple
from gale.worker.local import LocalTopology, local_conf
from gale.worker.runtime import lineage
from gale.worker.transfer import Transfer
from gale.zkserver import free_port
from tests.waiting import eventually

# ------------------------------------------------------------------------------ pure


def test_ids_are_deterministic_and_separate_what_differs():
    s = lineage.stream_salt("split", "default")
    assert s == lineage.stream_salt("split", "default") != lineage.stream_salt("split", "other")
    assert lineage.stream_salt("a", "bc") != lineage.stream_salt("ab", "c")
    m = lineage.message(lineage.spout_salt("src", "default", 3), 17)
    assert m == lineage.message(lineage.spout_salt("src", "default", 3), 17) != 0
    assert m != lineage.message(lineage.spout_salt("src", "default", 4), 17)  # ids unique per task only
    assert m != lineage.message(lineage.spout_salt("src", "default", 3), 18)
    kafka = lineage.spout_salt("kafka", "default", None)
    assert lineage.message(kafka, ("t", 0, 5)) == lineage.message(kafka, ("t", 0, 5)) != lineage.message(kafka, ("t", 1, 5))
    ordinals = {lineage.child(m, s, n) for n in range(1000)}
    assert len(ordinals) == 1000 and 0 not in ordinals
    assert lineage.child(m, s, 0) != lineage.child(m, lineage.stream_salt("count", "default"), 0)


def test_multi_anchor_ids_ignore_anchor_order_and_untracked_anchors():
    s = lineage.stream_salt("join", "default")
    a, b = (11, 0), (22, 3)
    assert lineage.combined([a, b], s) == lineage.combined([b, a], s)
    assert lineage.combined([a, b], s) != lineage.combined([a, (22, 4)], s)
    assert lineage.combined([a, (0, 0)], s) == lineage.child(11, s, 0)  # one tracked anchor: as a single emit
    assert lineage.combined([(0, 0)], s) == 0


def test_ids_are_the_same_in_another_process_with_another_string_hash_seed():
    code = ("import json; from gale.worker.runtime import lineage as l; s = l.stream_salt('split', 'default'); "
            "m = l.message(l.spout_salt('src', 'default', 2), ('t', 1, 99)); "
            "print(json.dumps([s, m, l.child(m, s, 4), l.message(s, 7), l.combined([(m, 1), (5, 2)], s)]))")
    outs = set()
    for seed in ("1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1
    s = lineage.stream_salt("split", "default")
    m = lineage.message(lineage.spout_salt("src", "default", 2), ("t", 1, 99))
    assert json.loads(outs.pop()) == [s, m, lineage.child(m, s, 4), lineage.message(s, 7),
                                      lineage.combined([(m, 1), (5, 2)], s)]


# ------------------------------------------------------------------------------ the runtime


class Sentences(Spout):
    def __init__(self, sentences=()):
        self.sentences = list(sentences)

    def declare_output_fields(self, declarer):
        declarer.declare(["id", "sentence"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.todo = list(range(len(self.sentences)))
        self.acked: set = set()
        self.unanchored_done = False

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop(0)
            self.collector.emit([i, self.sentences[i]], msg_id=i)

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id):
        self.todo.append(msg_id)


class Split(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["id", "n", "word"])

    def execute(self, tup):
        for n, word in enumerate(tup["sentence"].split()):
            self.collector.emit([tup["id"], n, word])


class Record(Bolt):
    """Records (values, lineage) of every input; fails the first attempt of sentence ``fail_id``."""

    def __init__(self, fail_id=None):
        self.fail_id = fail_id

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: list = []
        self.failed = False

    def execute(self, tup):
        self.seen.append((tuple(tup.values), tup.lineage))
        if tup["id"] == self.fail_id and not self.failed:
            self.failed = True
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def _instances(lt, component):
    return [obj for ex in lt.runtime.executors.values() if ex.component == component
            for obj in (getattr(ex, "spouts", None) or ex.bolts).values()]


def test_a_replayed_message_reproduces_the_lineage_of_every_tuple_it_leads_to():
    sentences = ["a a b", "a b", "c"]
    b = TopologyBuilder()
    b.set_spout("src", Sentences, 1, kwargs={"sentences": sentences})
    b.set_bolt("split", Split, 2).shuffle_grouping("src")
    b.set_bolt("record", Record, 1, kwargs={"fail_id": 0}).shuffle_grouping("split")
    topo = b.create_topology()
    lt = LocalTopology("t", topo, local_conf(topo, {}))
    (spout,) = _instances(lt, "src")
    (record,) = _instances(lt, "record")
    try:
        def all_acked():
            assert spout.acked == {0, 1, 2}
        eventually(all_acked, timeout=30)
    finally:
        lt.kill()
    by_values: dict[tuple, set] = {}
    for values, lin in record.seen:
        assert lin != 0, values
        by_values.setdefault(values, set()).add(lin)
    # sentence 0 was seen twice (first attempt failed) with the same lineage per word both times
    assert sorted(v for v, _ in record.seen).count((0, 0, "a")) == 2
    assert all(len(lins) == 1 for lins in by_values.values()), by_values
    # equal words are different inputs: every (sentence, position) has its own lineage
    distinct = {next(iter(lins)) for lins in by_values.values()}
    assert len(distinct) == len(by_values) == 6


def test_acking_off_means_no_lineage():
    b = TopologyBuilder()
    b.set_spout("src", Sentences, 1, kwargs={"sentences": ["x y"]})
    b.set_bolt("split", Split, 1).shuffle_grouping("src")
    b.set_bolt("record", Record, 1).shuffle_grouping("split")
    topo = b.create_topology()
    lt = LocalTopology("t", topo, local_conf(topo, {"topology.acker.executors": 0}))
    (record,) = _instances(lt, "record")
    try:
        def both_seen():
            assert len(record.seen) == 2
        eventually(both_seen, timeout=30)
    finally:
        lt.kill()
    assert [lin for _, lin in record.seen] == [0, 0]


def test_lineage_crosses_workers_unchanged():
    recv_port, send_port = free_port(), free_port()
    fields = Fields(["v"], "src:default")
    delivered: list = []
    receiver = Transfer(bind_host="127.0.0.1", port=recv_port, secret=b"s",
                        deliver=lambda task, payload: delivered.append(payload) or True,
                        fields_for=lambda c, s: fields)
    sender = Transfer(bind_host="127.0.0.1", port=send_port, secret=b"s", deliver=lambda *_: True,
                      fields_for=lambda c, s: fields)
    ids = [2**64 - 1, -(2**63), 12345, 0]
    try:
        receiver.start()
        sender.start()
        sender.set_routes({7: f"127.0.0.1:{recv_port}"})
        for i, lin in enumerate(ids):
            sender.send_tuple(7, Tuple([i], fields, "src", "default", 1, {5: 6} if lin else None, lineage=lin))

        def all_delivered():
            assert len(delivered) == len(ids)
        eventually(all_delivered, timeout=10)
    finally:
        for t in (receiver, sender):
            t.close(0.1)
    assert sorted((t.values[0], t.lineage) for t in delivered) == list(enumerate(ids))
