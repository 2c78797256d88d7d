"""Spark stage benchmark: throughput vs batch size, per-batch overhead, latency added.

Run: ``.venv/bin/python -m benchmarks.bench_spark [--quick]``

One Spark application (``local[2]``) serves every measurement. The stage is a word count per
micro-batch (``groupBy("word").count()`` over a 1000-word vocabulary, lineage proven from the
plan); the comparison is the same count as an ordinary per-tuple bolt (a dict, one emit per
input, anchored). Everything runs in one local-mode worker with the acker on. Prints
``name: value unit`` lines:

* ``spark_start_secs`` — the background start of the Spark application;
* ``spark_batch_overhead_ms`` — median time of a 1-row batch through the stage's job
  (createDataFrame from Arrow, the transform, ``toArrow``): the fixed cost of one batch;
* ``spark_job_rows_per_sec[batch=N]`` — the Spark job alone on an N-row batch;
* ``spark_stage_rows_per_sec[batch=N]`` — spout → Spark stage → acking bolt, rows acked per
  second end to end, for N = 1k, 10k, 100k (``topology.max.spout.pending`` = 2 N; 30, 10 and 5
  batches), with its ratio to the job alone and the CPU per row of the worker process (all of
  its Python: spout, acker, stage, sink) and of the Spark JVM;
* ``spark_job_rows_per_sec[batch=100000, arrow]`` — the job alone on batch tuples (Arrow in, Arrow
  out); ``spark_stage_batch_rows_per_sec[batch=100000]`` — the stage on a batch stream: the spout
  emits 10k-row Arrow tables (one message id each), the stage concatenates ten per micro-batch
  and emits its result as batch tuples; with its ratio to the job alone (tuples in) and to the
  job on Arrow input (each the mean of a measurement just before and just after it), the share
  of the time a Spark job of the stage was running, and the CPU per row (three runs);
* ``spout_to_bolt_rows_per_sec`` — the floor under every stage here: the spout straight into the
  acking bolt, with its CPU per row;
* ``per_tuple_bolt_rows_per_sec`` — the same topology with the per-tuple bolt;
* ``spark_stage_complete_latency_ms[millis=M]`` / ``per_tuple_complete_latency_ms`` — spout
  complete latency at a steady 2000 rows/s with batches cut by time every M ms, and the latency
  the stage adds over the per-tuple bolt.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from typing import Any

import pyarrow as pa

from gale import Bolt, Spout, TopologyBuilder
from gale.config_keys import Config
from gale.log import configure
from gale.topology.tuple import Fields, Tuple
from gale.worker.local import LocalTopology, local_conf
from gale.spark import ARROW_BATCH, SparkBolt
from gale.worker.spark.session import acquire_spark, spark_settings

VOCABULARY = [f"w{i:04d}" for i in range(1000)]
#: rows per batch tuple of the batch-stream measurement
BATCH_CHUNK = 10000
#: alternations of (job alone, batch-fed stage) in a full run
BATCH_RUNS = 3
#: the topology config every run shares (one Spark application serves them all)
SPARK_CONF = {"topology.spark.conf": {"spark.log.level": "ERROR"}}


class BenchSpout(Spout):
    """Emits ``n`` rows (id, word) with message ids, at ``rate`` rows/s (0: as fast as allowed)."""

    def __init__(self, n: int = 0, rate: float = 0.0):
        self.n = n
        self.rate = rate

    def declare_output_fields(self, declarer):
        declarer.declare(["id", "word"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0
        self.acked = 0
        self.failed = 0
        self.first_emit = 0.0
        self.last_ack = 0.0

    def next_tuple(self):
        if self.i >= self.n:
            return
        if self.rate and self.first_emit and self.i >= (time.perf_counter() - self.first_emit) * self.rate:
            return
        if not self.first_emit:
            self.first_emit = time.perf_counter()
        self.collector.emit([self.i, VOCABULARY[self.i % len(VOCABULARY)]], msg_id=self.i)
        self.i += 1

    def ack(self, msg_id):
        self.acked += 1
        self.last_ack = time.perf_counter()

    def fail(self, msg_id):
        self.failed += 1


class BatchSpout(BenchSpout):
    """Emits the rows of :class:`BenchSpout` as batch tuples: one ``pyarrow.Table`` of ``chunk``
    rows per tuple, one message id per table (a source that reads whole batches, as a Parquet
    file or a Kafka poll would). No rate limit."""

    def __init__(self, n: int = 0, chunk: int = 10000):
        super().__init__(n)
        self.chunk = chunk

    def declare_output_fields(self, declarer):
        declarer.declare([ARROW_BATCH])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.tables = [word_table(i, min(self.chunk, self.n - i)) for i in range(0, self.n, self.chunk)]

    def next_tuple(self):
        if self.i >= len(self.tables):
            return
        if not self.first_emit:
            self.first_emit = time.perf_counter()
        self.collector.emit([self.tables[self.i]], msg_id=self.i)
        self.i += 1

    def ack(self, msg_id):
        self.acked += self.tables[msg_id].num_rows
        self.last_ack = time.perf_counter()

    def fail(self, msg_id):
        self.failed += self.tables[msg_id].num_rows


def word_table(start: int, n: int) -> pa.Table:
    """Rows ``start .. start + n - 1`` of the benchmark's data as an Arrow table (id, word)."""
    ids = pa.array(range(start, start + n), type=pa.int64())
    words = pa.array(VOCABULARY * (n // len(VOCABULARY) + 2)).slice(start % len(VOCABULARY), n)
    return pa.table({"id": ids, "word": words})


class SparkCount(SparkBolt):
    output_fields = ["word", "count"]

    def transform(self, df):
        return df.groupBy("word").count()


class SparkCountBatches(SparkCount):
    """The same count over a batch stream, its result emitted as batch tuples."""

    output_fields = [ARROW_BATCH]


class PythonCount(Bolt):
    """The same stage tuple by tuple: running count per word, one anchored emit per input."""

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "count"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup):
        word = tup[1]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, self.counts[word]], anchors=tup)
        self.collector.ack(tup)


