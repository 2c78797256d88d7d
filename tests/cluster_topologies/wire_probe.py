"""A slow probe for tests of worker-to-worker traffic: every tuple a sink executes is on disk.

Config keys: ``test.state.dir`` (required). The spout ``probe`` emits ``["legit", "<pid>:<n>"]``
about 20 times a second (a new spout process has a new pid, so every value is unique across
restarts) and never replays; each ``sink`` task appends ``<tag> <value> <unix time>`` to
``sink-<task>.log`` for every tuple it executes — so a forged or replayed tuple that got through
would show up as a foreign tag or a duplicated value.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gale import BasicBolt, Spout, TopologyBuilder


class ProbeSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(["tag", "value"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = 0
        self.next_at = 0.0

    def next_tuple(self):
        now = time.monotonic()
        if now < self.next_at:
            return  # one tuple every 50 ms; the executor's idle strategy paces the calls in between
        self.next_at = now + 0.05
        self.n += 1
        value = f"{os.getpid()}:{self.n}"
        self.collector.emit(["legit", value], msg_id=value)


class RecordSink(BasicBolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        directory = Path(conf["test.state.dir"])
        directory.mkdir(parents=True, exist_ok=True)
        self.out = open(directory / f"sink-{context.task_id}.log", "a", buffering=1)

    def execute(self, tup):
        self.out.write(f"{tup['tag']} {tup['value']} {time.time():.3f}\n")

    def cleanup(self):
        self.out.close()


def topology(conf):
    b = TopologyBuilder()
    b.set_spout("probe", ProbeSpout, 1)
    b.set_bolt("sink", RecordSink, 4).shuffle_grouping("probe")
    # the probe is about worker-to-worker traffic: a load-aware shuffle would keep its tuples in the spout's worker
    return b.create_topology(name="wireprobe", conf={"topology.workers": 2, "topology.disable.loadaware.messaging": True})
