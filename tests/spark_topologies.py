"""Components of the Spark-stage tests (module level, so workers can import them)."""

from __future__ import annotations

from gale import Bolt, Spout
from gale.spark import ROW_ID, SparkBolt, SparkSink


class RowSpout(Spout):
    """Emits ``rows`` (lists of values, fields ``fields``) with their index as message id and
    replays the ones that fail. ``acked``/``failed`` record the spout's view."""

    def __init__(self, rows=(), fields=("id", "word")):
        self.rows = [list(r) for r in rows]
        self.fields = list(fields)

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.next = 0
        self.replay: list[int] = []
        self.acked: set[int] = set()
        self.failed: list[int] = []
        self.emits = 0

    def next_tuple(self):
        if self.replay:
            i = self.replay.pop(0)
        elif self.next < len(self.rows):
            i = self.next
            self.next += 1
        else:
            return
        self.emits += 1
        self.collector.emit(self.rows[i], msg_id=i)

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)
        if msg_id not in self.acked:
            self.replay.append(msg_id)

    def done(self) -> bool:
        return len(self.acked) == len(self.rows)


class CountWords(SparkBolt):
    """Counts words per batch; raises on the batches numbered in ``fail_batches`` (0-based)."""

    output_fields = ["word", "count"]

    def __init__(self, fail_batches=()):
        self.fail_batches = set(fail_batches)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.batches = 0

    def transform(self, df):
        n = self.batches
        self.batches += 1
        if n in self.fail_batches:
            raise RuntimeError(f"injected failure in batch {n}")
        return df.groupBy("word").count()


class UpperWords(SparkBolt):
    """Row-wise: keeps the hidden row id through withColumn/filter."""

    output_fields = ["id", "up"]

    def transform(self, df):
        from pyspark.sql import functions as F

        return df.withColumn("up", F.upper("word")).filter(F.col("word") != "skip")


class UpperNoLineage(SparkBolt):
    """A select that drops the row id: lineage is lost, outputs anchor to the whole batch."""

    output_fields = ["up"]

    def transform(self, df):
        from pyspark.sql import functions as F

        return df.select(F.upper("word").alias("up"))


class UpperUdf(SparkBolt):
    """Row-wise through a Python UDF (starts Spark's Python workers)."""

    output_fields = ["id", "up"]

    def transform(self, df):
        from pyspark.sql import functions as F

        upper = F.udf(lambda s: s.upper(), "string")
        return df.select(ROW_ID, "id", upper("word").alias("up"))


class NotAFrame(SparkBolt):
    output_fields = ["word"]

    def transform(self, df):
        return df.collect()


class MissingField(SparkBolt):
    output_fields = ["word", "score"]

    def transform(self, df):
        return df.select("word")


class Totals(Bolt):
    """Running totals per word (fields-grouped): emits (word, total) anchored to the input."""

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "total"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.totals: dict[str, int] = {}

    def execute(self, tup):
        word, count = tup[0], tup[1]
        self.totals[word] = self.totals.get(word, 0) + count
        self.collector.emit([word, self.totals[word]], anchors=tup)
        self.collector.ack(tup)


class FailField(Bolt):
    """Fails tuples whose field ``field`` is in ``bad``; acks the rest."""

    def __init__(self, field="word", bad=()):
        self.field = field
        self.bad = set(bad)

    def execute(self, tup):
        if tup[self.field] in self.bad:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


class FailFirstAttempt(Bolt):
    """Fails the first tuple it sees for each id in ``ids`` (forcing a replay); acks the rest."""

    def __init__(self, ids=()):
        self.ids = set(ids)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: set = set()

    def key(self, tup):
        return tup["id"]

    def execute(self, tup):
        key = self.key(tup)
        if key in self.ids and key not in self.seen:
            self.seen.add(key)
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


class WordSink(SparkSink):
    """Parquet sink keyed by id (the path comes from the constructor arguments)."""


class PythonCount(SparkBolt):
    """Counts words per batch in plain Python, standing in for a Spark job, so executor tests run
    without a JVM. With ``hang`` (an Event) set, batches containing the word "hang" block on it."""

    output_fields = ["word", "count"]
    hang = None

    def spark_job(self, spark, tuples):
        from gale.worker.spark.stage import BatchResult
        from gale.worker.spark.lineage import Anchoring, Lineage

        if self.hang is not None and any(t["word"] == "hang" for t in tuples):
            self.hang.wait(60)
        groups: dict[str, list[int]] = {}
        for i, t in enumerate(tuples):
            groups.setdefault(t["word"], []).append(i)
        values = [[w, len(ix)] for w, ix in groups.items()]
        anchors = [ix[0] if len(ix) == 1 else tuple(ix) for ix in groups.values()]
        return BatchResult(values=values, anchoring=Anchoring(anchors), lineage=Lineage("keys"))


class LowerCount(SparkBolt):
    """An aggregation over a computed key, carrying lineage with collect_row_ids()."""

    output_fields = ["word", "count"]

    def transform(self, df):
        from pyspark.sql import functions as F

        from gale.spark import collect_row_ids

        return df.groupBy(F.lower("word").alias("word")).agg(F.count("*").alias("count"), collect_row_ids())


def child_main() -> None:
    """A worker-like process for the orphan test: run a topology with a Python-UDF Spark stage
    until its first batch is done, print its Spark processes as JSON, then wait to be killed."""
    import json
    import time

    import psutil

    from gale import TopologyBuilder
    from gale.worker.local import LocalTopology, local_conf

    rows = [[i, f"w{i}"] for i in range(10)]
    b = TopologyBuilder()
    b.set_spout("src", RowSpout, 1, kwargs={"rows": rows})
    b.set_bolt("upper", UpperUdf, 1).shuffle_grouping("src")
    topo = b.create_topology()
    lt = LocalTopology("child", topo, local_conf(topo, {"topology.spark.batch.millis": 100}))
    spout = next(iter(next(ex for ex in lt.runtime.executors.values() if ex.component == "src").spouts.values()))
    from tests.waiting import until

    until(spout.done, 120, "the child's rows acked")
    handle = lt.runtime.resources["spark"]
    tree = [p.pid for p in psutil.Process().children(recursive=True)]
    print(json.dumps({"acked": len(spout.acked), "marker": handle.marker, "jvm_pid": handle.jvm_pid, "tree": tree}),
          flush=True)
    time.sleep(600)  # not a wait: the child idles until the test kills it
