"""Proving a transform is a grouped aggregation over unchanged input columns (lineage mode ``keys``).

Reads Spark's analyzed logical plan of the output DataFrame through py4j (classic PySpark only;
with Spark Connect there is no plan to read and lineage falls back). The rule is sound because
Catalyst identifies a column by its expression id: an output column with the same id as an input
column holds that input column's values, unchanged, in every row that reaches it. So when the
output's grouping keys are input columns by id, an output row with key values K derives only from
input rows whose key values are K, provided that between the input relation and the grouping
node there is no operator that can mix in rows with other values under the same id (a Union, for
one). Filters and limits on the way may drop rows: anchoring to the dropped ones too is a safe
superset.
"""

from __future__ import annotations

from typing import Any

#: nodes above the grouping node that keep the values of the columns they pass through
PASS_THROUGH = frozenset({
    "Project", "Filter", "Sort", "SubqueryAlias", "GlobalLimit", "LocalLimit", "Offset", "Sample",
    "Repartition", "RepartitionByExpression", "RebalancePartitions", "ResolvedHint", "Window",
    "Distinct", "Deduplicate",
})
#: nodes allowed between the input relation and the grouping node
SAFE_BELOW = PASS_THROUGH | {"Generate", "Join", "Aggregate"}
GROUPING = frozenset({"Aggregate", "Distinct", "Deduplicate"})


def _seq(jseq: Any) -> list[Any]:
    return [jseq.apply(i) for i in range(jseq.size())]


def _ids(attrs: Any) -> list[int]:
    return [a.exprId().id() for a in _seq(attrs)]


def _grouping_ids(node: Any) -> list[int] | None:
    name = node.nodeName()
    if name == "Aggregate":
        exprs = _seq(node.groupingExpressions())
        if not exprs or any(e.getClass().getSimpleName() != "AttributeReference" for e in exprs):
            return None
        return [e.exprId().id() for e in exprs]
    if name == "Distinct":
        return _ids(node.output())
    if name == "Deduplicate":
        return _ids(node.keys())
    return None


def _check_below(node: Any, input_ids: frozenset[int]) -> tuple[bool, bool]:
    """(subtree contains the input relation, subtree is safe)."""
    children = _seq(node.children())
    if not children:
        is_input = frozenset(_ids(node.output())) == input_ids
        return is_input, True
    contains = False
    for child in children:
        c, safe = _check_below(child, input_ids)
        if not safe:
            return True, False
        contains = contains or c
    if not contains:
        return False, True  # e.g. the reference-table side of a join: anything goes
    return True, node.nodeName() in SAFE_BELOW


def grouping_keys(out_df: Any, in_df: Any) -> tuple[tuple[str, str], ...] | None:
    """``((output column, input column), ...)`` of a grouped aggregation over input columns, or
    None when the plan does not prove one (or is not readable)."""
    jdf, in_jdf = getattr(out_df, "_jdf", None), getattr(in_df, "_jdf", None)
    if jdf is None or in_jdf is None:
        return None
    try:
        plan = jdf.queryExecution().analyzed()
        inputs = {a.exprId().id(): a.name() for a in _seq(in_jdf.queryExecution().analyzed().output())}
        outputs = {a.exprId().id(): a.name() for a in _seq(plan.output())}
        input_ids = frozenset(inputs)
        node = plan
        while True:
            name = node.nodeName()
            if name in GROUPING:
                ids = _grouping_ids(node)
                if ids and all(i in inputs and i in outputs for i in ids):
                    contains, safe = _check_below(node.children().apply(0), input_ids)
                    if contains and safe:
                        return tuple((outputs[i], inputs[i]) for i in ids)
            if name not in PASS_THROUGH or node.children().size() != 1:
                return None
            node = node.children().apply(0)
    except Exception:  # noqa: BLE001 - an unreadable plan only means no proof
        return None
