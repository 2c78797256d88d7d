"""A Spark pipeline on the cluster: durable sentences → words → a row-wise Spark stage → an
idempotent Spark sink to Parquet keyed by (id, pos). Exact final counts are read back from the
Parquet output, so replays after a worker is killed mid-batch must neither lose nor duplicate."""

from __future__ import annotations

from pyspark.sql import functions as F

from gale import BasicBolt, TopologyBuilder
from durable_wc import DurableSpout
from gale.spark import SparkBolt, SparkSink


class Words(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["id", "pos", "word"])

    def execute(self, tup):
        for pos, word in enumerate(tup["sentence"].split()):
            self.collector.emit([tup["id"], pos, word])


class Normalize(SparkBolt):
    """Row-wise: each output row anchors to exactly its input."""

    output_fields = ["id", "pos", "word"]

    def transform(self, df):
        return df.withColumn("word", F.lower(F.trim(df["word"])))


def topology(conf=None):
    conf = conf or {}
    b = TopologyBuilder()
    b.set_spout("source", DurableSpout, 1)
    b.set_bolt("words", Words, 2).shuffle_grouping("source")
    b.set_bolt("normalize", Normalize, 1).shuffle_grouping("words")
    b.set_bolt("sink", SparkSink, 1, kwargs={"path": conf["test.parquet"], "key_fields": ["id", "pos"]}) \
        .shuffle_grouping("normalize")
    return b.create_topology(conf={
        "topology.workers": 1, "topology.max.spout.pending": 300, "topology.message.timeout.secs": 60,
        "topology.spark.batch.size": 2000, "topology.spark.batch.millis": 500,
        "topology.spark.master": "local[2]",
    })