class AckAll(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def run_topology(stage: type, n: int, conf: dict[str, Any], rate: float = 0.0, timeout: float = 600.0,
                 chunk: int = 0):
    """Run ``n`` rows through spout → stage → sink (no stage: spout → sink); returns (rows/s, spout
    stats). ``chunk``: the spout emits batch tuples of that many rows (:class:`BatchSpout`)."""
    b = TopologyBuilder()
    if chunk:
        b.set_spout("src", BatchSpout, 1, kwargs={"n": n, "chunk": chunk})
    else:
        b.set_spout("src", BenchSpout, 1, kwargs={"n": n, "rate": rate})
    if stage is None:
        b.set_bolt("sink", AckAll, 1).shuffle_grouping("src")
    else:
        b.set_bolt("stage", stage, 1).shuffle_grouping("src")
        b.set_bolt("sink", AckAll, 1).shuffle_grouping("stage")
    topo = b.create_topology()
    lt = LocalTopology("bench", topo, local_conf(topo, {**SPARK_CONF, **conf}))
    spout = next(s for ex in lt.runtime.executors.values() if ex.component == "src" for s in ex.spouts.values())
    try:
        deadline = time.monotonic() + timeout
        while spout.acked + spout.failed < n and time.monotonic() < deadline:
            time.sleep(0.01)
        stats = lt.component_stats()
    finally:
        lt.kill()
    if spout.failed or spout.acked < n:
        raise RuntimeError(f"{getattr(stage, '__name__', 'spout')}: {spout.acked} acked, {spout.failed} failed of {n}; errors {lt.errors}")
    return n / (spout.last_ack - spout.first_emit), stats


def jvm_cpu_secs(pid: int | None) -> float:
    """User + system CPU seconds of a process (the Spark JVM), from /proc; 0 when unknown."""
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def job_bolt(batches: bool = False) -> SparkCount:
    """The stage's bolt outside a topology (its Spark job called directly)."""
    bolt = SparkCountBatches() if batches else SparkCount()
    bolt.input_fields = [ARROW_BATCH] if batches else ["id", "word"]
    bolt.batch_input = bolt.batch_output = batches
    bolt.declared_fields = list(bolt.output_fields)
    bolt._arrow_types = None
    bolt.context = type("Ctx", (), {"component_id": "stage"})()
    return bolt


def job_times(session: Any, sizes: list[int], repeats: int, chunk: int = 0, warm: bool = True) -> dict[int, float]:
    """Median seconds of the stage's Spark job on batches of each size (no topology); with
    ``chunk``, on batch tuples of ``chunk`` rows (Arrow in and out)."""
    bolt = job_bolt(bool(chunk))
    fields = Fields([ARROW_BATCH] if chunk else ["id", "word"], "src:default")

    def batch_of(size: int) -> list[Tuple]:
        if chunk:
            return [Tuple([word_table(i, min(chunk, size - i))], fields, "src", "default", 1, None)
                    for i in range(0, size, chunk)]
        return [Tuple([i, VOCABULARY[i % len(VOCABULARY)]], fields, "src", "default", 1, None) for i in range(size)]

    out = {}
    for _ in range(15 if warm else 0):  # the JVM's first jobs are slow (class loading, JIT)
        bolt.spark_job(session, batch_of(1000))
    for size in sizes:
        batch = batch_of(size)
        bolt.spark_job(session, batch)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            bolt.spark_job(session, batch)
            times.append(time.perf_counter() - t0)
        out[size] = statistics.median(times)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows (a smoke run, not the published figures)")
    args = parser.parse_args(argv)
    configure(fmt="console", level="WARNING")
    logging.getLogger("py4j").setLevel(logging.ERROR)
    scale = 0.2 if args.quick else 1.0

    t0 = time.monotonic()
    handle = acquire_spark(spark_settings(Config.resolve(SPARK_CONF, allow_user_keys=False)))
    try:
        session = handle.wait(300)
        print(f"spark_start_secs: {time.monotonic() - t0:.1f} s", flush=True)

        jobs = job_times(session, [1, 1000, 10000, 100000], repeats=3 if args.quick else 7)
        print(f"spark_batch_overhead_ms: {jobs[1] * 1000:.0f} ms", flush=True)
        for size in (1000, 10000, 100000):
            print(f"spark_job_rows_per_sec[batch={size}]: {size / jobs[size]:.0f} rows/s", flush=True)

        jvm = handle.jvm_pid
        for size, n in ((1000, 30000), (10000, 100000), (100000, 500000)):
            n = max(size, int(n * scale))
            cpu0, jvm0 = time.process_time(), jvm_cpu_secs(jvm)
            rate, stats = run_topology(SparkCount, n, {
                "topology.spark.batch.size": size, "topology.spark.batch.millis": 5000,
                "topology.max.spout.pending": 2 * size,
            })
            py_us, jvm_us = (time.process_time() - cpu0) / n * 1e6, (jvm_cpu_secs(jvm) - jvm0) / n * 1e6
            extra = stats["stage"]["extra"]
            print(f"spark_stage_rows_per_sec[batch={size}]: {rate:.0f} rows/s "
                  f"({rate * jobs[size] / size:.2f} of the job alone; {int(extra['spark_batches'])} batches, "
                  f"avg {extra['spark_batch_latency_ms_avg']:.0f} ms, avg size {extra['spark_batch_size_avg']:.0f}; "
                  f"CPU per row: worker {py_us:.1f} us, JVM {jvm_us:.1f} us)", flush=True)

        # the batch-fed stage between two measurements of the job alone (both inputs), so each
        # ratio compares runs seconds apart on this shared machine: against the mean of the two
        size, n = 100000, max(100000, int(1000000 * scale))
        repeats = 3 if args.quick else 5

        def job_rates() -> tuple[float, float]:
            tuples_in = job_times(session, [size], repeats, warm=False)[size]
            arrow_in = job_times(session, [size], repeats, chunk=BATCH_CHUNK, warm=False)[size]
            return size / tuples_in, size / arrow_in

        after = job_rates()
        for run in range(1 if args.quick else BATCH_RUNS):
            before = after
            cpu0, jvm0 = time.process_time(), jvm_cpu_secs(jvm)
            rate, stats = run_topology(SparkCountBatches, n, {
                "topology.spark.batch.size": size, "topology.spark.batch.millis": 5000,
                "topology.max.spout.pending": 2 * size // BATCH_CHUNK,
            }, chunk=BATCH_CHUNK)
            py_us, jvm_us = (time.process_time() - cpu0) / n * 1e6, (jvm_cpu_secs(jvm) - jvm0) / n * 1e6
            after = job_rates()
            job, arrow_job = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
            extra = stats["stage"]["extra"]
            busy = rate * extra["spark_batch_latency_ms_avg"] / 1000 / size
            print(f"spark_job_rows_per_sec[batch={size}, arrow]: {arrow_job:.0f} rows/s (the job on {BATCH_CHUNK}-row "
                  f"batch tuples, Arrow in and out, before/after the stage: {before[1]:.0f}/{after[1]:.0f}; "
                  f"with tuples in: {before[0]:.0f}/{after[0]:.0f})", flush=True)
            print(f"spark_stage_batch_rows_per_sec[batch={size}]: {rate:.0f} rows/s "
                  f"({rate / job:.2f} of the job alone, {rate / arrow_job:.2f} of the job on Arrow input; "
                  f"{BATCH_CHUNK}-row batch tuples; {int(extra['spark_batches'])} batches, "
                  f"avg {extra['spark_batch_latency_ms_avg']:.0f} ms, avg size {extra['spark_batch_size_avg']:.0f}, "
                  f"a job running {busy:.0%} of the time; "
                  f"CPU per row: worker {py_us:.2f} us, JVM {jvm_us:.1f} us)", flush=True)

        n = max(10000, int(300000 * scale))
        cpu0 = time.process_time()
        rate, _ = run_topology(None, n, {"topology.max.spout.pending": 20000})
        print(f"spout_to_bolt_rows_per_sec: {rate:.0f} rows/s "
              f"(CPU per row: worker {(time.process_time() - cpu0) / n * 1e6:.1f} us)", flush=True)

        rate, _ = run_topology(PythonCount, max(10000, int(300000 * scale)), {"topology.max.spout.pending": 20000})
        print(f"per_tuple_bolt_rows_per_sec: {rate:.0f} rows/s", flush=True)

        n = max(4000, int(30000 * scale))  # 15 s at 2000 rows/s
        _, stats = run_topology(PythonCount, n, {}, rate=2000)
        base = stats["src"]["complete_latency_ms"]
        print(f"per_tuple_complete_latency_ms: {base:.1f} ms", flush=True)
        for millis in (200, 1000):
            _, stats = run_topology(SparkCount, n, {
                "topology.spark.batch.size": 100000, "topology.spark.batch.millis": millis,
            }, rate=2000)
            lat = stats["src"]["complete_latency_ms"]
            print(f"spark_stage_complete_latency_ms[millis={millis}]: {lat:.0f} ms "
                  f"(adds {lat - base:.0f} ms; avg batch {stats['stage']['extra']['spark_batch_size_avg']:.0f} rows, "
                  f"{stats['stage']['extra']['spark_batch_latency_ms_avg']:.0f} ms)", flush=True)
    finally:
        handle.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
