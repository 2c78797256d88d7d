"""Word count fed by Kafka: KafkaSpout (a ZooKeeper consumer group) → split (shuffle) → count (fields).

With a dev cluster and its Kafka-protocol broker (docs/kafka.md, "Getting a broker")::

    nimbus dev-cluster --kafka          # prints kafka.bootstrap.servers=127.0.0.1:9092 and GALE_CONFIG=...
    export GALE_CONFIG=<printed path>
    python examples/kafka_word_count.py produce --bootstrap 127.0.0.1:9092 --topic sentences --partitions 2
    nimbus submit examples/kafka_word_count.py --name kwc --wait \\
        -c kafka.bootstrap.servers=127.0.0.1:9092 -c kafka.topic=sentences -c kafka.group=wordcount \\
        -c kafka.spout.parallelism=2
    nimbus status kwc                   # 'sentences' acked: the records read; run produce again for more

or in one process, with the group in the dev cluster's ZooKeeper (its address is printed too)::

    nimbus local examples/kafka_word_count.py --duration 30 \\
        -c kafka.bootstrap.servers=127.0.0.1:9092 -c kafka.topic=sentences -c kafka.group=wordcount \\
        -c kafka.zookeeper.servers=127.0.0.1:<ZooKeeper port> -c kafka.spout.parallelism=2

The topic must exist (the spout never creates one): ``produce`` creates it when missing, then
writes ``--count`` sentences. Every record is a sentence (UTF-8). The spout's tasks share the topic's
partitions through ``/consumers/<kafka.group>/`` in Storm's ZooKeeper (``kafka.zookeeper.root``,
default ``/``) and commit there the offset to resume from; a restarted topology continues where the
last one stopped. Other ``kafka.*`` keys (docs/kafka.md) pass through to the spout.
"""

from __future__ import annotations

from word_count import SENTENCES, SplitSentence, WordCount

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


def produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    """Create ``topic`` with ``partitions`` unless it exists, then write ``count`` sentences to it."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
        print(f"created topic {topic} with {partitions} partitions")
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for i in range(count):
            producer.send(topic, SENTENCES[i % len(SENTENCES)].encode())
        producer.flush()
    finally:
        producer.close()
    print(f"wrote {count} sentences to {topic} at {bootstrap}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Write sentences to a Kafka topic for this example.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce", help="create the topic if missing and write sentences to it")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="kafka.bootstrap.servers (default %(default)s)")
    p.add_argument("--topic", default="sentences", help="topic (default %(default)s)")
    p.add_argument("--partitions", type=int, default=2, help="partitions of a new topic (default %(default)s)")
    p.add_argument("--count", type=int, default=10000, help="sentences to write (default %(default)s)")
    args = parser.parse_args()
    produce(args.bootstrap, args.topic, args.partitions, args.count)
