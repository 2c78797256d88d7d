"""A light topology for process tests: a spout ticking twice a second into an acking bolt."""

from __future__ import annotations

import time

from gale import Bolt, Spout, TopologyBuilder


class Ticks(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(["n"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = 0
        self.last = 0.0

    def next_tuple(self):
        if time.time() - self.last >= 0.5:
            self.last = time.time()
            self.n += 1
            self.collector.emit([self.n], msg_id=self.n)


class Ack(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def topology(conf=None):
    b = TopologyBuilder()
    b.set_spout("ticks", Ticks, 1)
    b.set_bolt("ack", Ack, 1).shuffle_grouping("ticks")
    return b.create_topology(conf={"topology.workers": 1})
