"""The window store over managed state (``gale.worker.state.windows.StateWindowStore``), pure: a
core over it, checkpointed (the state's keys and values through msgpack, as a provider stores them)
and restored into a new core at any point, continues exactly as the original — for every kind of
window (hypothesis, the streams of tests/test_windows_core.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gale.topology.state import KeyValueState, pack, unpack_key, unpack_value
from gale.topology.tuple import Fields, Tuple
from gale.worker.windows.core import CountWindows, Expire, Fire, SessionWindows, TimeWindows
from gale.worker.windows.mixed import CountEveryDuration, DurationEveryCount
from gale.worker.windows.store import Entry
from gale.worker.state.windows import META_KEY, StateWindowStore
from tests.test_windows_core import streams

FIELDS = Fields(["n", "word"], "src:default")


def fields_of(component, stream):
    assert (component, stream) == ("src", "default")
    return FIELDS


def checkpointed(state: KeyValueState) -> KeyValueState:
    """What a task loads after a commit: every key and value packed and unpacked."""
    out = KeyValueState()
    out.reset({unpack_key(pack(k)): unpack_value(pack(v)) for k, v in state})
    return out


def entry(item):
    _, seq, ts, key = item
    return Entry(seq, ts, Tuple([seq, f"w{seq}"], FIELDS, "src", "default", 3 + seq % 2), key)


def outcome(actions):
    out = []
    for a in actions:
        if isinstance(a, Fire):
            out.append(("fire", a.start, a.end, a.key, [(e.seq, list(e.item.values), e.item.task) for e in a.entries],
                        a.update, [e.seq for e in a.new], [e.seq for e in a.expired]))
        elif isinstance(a, Expire):
            out.append(("expire", sorted(e.seq for e in a.entries)))
        else:
            out.append(("late", a.entry.seq))
    return out


def check(make, items, cut):
    """As ``check_restore`` of tests/test_windows_core.py, through a checkpoint: every firing, its
    ``get_new()`` and ``get_expired()`` (the first one after the restore too), every expiry."""
    original = make(StateWindowStore(KeyValueState(), fields_of))
    for item in items[:cut]:
        original.add(entry(item)) if item[0] == "e" else original.advance(item[1])
    state = checkpointed(original.store.state)
    assert len(state) == len(original.store) + (META_KEY in state)
    rebuilt = make(StateWindowStore(state, fields_of))
    rebuilt.restore()
    assert rebuilt.next_seq() == original.next_seq()
    for item in items[cut:]:
        if item[0] == "e":
            a, b = original.add(entry(item)), rebuilt.add(entry(item))
        else:
            a, b = original.advance(item[1]), rebuilt.advance(item[1])
        assert outcome(b) == outcome(a), item
    # what is left in the state is what the core still holds
    assert sorted(k for k, _ in rebuilt.store.state if k != META_KEY) == sorted(e.seq for e in rebuilt.store.entries())


@settings(max_examples=150, deadline=None)
@given(length=st.integers(1, 30), data=st.data(), lateness=st.integers(0, 20), items=streams())
def test_time_windows_restored_from_a_checkpoint_continue_identically(length, data, lateness, items):
    slide = data.draw(st.integers(1, length))
    check(lambda s: TimeWindows(length, slide, lateness, s), items, data.draw(st.integers(0, len(items))))


@settings(max_examples=150, deadline=None)
@given(gap=st.integers(1, 20), lateness=st.integers(0, 20), items=streams(keys=True), data=st.data())
def test_sessions_restored_from_a_checkpoint_continue_identically(gap, lateness, items, data):
    check(lambda s: SessionWindows(gap, lateness, s), items, data.draw(st.integers(0, len(items))))


@settings(max_examples=150, deadline=None)
@given(length=st.integers(1, 8), slide=st.integers(1, 8), event_time=st.booleans(), items=streams(),
       data=st.data())
def test_count_windows_restored_from_a_checkpoint_continue_identically(length, slide, event_time, items, data):
    check(lambda s: CountWindows(length, slide, event_time, s), items, data.draw(st.integers(0, len(items))))


@settings(max_examples=100, deadline=None)
@given(length=st.integers(1, 8), slide=st.integers(1, 40), items=streams(), data=st.data())
def test_mixed_windows_restored_from_a_checkpoint_continue_identically(length, slide, items, data):
    cut = data.draw(st.integers(0, len(items)))
    check(lambda s: CountEveryDuration(length, slide, True, s), items, cut)
    check(lambda s: DurationEveryCount(length * 5, min(slide, 6), True, s), items, cut)


def test_a_tuple_that_cannot_be_serialized_is_refused_naming_its_source_and_field():
    import pytest

    from gale.topology.state import StateError

    store = StateWindowStore(KeyValueState(), fields_of)
    bad = Tuple([1, {1, 2}], FIELDS, "src", "default", 3)
    with pytest.raises(StateError, match=r"a tuple from src:default cannot be kept in a persistent window .*not: "
                                         r"word: set"):
        store.put(Entry(0, 0, bad))
    assert len(store) == 0 and len(store.state) == 0
