"""Spark sinks: write each micro-batch with a DataFrameWriter, ack only after it committed.

::

    builder.set_bolt("archive", SparkSink, 1, kwargs={
        "path": "/data/sentences", "key_fields": ["id"],          # Parquet by default
    }).fields_grouping("sentences", ["id"])

With a ``path`` the batch is written into a temporary directory, fsynced, and renamed into
``<path>/gale_batch=<id>/`` in one atomic step, and rows whose key was already committed are
skipped, so replays neither duplicate rows nor leave partial files (see
:mod:`gale.worker.spark.commit`). By default a row's key is its input tuple's **lineage**
(the identity of the spout message and the emits it came through, which a replay reproduces)
with its values: a replayed input's rows are written once, and identical rows from different
inputs are all written. ``key_fields`` instead names the fields that identify a row (an event id),
for replays Storm cannot recognise (a source that re-delivers under a new message id).
``dedup=False`` appends every tuple (still atomically per batch). Without a ``path`` (formats such
as ``jdbc`` or ``noop`` that write elsewhere) the batch is written with ``mode`` and options as
given: at-least-once, no dedup.

Override :meth:`SparkSink.prepare_frame` to shape the DataFrame before it is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gale.worker.spark.arrow_batches import rows_in
from gale.worker.spark.bolt import SparkComponent
from gale.worker.spark.commit import (
    FileLayer,
    LocalBatchCommitter,
    batch_id,
    lineage_key,
    random_batch_id,
    row_key,
    unique_key,
)
from gale.worker.spark.stage import BatchResult
from gale.worker.spark.frames import SparkStageError

#: DataFrameWriter formats that write files under a path
FILE_FORMATS = frozenset({"parquet", "orc", "json", "csv", "text", "avro", "xml"})


class SparkSink(SparkComponent):
    """A terminal Spark component writing each micro-batch (Parquet by default)."""

    def __init__(
        self,
        path: str | None = None,
        format: str = "parquet",  # noqa: A002 - DataFrameWriter's own word
        options: Mapping[str, Any] | None = None,
        partition_by: Sequence[str] = (),
        key_fields: Sequence[str] | None = None,
        dedup: bool = True,
        dedup_window_secs: float = 3600.0,
        mode: str = "append",
    ):
        self.path = path
        self.format = format
        self.options = dict(options or {})
        self.partition_by = list(partition_by)
        self.key_fields = list(key_fields) if key_fields is not None else None
        self.dedup = dedup
        self.dedup_window_secs = dedup_window_secs
        self.mode = mode

    def prepare_frame(self, df: Any) -> Any:
        """Shape the batch's DataFrame before it is written (default: as is)."""
        return df

    def file_layer(self) -> FileLayer:
        """The file operations of the commit protocol (a test overrides this to record them)."""
        return FileLayer()

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        cid = context.component_id
        if not isinstance(self.format, str) or not self.format.strip():
            raise ValueError(f"Spark sink {cid!r}: format must be a DataFrameWriter format name such as 'parquet'")
        if self.format.lower() in FILE_FORMATS and not self.path:
            raise ValueError(f"Spark sink {cid!r}: format {self.format!r} writes files and needs a path")
        if self.batch_input and self.key_fields:
            raise ValueError(
                f"Spark sink {cid!r}: key_fields is not supported on a batch stream (its rows are de-duplicated "
                "per input batch tuple, by the tuple's lineage)"
            )
        for name in [] if self.batch_input else [*(self.key_fields or []), *self.partition_by]:
            if name not in self.input_fields:
                raise ValueError(
                    f"Spark sink {cid!r}: field {name!r} (in key_fields/partition_by) is not a field of the "
                    f"subscribed stream, whose fields are {list(self.input_fields)}"
                )
        self.committer: LocalBatchCommitter | None = None
        if self.path:
            try:
                self.committer = LocalBatchCommitter(self.path, cid, context.task_id, self.dedup_window_secs,
                                                     files=self.file_layer())
            except ValueError as exc:
                raise ValueError(f"Spark sink {cid!r}: {exc}") from None
            self.committer.recover()
        self._key_positions = [self.input_fields.index(f) for f in self.key_fields or ()]

    def row_keys(self, tuples: list[Any]) -> list[bytes]:
        """The de-duplication key of each tuple's row: its ``key_fields`` values when set, else its
        lineage with its values (a row from an untracked tuple, which is never replayed, gets a
        key of its own)."""
        if self.key_fields:
            positions = self._key_positions
            return [row_key([t.values[p] for p in positions]) for t in tuples]
        if self.batch_input:  # one key per batch tuple: a replay of its source batch is the same batch
            return [lineage_key(t.lineage, ["$arrow-batch", rows_in(t.values[0])]) if t.lineage else unique_key()
                    for t in tuples]
        return [lineage_key(t.lineage, t.values) if t.lineage else unique_key() for t in tuples]

    def rows_of(self, tuples: list[Any]) -> int:
        """Rows the tuples carry (a batch tuple carries its batch's rows)."""
        return sum(rows_in(t.values[0]) for t in tuples) if self.batch_input else len(tuples)

    # ------------------------------------------------------------------ job thread
    def spark_job(self, spark: Any, tuples: list[Any]) -> BatchResult:
        committer = self.committer
        count = self.rows_of
        if committer is None:
            self._write(self.input_frame(spark, tuples, row_ids=False), None)
            return BatchResult(written=count(tuples))
        if self.dedup:
            committer.refresh()
            keys = self.row_keys(tuples)
            keep = committer.select_new(keys)
            if not keep:
                return BatchResult(deduped=count(tuples))
            kept_keys = [keys[i] for i in keep]
            bid = batch_id(self.component_id, kept_keys)
            if committer.is_committed(bid):
                return BatchResult(deduped=count(tuples))
            rows = [tuples[i] for i in keep] if len(keep) < len(tuples) else tuples
        else:
            kept_keys, rows, bid = [], tuples, random_batch_id()
        tmp = committer.temp_dir(bid)
        try:
            self._write(self.input_frame(spark, rows, row_ids=False), tmp)
            committed = committer.commit(tmp, bid, kept_keys)
        except BaseException:
            committer.abort(tmp)
            raise
        if not committed:
            return BatchResult(deduped=count(tuples))
        written = count(rows)
        return BatchResult(written=written, deduped=count(tuples) - written, committed=1)

    def _write(self, df: Any, path: str | None) -> None:
        cid = self.component_id
        df = self.prepare_frame(df)
        writer = df.write.format(self.format).options(**{k: str(v) for k, v in self.options.items()})
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        try:
            if path is None:
                writer.mode(self.mode).save()
            else:
                writer.mode("errorifexists").save(path)
        except Exception as exc:
            text = str(exc)
            if "DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text:
                raise SparkStageError(
                    f"component {cid!r}: Spark has no DataFrameWriter format {self.format!r} (a typo, or a "
                    "data source package missing from spark.jars.packages)"
                ) from None
            raise
