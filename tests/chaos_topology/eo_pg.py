"""The chaos suite's PostgreSQL topology: Kafka → keys → a keyed count (exactly-once state in Redis)
→ a PostgreSQL sink.

``kafka`` (KafkaSpout, 2 tasks) emits each record's value (the key, e.g. ``"k7"``); ``keys`` passes it
on; ``count`` (a StatefulBolt, fields-grouped on the key) counts per key and emits ``(key, count)``
anchored; ``pg`` (a :class:`~gale.worker.sinks.postgres.PostgresSink`, 2 tasks, fields-grouped on the
key) writes each as a row of ``chaos_counts``: ``count`` upserted (the last count of the checkpoint)
and ``n`` = 1 added per tuple — so ``n`` is how many tuples of the key the sink committed, and any
tuple committed twice or never shows in it. ``topology.state.guarantee: exactly-once``, a checkpoint
every second.

Config keys (``-c key=value`` at submit): ``chaos.workers``, ``chaos.pg.url``, the ``kafka.*`` keys of
the spout and the state keys (``topology.state.provider``, ``topology.state.redis.url``).
"""

from __future__ import annotations

from gale import BasicBolt, StatefulBolt, TopologyBuilder
from gale.connectors import KafkaSpout
from gale.sinks import PostgresSink

SPOUT_TASKS = 2
COUNT_TASKS = 2
SINK_TASKS = 2
TABLE = "chaos_counts"
KEY_GROUPS = 128


class Keys(BasicBolt):
    output_fields = ["key"]

    def execute(self, tup):
        self.collector.emit([tup["value"]])


class KeyedCount(StatefulBolt):
    output_fields = ["key", "count"]

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        key = tup["key"]
        count = self.counts.get(key, 0) + 1
        self.counts.put(key, count)
        self.collector.emit([key, count], anchors=tup)
        self.collector.ack(tup)


class CountsToPostgres(PostgresSink):
    def records(self, tup):
        return ({"key": tup["key"], "count": tup["count"], "n": 1},)


def topology(conf=None):
    conf = conf or {}
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, SPOUT_TASKS, kwargs={"fields": ["value"]})
    b.set_bolt("keys", Keys, 2).shuffle_grouping("kafka")
    b.set_bolt("count", KeyedCount, COUNT_TASKS).fields_grouping("keys", ["key"])
    b.set_bolt("pg", CountsToPostgres, SINK_TASKS, kwargs={
        "url": conf.get("chaos.pg.url", "postgresql://gale@127.0.0.1:5432/postgres"), "table": TABLE,
        "key": ["key"], "deltas": ["n"], "guarantee": "exactly-once",
    }).fields_grouping("count", ["key"])
    return b.create_topology(conf={"topology.workers": int(conf.get("chaos.workers", 3)),
                                   "topology.max.spout.pending": 200,
                                   "topology.state.guarantee": "exactly-once",
                                   "topology.state.checkpoint.interval.ms": 1000,
                                   "topology.state.key.groups": KEY_GROUPS})
