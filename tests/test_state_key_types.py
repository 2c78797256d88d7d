"""A state written by another submission of the topology with another key type is reported, not
silently mixed (``gale.worker.state.task_state``: the writer record of each namespace). The tasks'
state over the real in-memory provider, as the checkpoint executor drives it."""

from __future__ import annotations

import json

import pytest

from gale.topology.keygroups import key_group
from gale.topology.state import StateError, pack
from gale.worker.state.inspect import read_committed
from gale.worker.state.provider import MemoryStateProvider
from gale.worker.state.task_state import WRITER_KEY, TaskState, key_type


def keyed(provider, writer, index=0, tasks=1):
    st = TaskState(provider, "wc", "count", index, tasks, 128, [["word"]], writer=writer)
    st.load()
    return st


def per_task(provider, writer):
    st = TaskState(provider, "wc", "totals", 0, 1, None, writer=writer)
    st.load()
    return st


def commit(st, txid, **puts):
    for k, v in puts.items():
        st.kv.put(k, v)
    st.prepare(txid)
    st.commit(txid)


def test_key_types_are_named_with_tuple_elements():
    assert [key_type(k) for k in ("a", 1, True, 1.5, None, b"x", ("a", 1))] == [
        "str", "int", "bool", "float", "NoneType", "bytes", "tuple[str, int]"]


def test_a_new_submission_putting_int_keys_into_str_keyed_state_is_refused_naming_both_types():
    provider = MemoryStateProvider()
    commit(keyed(provider, "wc-1-100"), 1, storm=3, gale=2)
    second = keyed(provider, "wc-2-200")
    assert dict(second.kv.items()) == {"storm": 3, "gale": 2}  # the state is read back whole
    with pytest.raises(StateError) as info:
        second.kv.put(42, 1)
    msg = str(info.value)
    assert "state key 42 has type int" in msg and "component 'count'" in msg
    assert "another submission of the topology (topology id wc-1-100) with keys of type str" in msg
    assert 42 not in second.kv and second.kv.take_changes() == ({}, set())  # nothing stored
    second.kv.put("spark", 1)  # keys of the stored type are fine
    second.kv.put("storm", 4)
    assert dict(second.kv.items()) == {"storm": 4, "gale": 2, "spark": 1}


def test_the_check_outlives_the_new_submissions_first_commit_and_restarts():
    provider = MemoryStateProvider()
    commit(per_task(provider, "wc-1"), 1, total=1)
    second = per_task(provider, "wc-2")
    commit(second, 2, total=2)  # the namespace now names wc-2 as its writer, carrying the types it took over
    entry = json.loads(provider.load(["wc/totals/task0"])["wc/totals/task0"][WRITER_KEY])
    assert entry == {"writer": "wc-2", "key_types": ["str"], "from": "wc-1"}
    restarted = per_task(provider, "wc-2")
    assert restarted.kv.get("total") == 2
    with pytest.raises(StateError, match=r"state key 7 has type int.*\(topology id wc-1\) with keys of type str"):
        restarted.kv.put(7, 1)


def test_within_one_submission_key_types_may_mix_across_restarts_and_rescaling():
    provider = MemoryStateProvider()
    first = keyed(provider, "wc-1", 0, 2), keyed(provider, "wc-1", 1, 2)
    for st in first:
        keys = [k for k in ("a", "b", "c", 1, 2, 3, ("x", 1)) if key_group(k, 128) in st.owned]
        for k in keys:
            st.kv.put(k, 1)
        st.prepare(1)
        st.commit(1)
    again = [keyed(provider, "wc-1", i, 3) for i in range(3)]  # rescaled 2 -> 3 tasks, same submission
    assert sum(len(st.kv) for st in again) == 7
    for st in again:
        for k in (4, "d", 2.5, (1, "y")):
            if key_group(k, 128) in st.owned:
                st.kv.put(k, 1)  # no check: this submission wrote every namespace


def test_state_without_a_writer_record_counts_as_another_submissions():
    provider = MemoryStateProvider()
    provider.prepare(1, {"wc/totals/task0": ({pack("total"): pack(5)}, set())})
    provider.commit(1, ["wc/totals/task0"])
    st = per_task(provider, "wc-3")
    with pytest.raises(StateError, match=r"written by another submission of the topology \(a Gale that did not "
                                         r"record the writer\) with keys of type str"):
        st.kv.put(b"total", 1)
    st.kv.put("total", 6)


def test_empty_state_and_unrecorded_writers_check_nothing():
    provider = MemoryStateProvider()
    st = keyed(provider, "wc-1")
    st.kv.put("a", 1)
    st.kv.put(1, 1)  # an empty state has no key type yet
    windows = TaskState(provider, "wc", "win", 0, 1, None)  # writer None: Gale's own keys, no record
    windows.load()
    windows.kv.put("w", 1)
    windows.prepare(1)
    windows.commit(1)
    assert WRITER_KEY not in provider.load(["wc/win/task0"])["wc/win/task0"]


def test_the_writer_record_is_not_a_key_for_readers():
    provider = MemoryStateProvider()
    commit(keyed(provider, "wc-1"), 1, storm=1, gale=2)
    assert any(WRITER_KEY in c for c in provider.load([f"wc/count/kg{k}" for k in range(128)]).values())
    assert read_committed(provider, "wc", "count", key_groups=128) == {"storm": 1, "gale": 2}
