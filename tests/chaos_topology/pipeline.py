"""The chaos suite's topology: RabbitMQ → work → sink, with evidence in files.

``mq`` (RabbitMQSpout) reads message ids (the body is the id, e.g. ``"1234"``) from
``rabbitmq.queue``; ``work`` passes each id on, anchored, after an optional delay; ``sink`` appends
the id to ``<chaos.state.dir>/sink-<task>-<pid>.log`` with one ``write`` on an ``O_APPEND`` file
descriptor (complete lines even when a zombie and its replacement write at once) *before* it acks.
So every message the broker saw acknowledged is in some sink file, and the checker can count lost
and duplicate ids.

The slow-bolt fault: while ``<chaos.state.dir>/slow`` holds a number of seconds, ``work`` sleeps that
long per tuple, so pending tuples exceed ``topology.message.timeout.secs``, time out and replay.

Config keys (``-c key=value`` at submit): ``chaos.state.dir`` (required), ``chaos.workers``,
``chaos.spouts``, ``chaos.max.pending``, plus the ``rabbitmq.*`` keys of the spout.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gale import Bolt, TopologyBuilder
from gale.connectors import RabbitMQSpout

SLOW_FILE = "slow"


class SlowableWork(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["id"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.control = Path(conf["chaos.state.dir"]) / SLOW_FILE
        self.delay = 0.0
        self.checked = 0.0

    def _current_delay(self) -> float:
        now = time.monotonic()
        if now - self.checked >= 0.25:
            self.checked = now
            try:
                self.delay = float(self.control.read_text() or 0)
            except (FileNotFoundError, ValueError):
                self.delay = 0.0
        return self.delay

    def execute(self, tup):
        delay = self._current_delay()
        if delay > 0:
            time.sleep(delay)  # workload: the slow-bolt fault makes the work bolt slow on purpose
        self.collector.emit([int(tup["body"])], anchors=tup)
        self.collector.ack(tup)


class FileSink(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare([])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        state = Path(conf["chaos.state.dir"])
        state.mkdir(parents=True, exist_ok=True)
        path = state / f"sink-{context.task_id}-{os.getpid()}.log"
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def execute(self, tup):
        os.write(self.fd, f"{tup['id']}\n".encode())
        self.collector.ack(tup)

    def cleanup(self):
        os.close(self.fd)


def topology(conf=None):
    conf = conf or {}
    b = TopologyBuilder()
    b.set_spout("mq", RabbitMQSpout, int(conf.get("chaos.spouts", 2)))
    b.set_bolt("work", SlowableWork, 3).shuffle_grouping("mq")
    b.set_bolt("sink", FileSink, 2).fields_grouping("work", ["id"])
    return b.create_topology(conf={"topology.workers": int(conf.get("chaos.workers", 3)),
                                   "topology.max.spout.pending": int(conf.get("chaos.max.pending", 100))})
