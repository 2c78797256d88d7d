"""Spark bolts: micro-batches of tuples in, a DataFrame transform, anchored tuples out.

::

    from pyspark.sql import functions as F
    from gale.worker.spark import SparkBolt

    class CountWords(SparkBolt):
        output_fields = ["word", "count"]

        def transform(self, df):            # df has the input stream's fields as columns
            return df.groupBy("word").count()

    builder.set_bolt("count", CountWords, 1).shuffle_grouping("split")

The executor's body (:class:`gale.worker.spark.stage.SparkStage`) collects input tuples into
batches of ``topology.spark.batch.size`` tuples or ``topology.spark.batch.millis`` of waiting,
whichever comes first; hands each batch to :meth:`SparkBolt.transform` as a DataFrame on a Spark
job thread; then, back on the executor thread, emits every result row anchored to the input
tuples it derives from (see :mod:`gale.worker.spark.lineage`) and acks the batch's inputs. If the
transform (or Spark) raises, every tuple of the batch fails and the error is reported.

``transform`` runs on a job thread, not the executor thread: it must not use ``self.collector``.
The result may keep any extra columns; the declared output fields are selected by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gale.topology.components import Bolt
from gale.topology.tuple import DEFAULT_STREAM
from gale.worker.spark.stage import BatchResult
from gale.worker.spark.arrow_batches import (
    batches_to_table,
    int64_ids,
    is_batch_stream,
    key_index_of_inputs,
    split_by_anchor,
    split_by_row_id,
)
from gale.worker.spark.frames import (
    SparkStageError,
    groups_in_arrow,
    key_index,
    rows_of,
    table_columns,
    tuples_to_arrow,
)
from gale.worker.spark.lineage import (
    HIDDEN_COLUMNS,
    ROW_ID,
    ROW_IDS,
    Anchoring,
    Lineage,
    from_key_index,
    from_keys,
    from_row_id_lists,
    from_row_ids,
    hashable_key,
    whole_batch,
)
from gale.worker.spark.plan import grouping_keys


def collect_row_ids() -> Any:
    """The aggregate expression that carries lineage through any aggregation::

        df.groupBy(F.lower("word").alias("word")).agg(F.count("*").alias("n"), collect_row_ids())
    """
    from pyspark.sql import functions as F

    # a set: the rows of one input batch tuple (batch streams) share one row id
    return F.collect_set(F.col(ROW_ID)).alias(ROW_IDS)


def _col(name: str) -> Any:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


class SparkComponent(Bolt):
    """Shared base of Spark bolts and sinks: run in micro-batches by a Spark batch executor."""

    uses_spark = True
    #: its tasks run in Spark micro-batches (``gale.worker.spark.stage``; recorded in the definition)
    body_kind = "spark"
    #: optional Spark DDL of the input columns, e.g. ``"word STRING, n BIGINT"`` (default: inferred)
    input_schema: str | None = None

    #: the subscribed stream's fields, set by the executor before :meth:`prepare`
    input_fields: list[str]
    #: whether the subscribed stream is a batch stream (its one field is ``ARROW_BATCH``)
    batch_input: bool = False

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self._arrow_types: dict[str, Any] | None = None
        if self.batch_input and self.input_schema:
            raise ValueError(
                f"Spark component {context.component_id!r}: input_schema does not apply to a batch stream (its "
                "Arrow batches carry their schema; cast them in the spout, or in transform())"
            )

    def execute(self, tup) -> None:
        raise TypeError(
            f"{type(self).__name__} is a Spark component: it runs in Spark micro-batches, "
            "not tuple by tuple"
        )

    @property
    def component_id(self) -> str:
        return self.context.component_id

    def input_table(self, spark: Any, tuples: Sequence[Any], row_ids: bool = True) -> Any:
        """The batch as a ``pyarrow.Table``: the input fields (for a batch stream: the batches'
        columns, concatenated) plus (optionally) the hidden row id."""
        if self.batch_input:
            return batches_to_table(self.component_id, tuples, row_ids)
        return tuples_to_arrow(self.component_id, tuples, self.input_fields, self._input_types(spark), row_ids)

    def input_frame(self, spark: Any, tuples: Sequence[Any], row_ids: bool = True) -> Any:
        """The batch as a DataFrame: the input fields plus (optionally) the hidden row id."""
        return spark.createDataFrame(self.input_table(spark, tuples, row_ids))

    def _input_types(self, spark: Any) -> dict[str, Any] | None:
        if not self.input_schema:
            return None
        if self._arrow_types is None:
            from pyspark.sql.pandas.types import to_arrow_type

            try:
                struct = spark.createDataFrame([], self.input_schema).schema
            except Exception as exc:  # noqa: BLE001
                raise SparkStageError(
                    f"component {self.component_id!r}: input_schema {self.input_schema!r} is not a valid Spark DDL "
                    f"schema: {exc}"
                ) from exc
            names = [f.name for f in struct.fields]
            if sorted(names) != sorted(self.input_fields):
                raise SparkStageError(
                    f"component {self.component_id!r}: input_schema names columns {names}, but the subscribed "
                    f"stream's fields are {list(self.input_fields)}"
                )
            self._arrow_types = {f.name: to_arrow_type(f.dataType) for f in struct.fields}
        return self._arrow_types

    def spark_job(self, spark: Any, tuples: list[Any]) -> BatchResult:  # pragma: no cover - abstract
        """Run one batch on Spark (job thread). Raise to fail every tuple of the batch."""
        raise NotImplementedError


class SparkBolt(SparkComponent):
    """A bolt whose work is a DataFrame transform over micro-batches. Override :meth:`transform`
    and declare the output fields as any component does (``output_fields = [...]`` or
    ``declare_output_fields``). Declaring the one field ``ARROW_BATCH`` makes the output a batch
    stream: the result rows go out as ``pyarrow.Table`` values, one tuple per group of rows with the
    same anchors, with the columns ``output_columns`` (default: all but the hidden ones)."""

    #: batch output only: the result columns each output table carries (None: all but the hidden ones)
    output_columns: Sequence[str] | None = None

    def transform(self, df: Any) -> Any:  # pragma: no cover - abstract
        """Return a DataFrame with (at least) the declared output fields as columns."""
        raise NotImplementedError

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        streams = context.component_streams.get(context.component_id, {})
        if DEFAULT_STREAM not in streams:
            raise TypeError(
                f"Spark bolt {context.component_id!r} declares no output fields: set output_fields = [...] "
                "(or use SparkSink for a stage that only writes)"
            )
        self.declared_fields = list(streams[DEFAULT_STREAM])
        #: the output is a batch stream: each output tuple carries an Arrow table of result rows
        self.batch_output = is_batch_stream(self.declared_fields)

    # ------------------------------------------------------------------ job thread
    def spark_job(self, spark: Any, tuples: list[Any]) -> BatchResult:
        from pyspark.sql import DataFrame

        cid = self.component_id
        table_in = self.input_table(spark, tuples)
        df = spark.createDataFrame(table_in)
        out = self.transform(df)
        if not isinstance(out, DataFrame):
            raise SparkStageError(
                f"component {cid!r}: transform() must return a pyspark.sql.DataFrame, got {type(out).__name__}"
            )
        columns = list(out.columns)
        data = self.output_data_columns(columns)
        lineage = self.lineage_of(out, df, columns)
        wanted = data + [c for c in lineage.columns() if c not in data]
        table = out.select(*[_col(c) for c in wanted]).toArrow()
        n_in, n_out = len(tuples), table.num_rows
        if self.batch_output:
            data_table = table.select(data)
            if lineage.mode == "row":
                ids = int64_ids(table.column(ROW_ID))
                ids[(ids < 0) | (ids >= n_in)] = -1
                tables, anchors = split_by_row_id(data_table, ids)
                anchoring = Anchoring(anchors, int((ids < 0).sum()))
            else:
                by_row = self.anchoring_of(lineage, table, table_in, tuples)
                tables, anchors = split_by_anchor(data_table, by_row.anchors) if n_out else ([], [])
                anchoring = Anchoring(anchors, by_row.fallback_rows)
            return BatchResult(values=[[t] for t in tables], anchoring=anchoring, lineage=lineage, rows_out=n_out)
        values = rows_of(table_columns(table, data), n_out)
        return BatchResult(values=values, anchoring=self.anchoring_of(lineage, table, table_in, tuples),
                           lineage=lineage)

    def output_data_columns(self, columns: list[str]) -> list[str]:
        """The output columns emitted: the declared fields, or for a batch output the
        ``output_columns`` (default: every column but the hidden ones). Raises if any is missing."""
        if self.batch_output:
            if self.output_columns is None:
                return [c for c in columns if c not in HIDDEN_COLUMNS]
            wanted, what = list(self.output_columns), "output_columns"
        else:
            wanted, what = list(self.declared_fields), "declared output field(s)"
        missing = [f for f in wanted if f not in columns]
        if missing:
            shown = [c for c in columns if c not in HIDDEN_COLUMNS]
            raise SparkStageError(
                f"component {self.component_id!r}: transform() returned columns {shown}, which lack the {what} "
                f"{missing} (declared: {wanted})"
            )
        return wanted

    def anchoring_of(self, lineage: Lineage, table: Any, table_in: Any, tuples: list[Any]) -> Anchoring:
        """Each output row's anchors (input indices) under ``lineage``; ``table`` holds the
        lineage columns of the output, ``table_in`` the input table with :data:`ROW_ID`."""
        n_in, n_out = len(tuples), table.num_rows
        if lineage.mode == "row":
            return from_row_ids(table.column(ROW_ID).to_pylist(), n_in)
        if lineage.mode == "rows":
            return from_row_id_lists(table.column(ROW_IDS).to_pylist(), n_in)
        if lineage.mode != "keys":
            return whole_batch(n_out)
        key_cols = [table.column(out_col).to_pylist() for out_col, _ in lineage.keys]
        out_keys = (hashable_key(k) for k in zip(*key_cols)) if key_cols else iter(())
        # one key column of a plain type: the inputs are grouped in Arrow; otherwise in Python
        index = None
        if len(lineage.keys) == 1:
            column = table_in.column(lineage.keys[0][1])
            if not self.batch_input:
                index = key_index(column)
            elif groups_in_arrow(column.type):
                index = key_index_of_inputs(column, table_in.column(ROW_ID))
        if index is not None:
            return from_key_index(index, out_keys)
        if self.batch_input:  # a Python step per input row: only where Arrow cannot group the keys
            in_cols = [table_in.column(inp).to_pylist() for _, inp in lineage.keys]
            in_keys = [hashable_key(k) for k in zip(*in_cols)]
            return from_keys(in_keys, out_keys, owners=table_in.column(ROW_ID).to_pylist())
        positions = [self.input_fields.index(inp) for _, inp in lineage.keys]
        in_keys = [hashable_key([t.values[p] for p in positions]) for t in tuples]
        return from_keys(in_keys, out_keys)

    def lineage_of(self, out: Any, df: Any, columns: list[str]) -> Lineage:
        """Which lineage rule applies to this transform's output (see :mod:`gale.worker.spark.lineage`)."""
        if ROW_ID in columns:
            return Lineage("row")
        if ROW_IDS in columns:
            return Lineage("rows")
        keys = grouping_keys(out, df)
        if keys:
            return Lineage("keys", keys)
        return Lineage(
            "batch",
            reason=(
                f"the output has neither {ROW_ID!r} (keep it through select: df.select({ROW_ID!r}, ...)) nor "
                f"{ROW_IDS!r} (add collect_row_ids() to an aggregation), and is not a groupBy over unchanged "
                "input columns"
            ),
        )
