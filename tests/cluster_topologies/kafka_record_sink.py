"""Kafka spout (a ZooKeeper consumer group) → sink recording (partition, offset) of every record,
for the cluster test that kills the worker holding partitions."""

from __future__ import annotations

import os
from pathlib import Path

from gale import Bolt, TopologyBuilder
from gale.connectors import KafkaSpout


class RecordOffsets(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        path = Path(conf["test.state.dir"])
        path.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path / f"seen-{context.task_id}-{os.getpid()}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def execute(self, tup):
        os.write(self.fd, f"{tup['partition']} {tup['offset']}\n".encode())
        self.collector.ack(tup)


def topology(conf=None):
    conf = dict(conf or {})
    kafka = {k: v for k, v in conf.items() if k.startswith("kafka.")}
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 2, kwargs={"fields": ["partition", "offset", "value"]})
    b.set_bolt("sink", RecordOffsets, 2).shuffle_grouping("kafka")
    return b.create_topology(conf={"topology.workers": 2, "topology.max.spout.pending": 200, **kafka})
