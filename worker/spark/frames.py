"""Tuples ⇄ Arrow tables: how a micro-batch enters Spark and how result rows come back.

A batch becomes a ``pyarrow.Table`` with one column per input field plus the hidden row-id
column (``spark.createDataFrame`` takes it without a per-row Python step); a result comes back
with ``DataFrame.toArrow()`` and is turned into value lists here. Pure: pyarrow only, no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from gale.worker.spark.lineage import ROW_ID


class SparkStageError(Exception):
    """A Spark stage cannot run a batch; the message names the component and the problem."""


def tuples_to_arrow(
    component: str,
    tuples: Sequence[Any],
    fields: Sequence[str],
    arrow_types: Mapping[str, pa.DataType] | None = None,
    row_ids: bool = True,
) -> pa.Table:
    """One column per field (types inferred, or from ``arrow_types``), plus :data:`ROW_ID`."""
    arrays: list[pa.Array] = []
    names: list[str] = []
    for i, name in enumerate(fields):
        # a list comprehension per field: faster than transposing with zip(*rows), and pa.array
        # takes a list far faster than a tuple
        values = [t.values[i] for t in tuples]
        wanted = arrow_types.get(name) if arrow_types else None
        try:
            arrays.append(pa.array(values, type=wanted))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as exc:
            kinds = sorted({type(v).__name__ for v in values})
            raise SparkStageError(
                f"component {component!r}: input field {name!r} cannot become a Spark column "
                f"(value types {kinds}): {exc}. Emit one type per field, or declare input_schema "
                f"on the Spark component"
            ) from exc
        names.append(name)
    if row_ids:
        arrays.append(pa.array(range(len(tuples)), type=pa.int64()))
        names.append(ROW_ID)
    return pa.Table.from_arrays(arrays, names=names)


#: Arrow types whose values group in Arrow exactly as they compare in Python (no -0.0/NaN cases)
_KEY_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string, pa.types.is_boolean)


def groups_in_arrow(arrow_type: pa.DataType) -> bool:
    """Whether Arrow groups values of this type exactly as Python's equality does."""
    return any(check(arrow_type) for check in _KEY_TYPES)


def key_index(column: pa.ChunkedArray | pa.Array) -> dict[tuple, int | tuple[int, ...]] | None:
    """Input rows grouped by the values of one key column, in Arrow (no Python step per row):
    ``{(value,): anchor}`` where the anchor is the one row index or the ascending tuple of row
    indices holding that value — what :func:`gale.worker.spark.lineage.from_keys` builds from
    Python values. ``None`` when the column's type is not one whose Arrow grouping is Python's
    equality (floats, nested, temporal): the caller then groups in Python."""
    if not groups_in_arrow(column.type):
        return None
    import numpy as np

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = column.dictionary_encode(null_encoding="encode")
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    groups = np.split(order, bounds) if len(order) else []
    values = encoded.dictionary.to_pylist()
    index: dict[tuple, int | tuple[int, ...]] = {}
    for rows in groups:
        ids = rows.tolist()
        index[(values[codes[ids[0]]],)] = ids[0] if len(ids) == 1 else tuple(ids)
    return index


def table_columns(table: pa.Table, columns: Sequence[str]) -> list[list[Any]]:
    """The named columns of ``table`` as Python lists."""
    return [table.column(c).to_pylist() for c in columns]


def rows_of(columns: Sequence[list[Any]], n_rows: int) -> list[list[Any]]:
    """Column lists → row value lists."""
    if not columns:
        return [[] for _ in range(n_rows)]
    return [list(r) for r in zip(*columns)]
