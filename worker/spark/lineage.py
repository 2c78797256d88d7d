"""Lineage: which input tuples of a micro-batch each output row derives from.

Each input tuple of a batch gets a row id (its index in the batch) in the hidden column
:data:`ROW_ID`. After the user's transform, one of four rules applies, in this order:

``row``    the output still has :data:`ROW_ID` (row-wise transforms: ``filter``, ``withColumn``,
           ``explode`` through ``withColumn``, joins that keep the stream's columns, ``select``
           that names :data:`ROW_ID`): each output row anchors to the one input it came from.
``rows``   the output has :data:`ROW_IDS`, an array of row ids (aggregations that include
           :func:`gale.worker.spark.bolt.collect_row_ids`): each row anchors to those inputs.
``keys``   the output is a grouped aggregation (``groupBy(...).agg``, ``distinct``,
           ``dropDuplicates``) whose grouping keys are unchanged input columns; proven from
           Spark's analyzed plan (:mod:`gale.worker.spark.plan`). Each row anchors to the inputs with
           its key values.
``batch``  none of the above: lineage is lost and every output row anchors to the whole batch.
           Correct (a failure replays the whole batch) but costs outputs × inputs acker edges.

Rows whose lineage cannot be resolved (a null row id, a key no input has) also anchor to the
whole batch, so a rule never loses a tuple. Anchoring to a superset of the true inputs is always
safe: it can only replay more. This module is pure: it maps lineage values to input indices.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

ROW_ID = "__gale_row_id"
ROW_IDS = "__gale_row_ids"
HIDDEN_COLUMNS = (ROW_ID, ROW_IDS)

#: an output row's anchors: one input index, a tuple of input indices, or WHOLE_BATCH
Anchor = int | tuple[int, ...] | None
WHOLE_BATCH = None


@dataclass(frozen=True)
class Lineage:
    """How a transform's output relates to its input batch."""

    mode: str  # "row" | "rows" | "keys" | "batch"
    #: for mode "keys": (output column, input column) pairs of the grouping keys
    keys: tuple[tuple[str, str], ...] = ()
    reason: str = ""

    def columns(self) -> list[str]:
        """The extra output columns the lineage needs collected with the declared fields."""
        if self.mode == "row":
            return [ROW_ID]
        if self.mode == "rows":
            return [ROW_IDS]
        if self.mode == "keys":
            return [out for out, _ in self.keys]
        return []


@dataclass
class Anchoring:
    anchors: list[Anchor] = field(default_factory=list)
    #: output rows that fell back to the whole batch
    fallback_rows: int = 0

    def edges(self, n_inputs: int) -> int:
        """Acker edges the emits will cost (one per output row and anchor)."""
        total = 0
        for a in self.anchors:
            total += n_inputs if a is None else (1 if isinstance(a, int) else len(a))
        return total


def from_row_ids(row_ids: Iterable[Any], n_inputs: int) -> Anchoring:
    """Mode ``row``: each output row carries the row id of its input (or null)."""
    out = Anchoring()
    append = out.anchors.append
    for rid in row_ids:
        if isinstance(rid, int) and 0 <= rid < n_inputs:
            append(rid)
        else:
            append(WHOLE_BATCH)
            out.fallback_rows += 1
    return out


def from_row_id_lists(id_lists: Iterable[Sequence[Any] | None], n_inputs: int) -> Anchoring:
    """Mode ``rows``: each output row carries the row ids of its contributing inputs."""
    out = Anchoring()
    append = out.anchors.append
    for ids in id_lists:
        ids = list(ids or ())
        valid = sorted({i for i in ids if isinstance(i, int) and 0 <= i < n_inputs})
        if not valid or len(valid) != len(set(ids)):
            # no ids (a global aggregate over nothing), nulls, or ids from outside this batch
            append(WHOLE_BATCH)
            out.fallback_rows += 1
        elif len(valid) == 1:
            append(valid[0])
        else:
            append(tuple(valid))
    return out


def from_keys(input_keys: Sequence[tuple], output_keys: Iterable[tuple],
              owners: Sequence[int] | None = None) -> Anchoring:
    """Mode ``keys``: an output row anchors to every input whose key values equal its own.

    ``input_keys[i]`` is the key tuple of input ``i`` (made with :func:`hashable_key`, as the output
    keys must be). Unmatched output keys (values that do not compare equal in Python, such as NaN)
    fall back to the whole batch. ``owners`` (batch streams): ``input_keys`` are per *row*, and
    ``owners[i]`` is the input holding row ``i`` (non-decreasing), so anchors are inputs.
    """
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(input_keys):
        owner = i if owners is None else owners[i]
        group = groups.setdefault(key, [])
        if not group or group[-1] != owner:
            group.append(owner)
    return from_key_index({k: v[0] if len(v) == 1 else tuple(v) for k, v in groups.items()}, output_keys)


def from_key_index(index: dict[tuple, int | tuple[int, ...]], output_keys: Iterable[tuple]) -> Anchoring:
    """Mode ``keys`` from inputs already grouped: ``index`` maps a key tuple to the one input
    index or the ascending tuple of input indices having it (:func:`from_keys` builds it from
    Python values, :func:`gale.worker.spark.frames.key_index` from an Arrow column)."""
    out = Anchoring()
    append = out.anchors.append
    get = index.get
    for key in output_keys:
        hit = get(key)
        if hit is None:
            append(WHOLE_BATCH)
            out.fallback_rows += 1
        else:
            append(hit)
    return out


def whole_batch(n_outputs: int) -> Anchoring:
    """Mode ``batch``: lineage lost, every output row anchors to every input."""
    return Anchoring([WHOLE_BATCH] * n_outputs, n_outputs)


def hashable_key(values: Sequence[Any]) -> tuple:
    """A dict key for a tuple of values (lists and dicts become their repr)."""
    out = []
    for v in values:
        try:
            hash(v)
            out.append(v)
        except TypeError:
            out.append(repr(v))
    return tuple(out)
