"""Transactional sink benchmark: what committing with the checkpoint costs a word count into PostgreSQL.

Run: ``.venv/bin/python -m benchmarks.bench_sinks [--window SECS] [--repeat R] [--pending N]``

The topology, in local mode: sentences → split ×4 (shuffle) → a stateful count ×4 (fields on word,
1 s checkpoints) → a sink ×2 (fields on word) writing ``(word, count)`` into a PostgreSQL table keyed
by word (Debian's ``postgresql``, started here with prepared transactions allowed). Two sinks:

* ``plain`` — at least once, the usual way: a bolt that gathers tuples and writes each batch (500
  tuples or 0.1 s; the last count per word) with one ``INSERT … ON CONFLICT (word) DO UPDATE`` per
  row in one transaction, then acks the batch;
* ``transactional`` — ``gale.sinks.PostgresSink`` (key ``word``): the checkpoint's rows in one
  transaction per task, ``PREPARE TRANSACTION`` at PREPARE, ``COMMIT PREPARED`` at COMMIT (``staged``:
  the same with ``two_phase=False``, through the staging table).

Prints ``name: value unit`` lines: ``sinks_wordcount_{guarantee}_{plain,transactional,staged}_spout_tuples_per_sec``
(sentences acked per second in steady state: ``--window`` seconds after a 3 s warm-up, best of
``--repeat``, the variants interleaved), ``sinks_wordcount_{guarantee}_{transactional,staged}_ratio``
(over plain; the target is ≥ 0.8), and ``sinks_wordcount_{guarantee}_rows_written_{variant}`` (rows
the sink wrote in the window: the transactional sink writes a word once per checkpoint), for the
state guarantees ``at_least_once`` and ``exactly_once``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import stateful_word_count  # noqa: E402
import word_count  # noqa: E402

from gale import Bolt, LocalCluster, TopologyBuilder  # noqa: E402
from gale.log import configure  # noqa: E402
from gale.pgserver import PostgresServer  # noqa: E402
from gale.sinks import PostgresSink  # noqa: E402

BATCH = 500
TICK_SECS = 0.1


class PlainUpsertSink(Bolt):
    """At least once: batches of (word, count) upserted in one transaction, acked after it commits."""

    def __init__(self, url: str, table: str):
        self.url, self.table = url, table

    def component_configuration(self):
        return {"topology.tick.tuple.freq.secs": TICK_SECS}

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        import psycopg

        self.conn = psycopg.connect(self.url)
        self.sql = (f"INSERT INTO {self.table} (word, count) VALUES (%s, %s) "
                    "ON CONFLICT (word) DO UPDATE SET count = EXCLUDED.count")
        self.batch: list = []

    def execute(self, tup):
        if tup.stream != "__tick":
            self.batch.append(tup)
            if len(self.batch) < BATCH:
                return
        self.flush()

    def flush(self):
        if not self.batch:
            return
        last = {t["word"]: t["count"] for t in self.batch}  # the same rows the transactional sink writes
        with self.conn.cursor() as cur:
            cur.executemany(self.sql, list(last.items()))
        self.conn.commit()
        self.collector.incr_metric("rows_written", len(last))
        for t in self.batch:
            self.collector.ack(t)
        self.batch = []


class Transactional(PostgresSink):
    def records(self, tup):
        return ({"word": tup["word"], "count": tup["count"]},)


def topology(url: str, table: str, variant: str, pending: int | None, guarantee: str):
    b = TopologyBuilder()
    b.set_spout("sentences", word_count.RandomSentenceSpout, 1, kwargs={"seed": 1})
    b.set_bolt("split", word_count.SplitSentence, 4).shuffle_grouping("sentences")
    b.set_bolt("count", stateful_word_count.StatefulWordCount, 4).fields_grouping("split", ["word"])
    if variant == "plain":
        b.set_bolt("sink", PlainUpsertSink, 2, kwargs={"url": url, "table": table}).fields_grouping("count", ["word"])
    else:
        b.set_bolt("sink", Transactional, 2, kwargs={"url": url, "table": table, "key": ["word"],
                                                     "two_phase": variant == "transactional"}
                   ).fields_grouping("count", ["word"])
    return b.create_topology("bench-sinks", {"topology.max.spout.pending": pending,
                                             "topology.state.checkpoint.interval.ms": 1000,
                                             "topology.state.guarantee": guarantee})


def rows_written(running, variant: str) -> int:
    """Rows the sink wrote so far: the plain sink writes each tuple it acks, the transactional one
    what it prepared (a word once per checkpoint and task)."""
    sinks = [ex for ex in running.runtime.executors.values() if ex.component == "sink"]
    if variant == "plain":
        return int(sum(ex.stats.extra.get("rows_written", 0) for ex in sinks))
    return int(sum(ex.stats.extra.get("sink_records_prepared", 0) for ex in sinks))


def run(pg: PostgresServer, variant: str, pending: int | None, guarantee: str, window: float, n: int) -> tuple[float, int]:
    table = f"wc_{variant}_{n}"
    with pg.connect(autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (word text PRIMARY KEY, count bigint NOT NULL)")
    topo = topology(pg.url, table, variant, pending, guarantee)
    with LocalCluster() as cluster:
        running = cluster.submit_topology(f"bench-sinks-{n}", {}, topo)
        spouts = [ex for ex in running.runtime.executors.values() if ex.component == "sentences"]

        def acked() -> int:
            return sum(sum(ex.stats.acked.values()) for ex in spouts)

        time.sleep(3.0)  # benchmark pacing: warm-up, then a timed window
        a1, t1, r1 = acked(), time.perf_counter(), rows_written(running, variant)
        time.sleep(window)
        a2, t2, r2 = acked(), time.perf_counter(), rows_written(running, variant)
    return (a2 - a1) / (t2 - t1), r2 - r1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--pending", type=int, default=20000)
    parser.add_argument("--variants", nargs="*", default=["plain", "transactional", "staged"])
    parser.add_argument("--guarantees", nargs="*", default=["at-least-once", "exactly-once"])
    args = parser.parse_args()
    configure(level="WARNING")
    print(f"# load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)
    with PostgresServer() as pg:
        n = 0
        for guarantee in args.guarantees:
            best: dict[str, float] = {}
            rows: dict[str, int] = {}
            for _ in range(args.repeat):
                for variant in args.variants:  # interleaved: the machine's load falls on each alike
                    n += 1
                    rate, written = run(pg, variant, args.pending, guarantee, args.window, n)
                    if rate > best.get(variant, 0.0):
                        best[variant], rows[variant] = rate, written
            g = guarantee.replace("-", "_")
            for variant, rate in best.items():
                print(f"sinks_wordcount_{g}_{variant}_spout_tuples_per_sec: {rate:.0f} tuples/s", flush=True)
                print(f"sinks_wordcount_{g}_rows_written_{variant}: {rows[variant]} rows", flush=True)
            for variant in ("transactional", "staged"):
                if variant in best and best.get("plain"):
                    print(f"sinks_wordcount_{g}_{variant}_ratio: {best[variant] / best['plain']:.2f}", flush=True)
    print(f"# load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}", flush=True)


if __name__ == "__main__":
    main()
