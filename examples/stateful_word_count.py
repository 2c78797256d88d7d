"""Word count whose counts survive their worker: Kafka (or a built-in sentence spout) → split → a
stateful count (docs/state.md).

In one process, with the built-in spout and the in-memory provider::

    nimbus local examples/stateful_word_count.py --duration 10

On a cluster, with the counts in Redis (``apt-get install redis-server``) — kill -9 the worker
holding ``count`` and its replacement resumes from the last checkpoint::

    nimbus submit examples/stateful_word_count.py --name swc \\
        -c topology.state.provider=redis -c topology.state.redis.url=redis://127.0.0.1:6379/0

Fed by Kafka instead (every record a UTF-8 sentence; see docs/kafka.md for the ``kafka.*`` keys)::

    nimbus submit examples/stateful_word_count.py --name swc -c kafka.bootstrap.servers=127.0.0.1:9092 \\
        -c kafka.topic=sentences -c kafka.group=swc -c topology.state.provider=redis

Read the committed counts (the topology's name is its state's namespace)::

    python -c "from gale.worker.state.inspect import read_committed; \\
               from gale.worker.state.redis_provider import RedisStateProvider; \\
               print(read_committed(RedisStateProvider('redis://127.0.0.1:6379/0'), 'swc', 'count', key_groups=128))"
"""

from __future__ import annotations

from word_count import RandomSentenceSpout, SplitSentence

from gale import StatefulBolt, TopologyBuilder


class StatefulWordCount(StatefulBolt):
    """Counts words in managed state; emits (word, count) anchored to the input, then acks it (the
    ack is held until the checkpoint holding the new count commits)."""

    output_fields = ["word", "count"]

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        word = tup[0]
        count = self.counts.get(word, 0) + 1
        self.counts.put(word, count)
        self.collector.emit([word, count], anchors=tup)
        self.collector.ack(tup)


def topology(conf=None):
    conf = dict(conf or {})
    builder = TopologyBuilder()
    kafka_conf = {k: v for k, v in conf.items() if k.startswith("kafka.")}
    if "kafka.bootstrap.servers" in kafka_conf:
        from gale.connectors import KafkaSpout, kafka_spout_settings

        kafka_spout_settings(kafka_conf)  # a missing or bad kafka.* key fails here
        builder.set_spout("sentences", KafkaSpout, 1, kwargs={"fields": ["value"]})
    else:
        limit = int(conf.get("wordcount.sentences.per.task", 0))
        builder.set_spout("sentences", RandomSentenceSpout, 1, kwargs={"limit": limit})
    builder.set_bolt("split", SplitSentence, 2).shuffle_grouping("sentences")
    builder.set_bolt("count", StatefulWordCount, 2).fields_grouping("split", ["word"])
    return builder.create_topology(name="stateful-wordcount",
                                   conf={"topology.max.spout.pending": 5000, **kafka_conf})
