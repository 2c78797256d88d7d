"""Word count with its data-parallel stage on Spark — Gale's flagship example.

::

    sentences ──shuffle──> split ──shuffle──> spark-count ──fields(word)──> totals ──global──> top
        │                  (per tuple)        (Spark: groupBy(word).count()    (running     (top-N table
        │                                      per micro-batch)                 totals)      every 2 s)
        └──fields(id)──> archive (Spark sink: sentences to Parquet, idempotent by id)

Every sentence carries a message id and is replayed if any part of its tuple tree fails, so the
running totals are at-least-once exact: the Spark stage anchors each (word, count) row to exactly
the words it counted (lineage proven from the groupBy plan), and the sink acks a sentence only
after the batch holding it is committed to Parquet.

Run it in one process (local mode), printing a live top-N table::

    .venv/bin/python examples/spark_word_count.py --duration 90

or build it with ``topology(conf)`` (like ``examples/word_count.py``). User config keys:
``sparkwc.output.dir`` (default ``/tmp/gale-spark-wordcount``; Parquet lands in
``<dir>/sentences``), ``sparkwc.sentences.per.task`` (0 = forever), ``sparkwc.top.n`` (10),
``sparkwc.sentences.per.sec`` (spout rate per task, 0 = unthrottled; default 2000),
``sparkwc.top.file`` (the top-N table is also written there as JSON every tick; ``make demo``
reads it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time

from gale import BasicBolt, Bolt, ReliableSpout, TopologyBuilder
from gale.spark import SparkBolt, SparkSink

log = logging.getLogger("spark_word_count")  # in a worker, lines go to its log like Gale's own

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]
DEFAULT_OUTPUT = "/tmp/gale-spark-wordcount"


class SentenceSpout(ReliableSpout):
    """(id, sentence) from a fixed corpus; ReliableSpout replays failed sentences before new ones."""

    def __init__(self, limit: int = 0, rate: float = 0.0, seed: int | None = None):
        self.limit = limit
        self.rate = rate
        self.seed = seed

    def declare_output_fields(self, declarer):
        declarer.declare(["id", "sentence"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.rng = random.Random(None if self.seed is None else self.seed + context.task_id)
        self.task = context.task_id
        self.sent = 0
        self.started = time.monotonic()

    def next_message(self):
        if self.limit and self.sent >= self.limit:
            return
        if self.rate and self.sent >= (time.monotonic() - self.started) * self.rate:
            return
        self.emit([f"{self.task}-{self.sent}", SENTENCES[self.rng.randrange(len(SENTENCES))]], msg_id=self.sent)
        self.sent += 1


class SplitSentence(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["word"])

    def execute(self, tup):
        for word in tup["sentence"].split():
            self.collector.emit([word])


class SparkWordCount(SparkBolt):
    """Counts the words of each micro-batch on Spark."""

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "count"])

    def transform(self, df):
        return df.groupBy("word").count()


class RunningTotals(Bolt):
    """Adds each batch's counts to running totals; emits (word, total) anchored to the input."""

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "total"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.totals: dict[str, int] = {}

    def execute(self, tup):
        word = tup["word"]
        self.totals[word] = self.totals.get(word, 0) + tup["count"]
        self.collector.emit([word, self.totals[word]], anchors=tup)
        self.collector.ack(tup)


class TopWords(Bolt):
    """Keeps the latest total of every word; every tick emits (and logs) the top N."""

    def __init__(self, n: int = 10, every_secs: float = 2.0, top_file: str | None = None):
        self.n = n
        self.every_secs = every_secs
        self.top_file = top_file  # also written (atomically) for dashboards such as `make demo`

    def declare_output_fields(self, declarer):
        declarer.declare(["rank", "word", "total"])

    def component_configuration(self):
        return {"topology.tick.tuple.freq.secs": self.every_secs}

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.latest: dict[str, int] = {}

    def top(self) -> list[tuple[str, int]]:
        return sorted(self.latest.items(), key=lambda kv: (-kv[1], kv[0]))[: self.n]

    def execute(self, tup):
        if tup.is_tick():
            top = self.top()
            for rank, (word, total) in enumerate(top, 1):
                self.collector.emit([rank, word, total])
            if top:
                log.info("top-words %s", " ".join(f"{w}={t}" for w, t in top))
                if self.top_file:
                    tmp = f"{self.top_file}.tmp"
                    with open(tmp, "w") as fh:
                        json.dump({"time": time.time(), "top": top}, fh)
                    os.replace(tmp, self.top_file)
            return
        self.latest[tup["word"]] = max(self.latest.get(tup["word"], 0), tup["total"])
        self.collector.ack(tup)


