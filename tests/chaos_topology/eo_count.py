"""The chaos suite's second topology: Kafka → keys → a keyed count with exactly-once state.

``kafka`` (KafkaSpout, 2 tasks over the topic's partitions) emits each record's value (the key, e.g.
``"k7"``); ``keys`` passes it on; ``count`` (a StatefulBolt, fields-grouped on the key) keeps the count
per key in the state provider (Redis), with ``topology.state.guarantee: exactly-once`` and a
checkpoint every second. The counts live only in Redis: the checker reads them with
``gale.worker.state.inspect.read_committed`` and compares them with the topic's records.

Config keys (``-c key=value`` at submit): ``chaos.workers``, the ``kafka.*`` keys of the spout and the
state keys (``topology.state.provider``, ``topology.state.redis.url``).
"""

from __future__ import annotations

from gale import BasicBolt, StatefulBolt, TopologyBuilder
from gale.connectors import KafkaSpout

SPOUT_TASKS = 2
COUNT_TASKS = 2
#: the count's key groups (``topology.state.key.groups``), for read_committed
KEY_GROUPS = 128


class Keys(BasicBolt):
    output_fields = ["key"]

    def execute(self, tup):
        self.collector.emit([tup["value"]])


class KeyedCount(StatefulBolt):
    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        key = tup["key"]
        self.counts.put(key, self.counts.get(key, 0) + 1)
        self.collector.ack(tup)


def topology(conf=None):
    conf = conf or {}
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, SPOUT_TASKS, kwargs={"fields": ["value"]})
    b.set_bolt("keys", Keys, 2).shuffle_grouping("kafka")
    b.set_bolt("count", KeyedCount, COUNT_TASKS).fields_grouping("keys", ["key"])
    return b.create_topology(conf={"topology.workers": int(conf.get("chaos.workers", 3)),
                                   "topology.max.spout.pending": 200,
                                   "topology.state.guarantee": "exactly-once",
                                   "topology.state.checkpoint.interval.ms": 1000,
                                   "topology.state.key.groups": KEY_GROUPS})
