"""Spark bolts: micro-batches of tuples in, a DataFrame transform, anchored tuples out.

::

    from pyspark.sql import functions as F
    from gale.worker.spark import SparkBolt

    class CountWords(SparkBolt):
        output_fields = ["word", "count"]

        def transform(self, df):            # df has the input stream's fields as columns
            return df.groupBy("word").count()

    builder.set_bolt("count", CountWords, 1).shuffle_grouping("split")

The executor (:class:`gale.worker.spark.executor.SparkBatchExecutor`) collects input tuples into
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
from gale.worker.spark.executor import BatchResult, SparkBatchExecutor
from gale.worker.spark.frames import SparkStageError, key_index, rows_of, table_columns, tuples_to_arrow
from gale.worker.spark.lineage import (
    ROW_ID,
    ROW_IDS,
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

    return F.collect_list(F.col(ROW_ID)).alias(ROW_IDS)


def _col(name: str) -> Any:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


class SparkComponent(Bolt):
    """Shared base of Spark bolts and sinks: run in micro-batches by a Spark batch executor."""

    uses_spark = True
    executor_class = SparkBatchExecutor
    #: optional Spark DDL of the input columns, e.g. ``"word STRING, n BIGINT"`` (default: inferred)
    input_schema: str | None = None

    #: the subscribed stream's fields, set by the executor before :meth:`prepare`
    input_fields: list[str]

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self._arrow_types: dict[str, Any] | None = None

    def execute(self, tup) -> None:
        raise TypeError(
            f"{type(self).__name__} is a Spark component: it runs in micro-batches under SparkBatchExecutor, "
            "not tuple by tuple"
        )

    @property
    def component_id(self) -> str:
        return self.context.component_id

    def input_table(self, spark: Any, tuples: Sequence[Any], row_ids: bool = True) -> Any:
        """The batch as a ``pyarrow.Table``: the input fields plus (optionally) the hidden row id."""
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
    ``declare_output_fields``)."""

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
        missing = [f for f in self.declared_fields if f not in columns]
        if missing:
            shown = [c for c in columns if c not in (ROW_ID, ROW_IDS)]
            raise SparkStageError(
                f"component {cid!r}: transform() returned columns {shown}, which lack the declared output "
                f"field(s) {missing} (declared: {self.declared_fields})"
            )
        lineage = self.lineage_of(out, df, columns)
        wanted = list(self.declared_fields) + [c for c in lineage.columns() if c not in self.declared_fields]
        table = out.select(*[_col(c) for c in wanted]).toArrow()
        cols = table_columns(table, wanted)
        n_out = table.num_rows
        values = rows_of(cols[: len(self.declared_fields)], n_out)
        lin = dict(zip(wanted, cols))
        if lineage.mode == "row":
            anchoring = from_row_ids(lin[ROW_ID], len(tuples))
        elif lineage.mode == "rows":
            anchoring = from_row_id_lists(lin[ROW_IDS], len(tuples))
        elif lineage.mode == "keys":
            key_cols = [lin[out_col] for out_col, _ in lineage.keys]
            out_keys = (hashable_key(k) for k in zip(*key_cols)) if key_cols else iter(())
            # one key column of a plain type: the inputs are grouped in Arrow; otherwise in Python
            index = key_index(table_in.column(lineage.keys[0][1])) if len(lineage.keys) == 1 else None
            if index is not None:
                anchoring = from_key_index(index, out_keys)
            else:
                positions = [self.input_fields.index(inp) for _, inp in lineage.keys]
                in_keys = [hashable_key([t.values[p] for p in positions]) for t in tuples]
                anchoring = from_keys(in_keys, out_keys)
        else:
            anchoring = whole_batch(n_out)
        return BatchResult(values=values, anchoring=anchoring, lineage=lineage)

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
