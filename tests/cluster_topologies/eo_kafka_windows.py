"""Exactly-once persistent windows from Kafka on a cluster: KafkaSpout (2 tasks; each record's value
is an item number) → Items (``[i]``) → ``window`` (persistent tumbling windows of 1 s of processing
time, emitting the items of each window) → ``tally`` (per-task state: how many fired windows held each
item). Exactly once, every item's tally is 1 — a window fired twice, or an item lost or counted in
two windows, shows. Config: the ``kafka.*`` keys and the state keys; the guarantee is set here."""

from __future__ import annotations

from gale import BasicBolt, Duration, StatefulBolt, TopologyBuilder, WindowedBolt
from gale.connectors import KafkaSpout


class Items(BasicBolt):
    output_fields = ["i"]

    def execute(self, tup):
        self.collector.emit([int(tup["value"])])


class SecondWindows(WindowedBolt):
    output_fields = ["items"]

    def __init__(self):
        super().__init__()
        self.with_tumbling_window(Duration.seconds(1)).with_persistence()

    def execute(self, window):
        self.collector.emit([[t["i"] for t in window.get()]])


class ItemTally(StatefulBolt):
    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        for i in tup["items"]:
            self.state.put(i, self.state.get(i, 0) + 1)
        self.collector.ack(tup)


def topology(conf=None):
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 2, kwargs={"fields": ["value"]})
    b.set_bolt("items", Items, 2).shuffle_grouping("kafka")
    b.set_bolt("window", SecondWindows, 1).global_grouping("items")
    b.set_bolt("tally", ItemTally, 1).shuffle_grouping("window")
    return b.create_topology(conf={"topology.workers": 2, "topology.max.spout.pending": 100,
                                   "topology.state.guarantee": "exactly-once",
                                   "topology.state.checkpoint.interval.ms": 200})
