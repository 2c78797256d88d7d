"""Enriching a stream with a Parquet reference table on Spark (a stream–table join).

::

    clicks ──shuffle──> enrich ──fields(category)──> per-category totals
    (id, user, word)    (Spark: clicks JOIN broadcast(reference) ON word, per micro-batch)

The reference table (word → category, weight) is a Parquet dataset, read once per task and cached
by Spark (re-read every ``refresh_secs``). The join keeps the stream's columns, so the hidden row
id survives it and each enriched row is anchored to exactly the click it came from: a failure
downstream replays only that click.

Run it in one process::

    .venv/bin/python examples/spark_join.py --duration 40

It writes the reference table to ``<dir>/reference`` first (default dir ``/tmp/gale-spark-join``).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

from gale import Bolt, ReliableSpout, TopologyBuilder
from gale.spark import SparkBolt

DEFAULT_DIR = "/tmp/gale-spark-join"
REFERENCE = {
    "apple": ("fruit", 1.0), "banana": ("fruit", 0.5), "cherry": ("fruit", 2.0), "carrot": ("vegetable", 0.8),
    "leek": ("vegetable", 1.2), "salmon": ("fish", 3.5), "trout": ("fish", 2.5), "bread": ("bakery", 1.5),
}
WORDS = sorted(REFERENCE) + ["unknown-thing"]


def write_reference(path: str) -> str:
    """Write the reference table as Parquet (with pyarrow: no Spark needed) if it is missing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not os.path.exists(path):
        os.makedirs(path, exist_ok=True)
        words = sorted(REFERENCE)
        table = pa.table({
            "word": words,
            "category": [REFERENCE[w][0] for w in words],
            "weight": [REFERENCE[w][1] for w in words],
        })
        pq.write_table(table, os.path.join(path, "part-0.parquet"))
    return path


class ClickSpout(ReliableSpout):
    """(id, user, word) click events, replayed on failure (ReliableSpout)."""

    def __init__(self, limit: int = 0, rate: float = 1000.0):
        self.limit = limit
        self.rate = rate

    def declare_output_fields(self, declarer):
        declarer.declare(["id", "user", "word"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.rng = random.Random(context.task_id)
        self.sent = 0
        self.started = time.monotonic()

    def next_message(self):
        if (self.limit and self.sent >= self.limit) or (
            self.rate and self.sent >= (time.monotonic() - self.started) * self.rate
        ):
            return
        self.emit([self.sent, f"user{self.rng.randrange(50)}", self.rng.choice(WORDS)], msg_id=self.sent)
        self.sent += 1


class EnrichClicks(SparkBolt):
    """Joins each micro-batch of clicks with the reference table (broadcast hash join)."""

    input_schema = "id BIGINT, user STRING, word STRING"

    def __init__(self, reference: str, refresh_secs: float = 300.0):
        self.reference = reference
        self.refresh_secs = refresh_secs

    def declare_output_fields(self, declarer):
        declarer.declare(["id", "user", "word", "category", "weight"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self._ref = None
        self._ref_at = 0.0

    def reference_table(self, spark):
        if self._ref is None or time.monotonic() - self._ref_at > self.refresh_secs:
            if self._ref is not None:
                self._ref.unpersist()
            self._ref = spark.read.parquet(self.reference).cache()
            self._ref_at = time.monotonic()
        return self._ref

    def transform(self, df):
        from pyspark.sql import functions as F

        ref = self.reference_table(df.sparkSession)
        return (df.join(F.broadcast(ref), "word", "left")
                  .fillna({"category": "unknown", "weight": 0.0}))


class CategoryTotals(Bolt):
    """Clicks and weighted score per category."""

    def declare_output_fields(self, declarer):
        declarer.declare(["category", "clicks", "score"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.clicks: dict[str, int] = {}
        self.score: dict[str, float] = {}

    def execute(self, tup):
        cat = tup["category"]
        self.clicks[cat] = self.clicks.get(cat, 0) + 1
        self.score[cat] = self.score.get(cat, 0.0) + tup["weight"]
        self.collector.emit([cat, self.clicks[cat], self.score[cat]], anchors=tup)
        self.collector.ack(tup)


def topology(conf=None):
    conf = conf or {}
    base = str(conf.get("sparkjoin.dir", DEFAULT_DIR))
    reference = write_reference(os.path.join(base, "reference"))
    builder = TopologyBuilder()
    builder.set_spout("clicks", ClickSpout, 1, kwargs={
        "limit": int(conf.get("sparkjoin.clicks.per.task", 0)), "rate": float(conf.get("sparkjoin.clicks.per.sec", 1000)),
    })
    builder.set_bolt("enrich", EnrichClicks, 1, kwargs={"reference": reference}).shuffle_grouping("clicks")
    builder.set_bolt("categories", CategoryTotals, 2).fields_grouping("enrich", ["category"])
    return builder.create_topology(name="spark-join", conf={
        "topology.max.spout.pending": 5000,
        "topology.spark.batch.size": 5000,
        "topology.spark.batch.millis": 1000,
    })


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Stream-table join on Spark in a Gale local cluster.")
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--dir", default=DEFAULT_DIR, help=f"working directory (default {DEFAULT_DIR})")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    from gale import LocalCluster

    conf = {"sparkjoin.dir": args.dir}
    topo = topology(conf)
    print(f"Spark join: reference table {os.path.join(args.dir, 'reference')}", flush=True)
    started = time.monotonic()
    with LocalCluster() as cluster:
        running = cluster.submit_topology("spark-join", {**conf, "topology.spark.master": args.master}, topo)
        while time.monotonic() - started < args.duration:
            time.sleep(2.0)
            stats = running.component_stats()
            totals: dict[str, tuple[int, float]] = {}
            for ex in running.runtime.executors.values():
                if ex.component == "categories":
                    for bolt in ex.bolts.values():
                        for cat, n in bolt.clicks.items():
                            totals[cat] = (n, bolt.score[cat])
            spark = running.runtime.resources.get("spark")
            print(f"\n== t={time.monotonic() - started:5.1f}s spark={spark.status() if spark else 'none'} "
                  f"clicks acked={stats['clicks']['acked']} failed={stats['clicks']['failed']} "
                  f"batches={int(stats['enrich']['extra'].get('spark_batches', 0))}", flush=True)
            for cat, (n, score) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
                print(f"   {cat:<10} clicks={n:>7}  score={score:>10.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
