"""A word count from Kafka whose middle stage is another capability, on a cluster: KafkaSpout (2 tasks;
each record's value is a word) → ``words`` → StatefulCount (fields-grouped, state in the provider).
``test.middle`` picks the middle stage: ``shell`` (an unmodified pystorm bolt, ``shell_words.py``,
as a subprocess) or ``spark`` (a Spark batch stage). ``test.guarantee``: at-least-once or
exactly-once (default). Config: the ``kafka.*`` keys and the state keys, as ``eo_kafka_wc``."""

from __future__ import annotations

import sys

from stateful_wc import StatefulCount

from gale import ShellBolt, TopologyBuilder
from gale.connectors import KafkaSpout
from gale.spark import SparkBolt


class ShellWords(ShellBolt):
    command = [sys.executable, "shell_words.py"]
    outputs = ["word"]


class SparkWords(SparkBolt):
    output_fields = ["word"]

    def transform(self, df):
        return df.selectExpr("value AS word")


def topology(conf=None):
    conf = conf or {}
    middle = {"shell": ShellWords, "spark": SparkWords}[conf.get("test.middle", "shell")]
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 2, kwargs={"fields": ["value"]})
    b.set_bolt("words", middle, 1).shuffle_grouping("kafka")
    b.set_bolt("count", StatefulCount, 2).fields_grouping("words", ["word"])
    return b.create_topology(conf={"topology.workers": 2, "topology.max.spout.pending": 100,
                                   "topology.state.guarantee": conf.get("test.guarantee", "exactly-once"),
                                   "topology.state.checkpoint.interval.ms": 200,
                                   "topology.spark.master": "local[1]", "topology.spark.batch.millis": 200})