def topology(conf=None):
    conf = conf or {}
    out = str(conf.get("sparkwc.output.dir", DEFAULT_OUTPUT))
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout, int(conf.get("sparkwc.spout.parallelism", 1)), kwargs={
        "limit": int(conf.get("sparkwc.sentences.per.task", 0)),
        "rate": float(conf.get("sparkwc.sentences.per.sec", 2000)),
    })
    builder.set_bolt("split", SplitSentence, 2).shuffle_grouping("sentences")
    builder.set_bolt("spark-count", SparkWordCount, 1).shuffle_grouping("split")
    builder.set_bolt("totals", RunningTotals, 4).fields_grouping("spark-count", ["word"])
    builder.set_bolt("top", TopWords, 1, kwargs={
        "n": int(conf.get("sparkwc.top.n", 10)), "top_file": conf.get("sparkwc.top.file"),
    }).global_grouping("totals")
    builder.set_bolt("archive", SparkSink, 1, kwargs={
        "path": os.path.join(out, "sentences"), "key_fields": ["id"],
    }).fields_grouping("sentences", ["id"])
    return builder.create_topology(name="spark-word-count", conf={
        "topology.max.spout.pending": 5000,
        "topology.spark.batch.size": 10000,
        "topology.spark.batch.millis": 1000,
    })


# ------------------------------------------------------------------------------ local mode


def _component(running, name):
    return [b for ex in running.runtime.executors.values() if ex.component == name
            for b in getattr(ex, "bolts", {}).values()]


def _print_table(running, out_dir, elapsed, n):
    stats = running.component_stats()
    spark = running.runtime.resources.get("spark")
    status = spark.status() if spark is not None else "none"
    count = stats["spark-count"]["extra"]
    archive = stats["archive"]["extra"]
    (top_bolt,) = _component(running, "top")
    lines = [
        f"\n== t={elapsed:5.1f}s  spark={status}  sentences acked={stats['sentences']['acked']} "
        f"failed={stats['sentences']['failed']}  batches={int(count.get('spark_batches', 0))} "
        f"(avg {count.get('spark_batch_latency_ms_avg', 0):.0f} ms)  parquet rows={int(archive.get('spark_sink_rows_written', 0))}",
    ]
    top = top_bolt.top()
    if not top:
        lines.append("   (waiting for the first Spark batch)")
    for rank, (word, total) in enumerate(top[:n], 1):
        lines.append(f"   {rank:2d}. {word:<10} {total:>9}")
    print("\n".join(lines), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Spark word count on a Gale local cluster, with a live top-N table.")
    parser.add_argument("--duration", type=float, default=90.0,
                        help="seconds to run (default 90; Spark takes 15-20 s to start, more on a busy machine)")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help=f"output directory (default {DEFAULT_OUTPUT})")
    parser.add_argument("--top", type=int, default=10, help="words in the table (default 10)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--rate", type=float, default=2000, help="sentences per second (0: unthrottled)")
    args = parser.parse_args(argv)

    from gale import LocalCluster

    conf = {"sparkwc.output.dir": args.output, "sparkwc.top.n": args.top, "sparkwc.sentences.per.sec": args.rate}
    topo = topology(conf)
    out_dir = os.path.join(args.output, "sentences")
    print(f"Spark word count: Spark master {args.master}; Parquet output in {out_dir}", flush=True)
    started = time.monotonic()
    with LocalCluster() as cluster:
        running = cluster.submit_topology("spark-word-count", {**conf, "topology.spark.master": args.master}, topo)
        while time.monotonic() - started < args.duration:
            time.sleep(2.0)
            _print_table(running, out_dir, time.monotonic() - started, args.top)
        running.deactivate()
        time.sleep(3.0)  # let in-flight batches finish
        _print_table(running, out_dir, time.monotonic() - started, args.top)
        errors = {c: e[-1].splitlines()[0] for c, e in running.errors.items() if e}
    if errors:
        print(f"errors: {errors}", flush=True)
    batches = [d for d in os.listdir(out_dir) if d.startswith("gale_batch=")] if os.path.isdir(out_dir) else []
    if not batches:
        print(f"Parquet: no batch committed to {out_dir} yet (run longer: --duration)", flush=True)
        return 0
    import pyarrow.parquet as pq

    table = pq.read_table(out_dir)
    print(f"Parquet: {table.num_rows} sentences ({len(set(table.column('id').to_pylist()))} distinct ids) in "
          f"{len(batches)} batches under {out_dir}; read it with spark.read.parquet({out_dir!r})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
