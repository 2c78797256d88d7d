"""Exactly-once word count from Kafka on a cluster: KafkaSpout (2 tasks) → Words (the record's
value is the word) → StatefulCount (fields-grouped, state in the provider). Config: the ``kafka.*``
keys and the state keys (``topology.state.provider``, ``topology.state.redis.url``); the guarantee is
set here. The counts live only in the provider (``gale.worker.state.inspect.read_committed``)."""

from __future__ import annotations

from stateful_wc import StatefulCount

from gale import BasicBolt, TopologyBuilder
from gale.connectors import KafkaSpout


class Words(BasicBolt):
    output_fields = ["word"]

    def execute(self, tup):
        self.collector.emit([tup["value"]])


def topology(conf=None):
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 2, kwargs={"fields": ["value"]})
    b.set_bolt("words", Words, 2).shuffle_grouping("kafka")
    b.set_bolt("count", StatefulCount, 2).fields_grouping("words", ["word"])
    return b.create_topology(conf={"topology.workers": 2, "topology.max.spout.pending": 100,
                                   "topology.state.guarantee": "exactly-once",
                                   "topology.state.checkpoint.interval.ms": 200})
