"""Components of the batch-stream tests (module level, so workers can import them): a spout of
Arrow batches, Spark bolts over batch streams, and bolts that read batch tuples."""

from __future__ import annotations

import pyarrow as pa

from gale import Bolt
from gale.spark import ARROW_BATCH
from tests.spark_topologies import CountWords, FailFirstAttempt, RowSpout, UpperWords


def word_batch(words, start=0) -> pa.Table:
    """A batch of rows (id, word), ids counting from ``start``."""
    return pa.table({"id": pa.array(range(start, start + len(words)), type=pa.int64()),
                     "word": pa.array(list(words), type=pa.string())})


class BatchSpout(RowSpout):
    """Emits one Arrow table per list of words in ``batches`` (ids numbered across them), with its
    index as message id; replays the ones that fail. ``acked``/``failed`` record the spout's view."""

    def __init__(self, batches=()):
        super().__init__((), (ARROW_BATCH,))
        self.batches = [list(b) for b in batches]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.tables, start = [], 0
        for words in self.batches:
            self.tables.append(word_batch(words, start))
            start += len(words)
        self.rows = [[table] for table in self.tables]


class CountBatchWords(CountWords):
    """Counts words per micro-batch, the result as batch tuples; raises on the micro-batches
    numbered in ``fail_batches`` (0-based)."""

    output_fields = [ARROW_BATCH]


class UpperBatchRows(UpperWords):
    """Row-wise over a batch stream, emitting ordinary tuples (one per row)."""


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


class FailFirstBatch(FailFirstAttempt):
    """Fails the first attempt of each batch tuple whose first id is in ``ids``; acks the rest."""

    def key(self, tup):
        return tup[ARROW_BATCH].column("id")[0].as_py()


class MissingOutputColumn(UpperBatches):
    output_columns = ["id", "score"]


class SchemaOnBatches(CountBatchWords):
    input_schema = "id BIGINT, word STRING"
