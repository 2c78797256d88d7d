"""Where shuffled tuples go between workers: every tuple a sink executes is a line on disk.

Config keys: ``test.state.dir`` (required), ``test.tuples`` (per spout task, default 200). Each
``src`` task emits ``test.tuples`` reliable tuples and stops; each ``sink`` task appends
``<source task> <1 when that task is in this sink's worker, else 0> <the worker's thread switch
interval, seconds>`` to ``sink-<task>.log``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gale import BasicBolt, Spout, TopologyBuilder


class CountSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(["n"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.left = int(conf.get("test.tuples", 200))

    def next_tuple(self):
        if self.left > 0:
            self.left -= 1
            self.collector.emit([self.left], msg_id=self.left)


class LineSink(BasicBolt):
    """Writes lines to ``sink-<task>.log`` in ``test.state.dir``; ``here``: its worker's tasks."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        directory = Path(conf["test.state.dir"])
        directory.mkdir(parents=True, exist_ok=True)
        self.here = set(context.worker_tasks)
        self.out = open(directory / f"sink-{context.task_id}.log", "a", buffering=1)

    def cleanup(self):
        self.out.close()


class WhereSink(LineSink):
    def execute(self, tup):
        self.out.write(f"{tup.source_task} {int(tup.source_task in self.here)} {sys.getswitchinterval()}\n")


def topology(conf):
    b = TopologyBuilder()
    b.set_spout("src", CountSpout, 2)
    b.set_bolt("sink", WhereSink, 4).shuffle_grouping("src")
    return b.create_topology(name="localityprobe", conf={"topology.workers": 2})
