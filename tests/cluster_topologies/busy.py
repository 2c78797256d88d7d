"""A bolt stuck in a long pure-Python CPU loop (and one in a blocking call): the worker's
heartbeats must keep flowing, and the stuck executor must show in its stats (busy_secs)."""

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


class Spin(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.secs = float(conf.get("test.spin.secs", 15))
        self.done = False

    def execute(self, tup):
        if not self.done:
            self.done = True
            end = time.time() + self.secs
            x = 0
            while time.time() < end:  # pure Python: holds the GIL between switch intervals
                x += 1
        self.collector.ack(tup)


def topology(conf=None):
    b = TopologyBuilder()
    b.set_spout("ticks", Ticks, 1)
    b.set_bolt("spin", Spin, 1).shuffle_grouping("ticks")
    return b.create_topology(conf={"topology.workers": 1, "topology.message.timeout.secs": 60})
