"""A Spark pipeline for a Spark standalone cluster: durable sentences → words → a Spark stage whose
Python UDFs come from this directory's ``wordlib`` → an idempotent Spark sink to Parquet keyed by
(id, pos). The UDFs run on the cluster's executors, which see the topology's code only through
the archive Gale adds with ``addPyFile``. The spout logs the ids it is told failed
(``failed-<index>.log``), so a test can count what was replayed; ``<test.state.dir>/hold`` holds
the UDF mid-batch (see ``wordlib``).

Config: ``test.input``, ``test.state.dir``, ``test.parquet``, ``test.spark.master``.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import wordlib
from gale import BasicBolt, Spout, TopologyBuilder
from gale.spark import SparkBolt, SparkSink


class DurableSpout(Spout):
    """Replays every id of ``test.input`` not acked yet (``acked-<index>.log``), and replays failed ids."""

    def declare_output_fields(self, declarer):
        declarer.declare(["id", "sentence"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        state = Path(conf["test.state.dir"])
        state.mkdir(parents=True, exist_ok=True)
        index = context.this_task_index
        acked = state / f"acked-{index}.log"
        done = {int(x) for x in acked.read_text().split()} if acked.exists() else set()
        self.sentences = {}
        with open(conf["test.input"]) as fh:
            for line in fh:
                i, _, s = line.rstrip("\n").partition("\t")
                if int(i) not in done:
                    self.sentences[int(i)] = s
        self.queue = sorted(self.sentences, reverse=True)
        self.acked_log = open(acked, "a")
        self.failed_log = open(state / f"failed-{index}.log", "a")

    def next_tuple(self):
        if self.queue:
            i = self.queue.pop()
            self.collector.emit([i, self.sentences[i]], msg_id=i)

    def ack(self, msg_id):
        self.acked_log.write(f"{msg_id}\n")
        self.acked_log.flush()
        self.sentences.pop(msg_id, None)

    def fail(self, msg_id):
        self.failed_log.write(f"{msg_id}\n")
        self.failed_log.flush()
        if msg_id in self.sentences:
            self.queue.append(msg_id)

    def close(self):
        self.acked_log.close()
        self.failed_log.close()


class Words(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["id", "pos", "word"])

    def execute(self, tup):
        for pos, word in enumerate(tup["sentence"].split()):
            self.collector.emit([tup["id"], pos, word])


class Normalize(SparkBolt):
    """Row-wise through Python UDFs of ``wordlib``: each output row anchors to its one input."""

    output_fields = ["id", "pos", "word", "where"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.control = str(conf["test.state.dir"])

    def transform(self, df):
        normalize = F.udf(wordlib.normalize, StringType())
        where = F.udf(wordlib.where, StringType())
        return df.withColumn("word", normalize(df["word"], F.lit(self.control))).withColumn("where", where())


def topology(conf=None):
    conf = conf or {}
    b = TopologyBuilder()
    b.set_spout("source", DurableSpout, 1)
    b.set_bolt("words", Words, 2).shuffle_grouping("source")
    b.set_bolt("normalize", Normalize, 1).shuffle_grouping("words")
    b.set_bolt("sink", SparkSink, 1, kwargs={"path": conf["test.parquet"], "key_fields": ["id", "pos"]}) \
        .shuffle_grouping("normalize")
    return b.create_topology(conf={
        "topology.workers": 1, "topology.max.spout.pending": 400, "topology.message.timeout.secs": 60,
        "topology.spark.batch.size": 1000, "topology.spark.batch.millis": 500,
        "topology.spark.master": conf["test.spark.master"],
        "topology.spark.conf": {
            "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m", "spark.executor.cores": 1, "spark.cores.max": 2,
            "spark.sql.shuffle.partitions": 2, "spark.default.parallelism": 2,
            # an executor lost mid-job fails the job (and so the batch) instead of retrying its tasks
            "spark.task.maxFailures": 1,
        },
    })
