"""Components of the batch-stream tests (module level, so workers can import them): a spout of
Arrow batches, Spark bolts over batch streams, and bolts that read batch tuples."""

from __future__ import annotations

import pyarrow as pa

from gale import Bolt, Spout
from gale.spark import ARROW_BATCH, SparkBolt


def word_batch(words, start=0) -> pa.Table:
    """A batch of rows (id, word), ids counting from ``start``."""
    return pa.table({"id": pa.array(range(start, start + len(words)), type=pa.int64()),
                     "word": pa.array(list(words), type=pa.string())})


class BatchSpout(Spout):
    """Emits one Arrow table per list of words in ``batches`` (ids numbered across them), with its
    index as message id; replays the ones that fail. ``acked``/``failed`` record the spout's view."""

    def __init__(self, batches=()):
        self.batches = [list(b) for b in batches]

    def declare_output_fields(self, declarer):
        declarer.declare([ARROW_BATCH])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.tables, start = [], 0
        for words in self.batches:
            self.tables.append(word_batch(words, start))
            start += len(words)
        self.next = 0
        self.replay: list[int] = []
        self.acked: set[int] = set()
        self.failed: list[int] = []

    def next_tuple(self):
        if self.replay:
            i = self.replay.pop(0)
        elif self.next < len(self.tables):
            i = self.next
            self.next += 1
        else:
            return
        self.collector.emit([self.tables[i]], msg_id=i)

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)
        if msg_id not in self.acked:
            self.replay.append(msg_id)

    def done(self) -> bool:
        return len(self.acked) == len(self.tables)


class CountBatchWords(SparkBolt):
    """Counts words per micro-batch, the result as batch tuples; raises on the micro-batches
    numbered in ``fail_batches`` (0-based)."""

    output_fields = [ARROW_BATCH]

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


class UpperBatchRows(SparkBolt):
    """Row-wise over a batch stream, emitting ordinary tuples (one per row)."""

    output_fields = ["id", "up"]

    def transform(self, df):
        from pyspark.sql import functions as F

        return df.withColumn("up", F.upper("word")).filter(F.col("word") != "skip")


class UpperBatches(UpperBatchRows):
    """Row-wise over a batch stream, emitting batch tuples with the named columns."""

    output_fields = [ARROW_BATCH]
    output_columns = ["id", "up"]


class BatchTotals(Bolt):
    """Running totals per word from batch tuples of (word, count) rows."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.totals: dict[str, int] = {}
        self.tables = 0

    def execute(self, tup):
        table = tup[ARROW_BATCH]
        assert isinstance(table, pa.Table), type(table)
        self.tables += 1
        for word, count in zip(table.column("word").to_pylist(), table.column("count").to_pylist()):
            self.totals[word] = self.totals.get(word, 0) + count
        self.collector.ack(tup)


class FailBatchHolding(Bolt):
    """Fails a batch tuple with a value of ``bad`` in its column ``field``; acks the rest."""

    def __init__(self, field="word", bad=()):
        self.field = field
        self.bad = set(bad)

    def execute(self, tup):
        if self.bad & set(tup[ARROW_BATCH].column(self.field).to_pylist()):
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


class FailFirstBatch(Bolt):
    """Fails the first attempt of each batch tuple whose first id is in ``ids``; acks the rest."""

    def __init__(self, ids=()):
        self.ids = set(ids)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: set = set()

    def execute(self, tup):
        first = tup[ARROW_BATCH].column("id")[0].as_py()
        if first in self.ids and first not in self.seen:
            self.seen.add(first)
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


class MissingOutputColumn(UpperBatches):
    output_columns = ["id", "score"]


class SchemaOnBatches(CountBatchWords):
    input_schema = "id BIGINT, word STRING"
