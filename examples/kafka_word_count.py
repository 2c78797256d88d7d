"""Word count fed by Kafka: KafkaSpout (a ZooKeeper consumer group) → split (shuffle) → count (fields).

Create the topic, then run it in one process::

    nimbus local examples/kafka_word_count.py --duration 30 \\
        -c kafka.bootstrap.servers=127.0.0.1:9092 -c kafka.topic=sentences -c kafka.group=wordcount \\
        -c kafka.spout.parallelism=2

or on a cluster with ``nimbus submit examples/kafka_word_count.py --name kwc -c ...`` (same ``-c`` keys).
Every record is a sentence (UTF-8). The spout's tasks share the topic's partitions through
``/consumers/<kafka.group>/`` in Storm's ZooKeeper (``kafka.zookeeper.root``, default ``/``) and commit
there the offset to resume from; a restarted topology continues where the last one stopped. Other
``kafka.*`` keys (docs/kafka.md) pass through to the spout.
"""

from __future__ import annotations

from word_count import SplitSentence, WordCount

from gale import ConfigError, TopologyBuilder
from gale.connectors import KafkaSpout, kafka_spout_settings


def topology(conf=None):
    conf = dict(conf or {})
    kafka_conf = {k: v for k, v in conf.items() if k.startswith("kafka.") and k != "kafka.spout.parallelism"}
    kafka_spout_settings(kafka_conf)  # a missing or bad kafka.* key fails here, before anything runs
    parallelism = conf.get("kafka.spout.parallelism", 1)
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise ConfigError(f"invalid value for 'kafka.spout.parallelism': {parallelism!r}; expected an integer >= 1")
    builder = TopologyBuilder()
    builder.set_spout("sentences", KafkaSpout, parallelism, kwargs={"fields": ["value"]})
    builder.set_bolt("split", SplitSentence, 4).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount, 4).fields_grouping("split", ["word"])
    return builder.create_topology(
        name="kafka-wordcount", conf={"topology.max.spout.pending": 1000, **kafka_conf}
    )
