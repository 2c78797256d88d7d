"""Batch streams: tuples whose one field carries a whole columnar batch of rows (Arrow).

A stream declared with the single field :data:`ARROW_BATCH` is a *batch stream*: each tuple's
value is a ``pyarrow.Table`` or ``pyarrow.RecordBatch`` (one source batch: a file, a poll of a
queue, a page of a query), tracked as one tuple tree. A Spark component subscribed to a batch
stream builds its DataFrame by concatenating the batches (no Python step per row); a Spark bolt
that declares :data:`ARROW_BATCH` as its output emits its result as batch tuples too.

Lineage is kept at batch granularity: the hidden row-id column holds, for every row, the index
of its input *batch tuple* in the micro-batch, so the rules of :mod:`gale.worker.spark.lineage`
map output rows to input batch tuples, and an output batch is anchored to the input batch tuples
its rows derive from.

Pure: pyarrow and numpy only, no Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from gale.worker.spark.frames import SparkStageError
from gale.worker.spark.lineage import ROW_ID, WHOLE_BATCH, Anchor

#: the one field of a batch stream; its values are ``pyarrow.Table`` or ``pyarrow.RecordBatch``
ARROW_BATCH = "arrow_batch"


def is_batch_stream(fields: Sequence[str]) -> bool:
    """Whether a stream with these fields is a batch stream."""
    return list(fields) == [ARROW_BATCH]


def rows_in(value: Any) -> int:
    """Rows of a batch tuple's value (1 for a value that is not Arrow: the job then refuses it)."""
    return value.num_rows if isinstance(value, (pa.Table, pa.RecordBatch)) else 1


def _schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def batches_to_table(component: str, tuples: Sequence[Any], row_ids: bool = True) -> pa.Table:
    """The batch tuples' Arrow values concatenated into one table (zero-copy), plus :data:`ROW_ID`
    holding each row's input tuple index. Raises :class:`SparkStageError` naming ``component``
    when a value is not Arrow or the schemas differ."""
    tables: list[pa.Table] = []
    schema: pa.Schema | None = None
    for i, tup in enumerate(tuples):
        value = tup.values[0]
        if isinstance(value, pa.RecordBatch):
            value = pa.Table.from_batches([value])
        elif not isinstance(value, pa.Table):
            raise SparkStageError(
                f"component {component!r}: input stream {tup.fields.source_key!r} is a batch stream (its one field "
                f"is {ARROW_BATCH!r}) but tuple {i} of the batch carries a {type(value).__module__}."
                f"{type(value).__qualname__}, not a pyarrow.Table or pyarrow.RecordBatch"
            )
        if schema is None:
            schema = value.schema
        elif not value.schema.equals(schema):
            raise SparkStageError(
                f"component {component!r}: the Arrow batches of one micro-batch must have one schema; tuple {i} "
                f"from {tup.fields.source_key!r} has ({_schema_text(value.schema)}) where the first has "
                f"({_schema_text(schema)})"
            )
        tables.append(value)
    if schema is not None and ROW_ID in schema.names:
        raise SparkStageError(f"component {component!r}: the Arrow batches have a column named {ROW_ID!r}, "
                              "which is Gale's hidden lineage column")
    table = pa.concat_tables(tables) if tables else pa.table({})
    if row_ids:
        lengths = np.fromiter((t.num_rows for t in tables), dtype=np.int64, count=len(tables))
        ids = np.repeat(np.arange(len(tables), dtype=np.int64), lengths)
        table = table.append_column(ROW_ID, pa.array(ids, type=pa.int64()))
    return table


def int64_ids(column: Any) -> np.ndarray:
    """An Arrow integer column (or a numpy array) as a writable int64 numpy array, nulls as -1."""
    if isinstance(column, np.ndarray):
        return np.array(column, dtype=np.int64)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return np.array(column.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


def split_by_row_id(table: pa.Table, row_ids: Any) -> tuple[list[pa.Table], list[Anchor]]:
    """Rule ``row`` for batch output: the rows of ``table`` grouped by their input index
    (``row_ids``, an int64 column with nulls for rows of no input), in numpy. One output table per
    input index (rows in their order), anchored to it; null rows form one table anchored to the
    whole batch."""
    ids = int64_ids(row_ids)
    if len(ids) == 0:
        return [], []
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    bounds = np.flatnonzero(np.diff(sorted_ids)) + 1
    tables, anchors = [], []
    for rows in np.split(order, bounds):
        rid = int(ids[rows[0]])
        tables.append(table.take(pa.array(rows)))
        anchors.append(WHOLE_BATCH if rid < 0 else rid)
    return tables, anchors


def split_by_anchor(table: pa.Table, anchors: Sequence[Anchor]) -> tuple[list[pa.Table], list[Anchor]]:
    """Any rule, for batch output: the rows of ``table`` grouped by their anchors (rows with equal
    anchors form one output table, in the order of their first row)."""
    groups: dict[Any, list[int]] = {}
    for i, anchor in enumerate(anchors):
        rows = groups.get(anchor)
        if rows is None:
            groups[anchor] = [i]
        else:
            rows.append(i)
    if len(groups) == 1:
        ((anchor, _),) = groups.items()
        return [table], [anchor]
    return [table.take(pa.array(rows, type=pa.int64())) for rows in groups.values()], list(groups)


def key_index_of_inputs(column: pa.ChunkedArray | pa.Array, inputs: Any) -> dict[tuple, int | tuple[int, ...]]:
    """Rule ``keys`` over concatenated batches: ``{(value,): anchor}`` where the anchor is the
    input index, or ascending tuple of input indices, of the rows holding the value; ``inputs`` is
    the row → input index column. The caller checked the column's type is one whose Arrow grouping
    is Python's equality (:func:`gale.worker.spark.frames.key_index` decides that)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = column.dictionary_encode(null_encoding="encode")
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    owners = int64_ids(inputs)
    n_inputs = int(owners.max()) + 1 if len(owners) else 1
    pairs = np.unique(codes * n_inputs + owners)  # sorted by code, then by input
    pair_codes, pair_inputs = pairs // n_inputs, pairs % n_inputs
    bounds = np.flatnonzero(np.diff(pair_codes)) + 1
    values = encoded.dictionary.to_pylist()
    index: dict[tuple, int | tuple[int, ...]] = {}
    for code, members in zip(np.split(pair_codes, bounds), np.split(pair_inputs, bounds)):
        ids = members.tolist()
        index[(values[int(code[0])],)] = ids[0] if len(ids) == 1 else tuple(ids)
    return index
