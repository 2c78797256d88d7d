"""A 30-component topology for the UI's graph (tests/test_ui.py): 3 spouts, 6 parsers, 8 enrichers,
7 aggregators (one stateful, one windowed), 6 sinks; one worker, a few hundred tuples a second."""

import itertools
import time

from gale import BasicBolt, Spout, StatefulBolt, TopologyBuilder


class Events(Spout):
    def declare_output_fields(self, d):
        d.declare(["key", "value"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.ids = itertools.count()

    def next_tuple(self):
        i = next(self.ids)
        self.collector.emit([f"k{i % 50}", i], msg_id=i)
        if i % 10 == 9:
            time.sleep(0.05)  # workload pacing: about 200 tuples a second per spout


class Pass(BasicBolt):
    def declare_output_fields(self, d):
        d.declare(["key", "value"])

    def execute(self, tup):
        self.collector.emit([tup["key"], tup["value"]])


class Keyed(StatefulBolt):
    def declare_output_fields(self, d):
        d.declare(["key", "value"])

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.state.put(tup["key"], self.state.get(tup["key"], 0) + 1)
        self.collector.emit([tup["key"], tup["value"]], anchors=tup)
        self.collector.ack(tup)


def topology(conf=None):
    b = TopologyBuilder()
    spouts = [f"source-{i}" for i in range(3)]
    for s in spouts:
        b.set_spout(s, Events, 1)
    for i in range(6):
        b.set_bolt(f"parse-{i}", Pass, 1).shuffle_grouping(spouts[i % 3])
    for i in range(8):
        b.set_bolt(f"enrich-{i}", Pass, 1).shuffle_grouping(f"parse-{(i * 5) % 6}").shuffle_grouping(f"parse-{(i + 1) % 6}")
    for i in range(7):
        cls = Keyed if i == 0 else Pass
        bolt = b.set_bolt(f"aggregate-{i}", cls, 1)
        bolt.fields_grouping(f"enrich-{(i * 3) % 8}", ["key"]).fields_grouping(f"enrich-{(i * 3 + 1) % 8}", ["key"])
    for i in range(6):
        b.set_bolt(f"sink-{i}", Pass, 1).shuffle_grouping(f"aggregate-{(i * 4) % 7}")
    return b.create_topology(conf={"topology.workers": 1, "topology.max.spout.pending": 200,
                                   "topology.state.checkpoint.interval.ms": 1000})
