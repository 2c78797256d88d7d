"""Gale's equivalents of Bytewax's library operators (``gale.worker.bytewax.fast``) against the
library's own code, on the same inputs: the same outputs in the same order, the same errors with the
same messages, the same snapshots — so a dataflow behaves the same with
``topology.bytewax.fast.operators`` on or off, and a state written one way resumes the other."""

from __future__ import annotations

from datetime import datetime, timezone

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.operators import StatefulBatchLogic
from bytewax.testing import TestingSource
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.bytewax.plan import find_core_step
from gale.worker.bytewax import fast
from gale.worker.bytewax.stateful import KeyedLogics, StepError

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

NOW = datetime(2024, 1, 1, tzinfo=timezone.utc)


def core(flow, step_id):
    return find_core_step(flow, step_id)


def stateless(build):
    """The library's mapper and Gale's batch function of the one flat_map_batch ``build`` makes."""
    flow = Dataflow("f")
    s = op.input("inp", flow, TestingSource([]))
    build(s)
    step = flow.substeps[-1]
    (core_op, ancestors), = [find_core_step(flow, sub.step_id) for sub in _cores(step)]
    found = fast.batch_function(ancestors)
    assert found is not None, f"no fast path for {type(step).__name__}"
    return (lambda xs: list(core_op.mapper(list(xs)))), found[0]


def _cores(step):
    if getattr(type(step), "core", False):
        return [step]
    return [c for sub in step.substeps for c in _cores(sub)]


def same(library, gale, batch):
    """Both give the same items, or raise the same error type with the same message."""
    try:
        expected = library(list(batch))
    except Exception as exc:  # noqa: BLE001
        with pytest.raises(type(exc)) as caught:
            gale(list(batch))
        assert str(caught.value) == str(exc)
        return
    assert gale(list(batch)) == expected


ints = st.lists(st.integers(-5, 5), max_size=30)
pairs = st.lists(st.tuples(st.sampled_from("abc"), st.integers(-5, 5)), max_size=30)

STATELESS = {
    "map": (lambda s: op.map("m", s, lambda x: x * 2), ints),
    "flat_map": (lambda s: op.flat_map("m", s, lambda x: [x] * abs(x) if x != 3 else 3), ints),
    "filter": (lambda s: op.filter("m", s, lambda x: x > 0 if x != 4 else "yes"), ints),
    "key_on": (lambda s: op.key_on("m", s, lambda x: str(x) if x != -5 else x), ints),
    "key_rm": (lambda s: op.key_rm("m", s), pairs),
    "map_value": (lambda s: op.map_value("m", s, lambda v: v + 1), pairs),
    "filter_map": (lambda s: op.filter_map("m", s, lambda x: None if x % 2 else x), ints),
    "flat_map_value": (lambda s: op.flat_map_value("m", s, lambda v: range(max(v, 0))), pairs),
    "filter_value": (lambda s: op.filter_value("m", s, lambda v: v > 0 if v != 2 else 1), pairs),
    "filter_map_value": (lambda s: op.filter_map_value("m", s, lambda v: v if v > 0 else None), pairs),
    "flatten": (lambda s: op.flatten("m", op.map("wrap", s, lambda x: [x, x] if x != 0 else 0)), ints),
}


@pytest.mark.parametrize("name", sorted(STATELESS))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_each_stateless_operator_equals_the_librarys(name, data):
    build, items = STATELESS[name]
    library, gale = stateless(build)
    same(library, gale, data.draw(items))


def test_every_stateless_fast_operator_is_tested():
    assert set(STATELESS) == set(fast.STATELESS)


def test_a_users_operator_of_the_same_name_is_not_taken_for_the_librarys():
    from bytewax.dataflow import operator

    @operator
    def map(step_id, up, mapper):  # noqa: A001 - named as the library's on purpose
        return op.flat_map_batch("inner", up, lambda xs: [("mine", x) for x in xs])

    flow = Dataflow("f")
    map("m", op.input("inp", flow, TestingSource([])), lambda x: x)
    _, ancestors = find_core_step(flow, "f.m.inner")
    assert fast.batch_function(ancestors) is None


def _sum_until(limit):
    def mapper(state, v):
        if v == 9:
            return "not a pair"
        total = (state or 0) + v
        return (None if total >= limit else total), total

    return mapper


def keyed_pair(flat=False):
    """The library's logics and Gale's states of one stateful_map (or stateful_flat_map)."""
    flow = Dataflow("f")
    s = op.input("inp", flow, TestingSource([]))
    if flat:
        op.stateful_flat_map("sm", s, lambda st_, v: (None, [v, v]) if v > 3 else ((st_ or 0) + v, [st_]))
    else:
        op.stateful_map("sm", s, _sum_until(8))
    (core_op, ancestors), = [find_core_step(flow, c.step_id) for c in _cores(flow.substeps[-1])]
    library = KeyedLogics(core_op.step_id, core_op.builder, StatefulBatchLogic)
    gale = fast.keyed_engine(core_op.step_id, ancestors)
    assert gale is not None
    return library, gale


def run_both(library, gale, batch):
    try:
        expected = library.activate(list(batch), NOW)
    except StepError as exc:
        with pytest.raises(StepError) as caught:
            gale.activate(list(batch), NOW)
        assert str(caught.value) == str(exc) and str(caught.value.__cause__) == str(exc.__cause__)
        return False
    assert gale.activate(list(batch), NOW) == expected
    return True


@settings(max_examples=80, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 9)), max_size=12), max_size=6),
       flat=st.booleans())
def test_stateful_map_and_flat_map_equal_the_librarys_outputs_and_snapshots(batches, flat):
    library, gale = keyed_pair(flat)
    for i, batch in enumerate(batches):
        if not run_both(library, gale, batch):
            return  # both raised the same error
        assert gale.take_changes() == library.take_changes()
        if i == 2:  # a state written one way resumes the other
            snaps = {k: lg.snapshot() for k, lg in library.logics.items()}
            library, gale = keyed_pair(flat)
            library.restore(snaps.items())
            gale.restore(snaps.items())
    assert library.activate(None, NOW, eof=True) == gale.activate(None, NOW, eof=True) == []
