"""The pure window cores against an offline reference computed from scratch over the full input.

The reference functions below know nothing of panes, incremental merging or eviction: after every
input item they recompute every window from all the tuples accepted so far and emit the windows
that are due and whose contents changed since they were last emitted. The cores must produce
exactly the same firings (start, end, key, tuples, update flag) at the same steps, declare the same
tuples late, and ack every tuple exactly once, only after every window that contains it fired.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.worker.windows.core import (
    FOREVER,
    CountWindows,
    Expire,
    Fire,
    Late,
    SessionWindows,
    TimeWindows,
)
from gale.worker.windows.mixed import CountEveryDuration, DurationEveryCount
from gale.worker.windows.store import Entry, InMemoryWindowStore
from tests.window_reference import (
    ref_count,
    ref_count_every_duration,
    ref_duration_every_count,
    ref_session,
    ref_time,
)

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

# ------------------------------------------------------------------------------------ driving a core


def run(core, items):
    """Per step: (firings, late seqs), plus every action in order."""
    steps, actions = [], []
    for item in items:
        if item[0] == "e":
            _, seq, ts, key = item
            out = core.add(Entry(seq, ts, ("value", seq), key))
        else:
            out = core.advance(item[1])
        actions.extend(out)
        fires = [(a.start, a.end, a.key, tuple(e.seq for e in a.entries), a.update) for a in out if isinstance(a, Fire)]
        late = [a.entry.seq for a in out if isinstance(a, Late)]
        steps.append((fires, late))
    return steps, actions


def check_acks(actions, all_seqs, still_buffered=()):
    """Every tuple acked exactly once (or still buffered), and never before a window holding it fired."""
    acked = Counter()
    done: set[int] = set()
    for a in actions:
        if isinstance(a, Fire):
            used = {e.seq for e in a.entries}
            assert not used & done, f"window {a} fired with tuples already acked: {sorted(used & done)}"
        elif isinstance(a, Expire):
            for e in a.entries:
                acked[e.seq] += 1
                done.add(e.seq)
        elif isinstance(a, Late):
            acked[a.entry.seq] += 1
            done.add(a.entry.seq)
    assert all(n == 1 for n in acked.values()), f"acked more than once: {[s for s, n in acked.items() if n > 1]}"
    assert set(acked) | set(still_buffered) == set(all_seqs), (
        f"never acked: {sorted(set(all_seqs) - set(acked) - set(still_buffered))}")
    assert not set(acked) & set(still_buffered)


def events(timestamps, keys=None):
    return [("e", i, ts, (keys[i] if keys else None)) for i, ts in enumerate(timestamps)]


# ------------------------------------------------------------------------------------ examples


def test_tumbling_window_fires_each_window_once_when_the_watermark_passes_its_end():
    core = TimeWindows(10, 10)
    items = events([1, 5, 9, 10, 15, 21]) + [("w", 10), ("w", 20), ("w", 30)]
    steps, actions = run(core, items)
    fires = [f for s, _ in steps for f in s]
    assert fires == [(0, 10, None, (0, 1, 2), False), (10, 20, None, (3, 4), False), (20, 30, None, (5,), False)]
    check_acks(actions, range(6))
    assert len(core) == 0


def test_overlapping_duration_windows_lose_no_tuple_storm_2489():
    """STORM-2489: with sliding duration windows, tuples between two triggers were missing from some
    windows. Each tuple must be in every window containing its timestamp: length/slide of them."""
    core = TimeWindows(length=30, slide=10)
    timestamps = list(range(0, 100, 3))
    items = events(timestamps)
    for w in range(5, 140, 7):  # watermarks at arbitrary points, not aligned with the windows
        items.append(("w", w))
    steps, actions = run(core, items)
    windows_of = Counter()
    for a in actions:
        if isinstance(a, Fire):
            for e in a.entries:
                windows_of[e.seq] += 1
                assert a.start <= e.ts < a.end
    assert all(windows_of[i] == 3 for i in range(len(timestamps))), windows_of
    assert steps == ref_time(30, 10, 0, items)
    check_acks(actions, range(len(timestamps)))


def test_late_tuples_are_acked_not_dropped_storm_1859():
    """STORM-1859: late tuples were logged and never acked, so their spout tuples timed out."""
    core = TimeWindows(10, 10)
    _, actions = run(core, events([12, 15]) + [("w", 20)])
    out = core.add(Entry(99, 3, "late"))
    assert [type(a) for a in out] == [Late] and out[0].entry.seq == 99
    check_acks(actions + out, [0, 1, 99])


def test_allowed_lateness_fires_an_update_with_the_late_tuple():
    core = TimeWindows(10, 10, allowed_lateness=5)
    steps, actions = run(core, events([1, 4, 12]) + [("w", 10)])
    assert steps[-1][0] == [(0, 10, None, (0, 1), False)]
    out = core.add(Entry(3, 8, "late but allowed"))  # 8 >= 10 - 5
    (fire,) = out
    assert fire.update and [e.seq for e in fire.entries] == [0, 1, 3] and [e.seq for e in fire.new] == [3]
    (late,) = core.add(Entry(5, 4, "too late"))  # 4 < 10 - 5
    assert isinstance(late, Late) and late.entry.seq == 5
    rest = core.advance(15)  # window [0, 10) dropped: 10 <= 15 - 5
    expired = [e.seq for a in rest if isinstance(a, Expire) for e in a.entries]
    assert sorted(expired) == [0, 1, 3]


def test_get_new_and_get_expired_of_a_sliding_window():
    core = TimeWindows(20, 10)
    for i, ts in enumerate([5, 15, 25]):
        core.add(Entry(i, ts, i))
    fires = [a for a in core.advance(30) if isinstance(a, Fire)]
    assert [(f.start, [e.seq for e in f.entries]) for f in fires] == [(-10, [0]), (0, [0, 1]), (10, [1, 2])]
    last = fires[-1]
    assert [e.seq for e in last.new] == [2] and [e.seq for e in last.expired] == [0]


def test_sessions_merge_and_fire_per_key():
    core = SessionWindows(gap=5)
    items = events([1, 3, 20, 2, 9], keys=["a", "a", "a", "b", "a"]) + [("w", 100)]
    steps, actions = run(core, items)
    fires = sorted(f for s, _ in steps for f in s)
    assert fires == [(1, 8, "a", (0, 1), False), (2, 7, "b", (3,), False),
                     (9, 14, "a", (4,), False), (20, 25, "a", (2,), False)]
    check_acks(actions, range(5))


def test_a_late_tuple_within_allowed_lateness_merges_two_fired_sessions_into_an_update():
    core = SessionWindows(gap=5, allowed_lateness=20)
    run(core, events([0, 8]))
    fired = [a for a in core.advance(14) if isinstance(a, Fire)]
    assert [(f.start, f.end) for f in fired] == [(0, 5), (8, 13)]
    (update,) = core.add(Entry(2, 4, "bridge"))  # [4, 9) bridges [0, 5) and [8, 13)
    assert update.update and (update.start, update.end) == (0, 13) and [e.seq for e in update.new] == [2]
    assert [e.seq for e in update.entries] == [0, 2, 1]


def test_count_windows_slide_and_expire():
    core = CountWindows(length=3, slide=2)
    steps, actions = run(core, events(range(7)))
    fires = [f[3] for s, _ in steps for f in s]
    assert fires == [(0, 1), (1, 2, 3), (3, 4, 5)]
    check_acks(actions, range(7), still_buffered=[e.seq for e in core.buffered()])


def test_count_windows_by_event_time_release_in_timestamp_order():
    core = CountWindows(length=2, slide=2, event_time=True)
    steps, actions = run(core, events([5, 1, 3, 7]) + [("w", 6), ("e", 4, 2, None)])
    fires = [(f[0], f[1], f[3]) for s, _ in steps for f in s]
    assert fires == [(1, 3, (1, 2))]  # ts 1, 3, 5 released by watermark 6: one window of two, 5 waits
    assert steps[-1][1] == [4]  # ts 2 < watermark 6: late


def test_in_memory_store_holds_exactly_the_buffered_tuples():
    store = InMemoryWindowStore()
    core = TimeWindows(10, 5, store=store)
    run(core, events([1, 2, 11]) + [("w", 10)])
    # [-5, 5) and [0, 10) fired; ts 1 and 2 are in no later window: expired, and kept in the store
    # only as the previous window (the next firing's get_expired()) until the next firing
    assert sorted(e.seq for e in core.buffered()) == [2] and len(core) == 1
    assert sorted(e.seq for e in store.entries()) == [0, 1, 2]
    core.advance(20)  # [5, 15) and [10, 20) fired: 0 and 1 leave; 2 expired, the previous window now
    assert core.buffered() == [] and len(core) == 0
    assert sorted(e.seq for e in store.entries()) == [2]
    core.advance(30)  # [15, 25) fired (empty windows do not fire): nothing changes
    core.add(Entry(3, 31, ("value", 3), None))
    core.advance(40)  # [25, 35) and [30, 40) fired: the previous window is theirs
    assert [e.seq for e in store.entries()] == [3]


# ------------------------------------------------------------------------------------ properties


@st.composite
def streams(draw, keys=False, max_ts=120):
    """Random timestamps, out of order within a random lag, watermarks = newest - lag at random
    points (sometimes behind, as a watermark from another task would be), then the end of input."""
    n = draw(st.integers(0, 40))
    lag = draw(st.integers(0, 30))
    items = []
    newest = None
    for seq in range(n):
        if newest is None:
            ts = draw(st.integers(0, max_ts))
        else:
            ts = draw(st.integers(max(0, newest - lag - 10), newest + 15))  # sometimes later than the lag
        newest = ts if newest is None else max(newest, ts)
        key = draw(st.sampled_from(["a", "b"])) if keys else None
        items.append(("e", seq, ts, key))
        if draw(st.booleans()):
            items.append(("w", newest - lag - draw(st.integers(0, 5))))
    items.append(("w", FOREVER))
    return items


@settings(max_examples=300, deadline=None)
@given(length=st.integers(1, 30), data=st.data(), lateness=st.integers(0, 20), items=streams())
def test_time_windows_equal_the_reference(length, data, lateness, items):
    slide = data.draw(st.integers(1, length))
    core = TimeWindows(length, slide, allowed_lateness=lateness)
    steps, actions = run(core, items)
    assert [(sorted(f), late) for f, late in steps] == ref_time(length, slide, lateness, items)
    check_acks(actions, [i[1] for i in items if i[0] == "e"])
    assert len(core) == 0


@settings(max_examples=300, deadline=None)
@given(gap=st.integers(1, 20), lateness=st.integers(0, 20), items=streams(keys=True))
def test_session_windows_equal_the_reference(gap, lateness, items):
    core = SessionWindows(gap, allowed_lateness=lateness)
    steps, actions = run(core, items)
    assert [(sorted(f, key=repr), late) for f, late in steps] == ref_session(gap, lateness, items)
    check_acks(actions, [i[1] for i in items if i[0] == "e"])
    assert len(core) == 0


@settings(max_examples=300, deadline=None)
@given(length=st.integers(1, 8), slide=st.integers(1, 8), event_time=st.booleans(), items=streams())
def test_count_windows_equal_the_reference(length, slide, event_time, items):
    core = CountWindows(length, slide, event_time=event_time)
    steps, actions = run(core, items)
    assert steps == ref_count(length, slide, event_time, items)
    check_acks(actions, [i[1] for i in items if i[0] == "e"], still_buffered=[e.seq for e in core.buffered()])
    assert len(core) == len(core.queue) + len(core.pending)


# ------------------------------------------------------------------------------------ restore from the store


def _copy_store(store):
    import copy

    out = InMemoryWindowStore()
    for e in store.entries():
        out.put(Entry(e.seq, e.ts, e.item, e.key))
    out.set_meta(copy.deepcopy(store.meta()))
    return out


def _outcome(actions):
    out = []
    for a in actions:
        if isinstance(a, Fire):
            out.append(("fire", a.start, a.end, a.key, [e.seq for e in a.entries], a.update, [e.seq for e in a.new],
                        [e.seq for e in a.expired]))
        elif isinstance(a, Expire):
            out.append(("expire", sorted(e.seq for e in a.entries)))
        else:
            out.append(("late", a.entry.seq))
    return out


def check_restore(make, items, cut):
    """A core rebuilt from a copy of the store after ``cut`` items continues exactly as the original:
    the contract a store over managed state relies on."""
    original = make(InMemoryWindowStore())
    for item in items[:cut]:
        original.add(Entry(item[1], item[2], ("value", item[1]), item[3])) if item[0] == "e" else original.advance(
            item[1])
    rebuilt = make(_copy_store(original.store))
    rebuilt.restore()
    assert rebuilt.next_seq() == max((e.seq for e in original.store.entries()), default=-1) + 1
    for item in items[cut:]:
        if item[0] == "e":
            a = original.add(Entry(item[1], item[2], ("value", item[1]), item[3]))
            b = rebuilt.add(Entry(item[1], item[2], ("value", item[1]), item[3]))
        else:
            a, b = original.advance(item[1]), rebuilt.advance(item[1])
        assert _outcome(b) == _outcome(a), item


@settings(max_examples=200, deadline=None)
@given(length=st.integers(1, 30), data=st.data(), lateness=st.integers(0, 20), items=streams())
def test_a_time_window_core_restored_from_its_store_continues_identically(length, data, lateness, items):
    slide = data.draw(st.integers(1, length))
    cut = data.draw(st.integers(0, len(items)))
    check_restore(lambda store: TimeWindows(length, slide, lateness, store), items, cut)


@settings(max_examples=200, deadline=None)
@given(gap=st.integers(1, 20), lateness=st.integers(0, 20), items=streams(keys=True), data=st.data())
def test_a_session_core_restored_from_its_store_continues_identically(gap, lateness, items, data):
    cut = data.draw(st.integers(0, len(items)))
    check_restore(lambda store: SessionWindows(gap, lateness, store), items, cut)


@settings(max_examples=200, deadline=None)
@given(length=st.integers(1, 8), slide=st.integers(1, 8), event_time=st.booleans(), items=streams(),
       data=st.data())
def test_a_count_core_restored_from_its_store_continues_identically(length, slide, event_time, items, data):
    cut = data.draw(st.integers(0, len(items)))
    check_restore(lambda store: CountWindows(length, slide, event_time, store), items, cut)


# ------------------------------------------------------------------------------------ mixed windows


@settings(max_examples=300, deadline=None)
@given(length=st.integers(1, 8), slide=st.integers(1, 40), items=streams(), data=st.data())
def test_count_every_duration_equals_the_reference(length, slide, items, data):
    core = CountEveryDuration(length, slide, event_time=True)
    steps, actions = run(core, items)
    assert steps == ref_count_every_duration(length, slide, True, items)
    check_acks(actions, [i[1] for i in items if i[0] == "e"], still_buffered=[e.seq for e in core.buffered()])
    assert len(core.queue) <= length  # after the end of input only the last window's tuples wait
    cut = data.draw(st.integers(0, len(items)))
    check_restore(lambda store: CountEveryDuration(length, slide, True, store), items, cut)


@settings(max_examples=300, deadline=None)
@given(length=st.integers(1, 60), slide=st.integers(1, 6), items=streams(), data=st.data())
def test_duration_every_count_equals_the_reference(length, slide, items, data):
    core = DurationEveryCount(length, slide, event_time=True)
    steps, actions = run(core, items)
    assert steps == ref_duration_every_count(length, slide, True, items)
    check_acks(actions, [i[1] for i in items if i[0] == "e"], still_buffered=[e.seq for e in core.buffered()])
    cut = data.draw(st.integers(0, len(items)))
    check_restore(lambda store: DurationEveryCount(length, slide, True, store), items, cut)


def test_mixed_windows_in_arrival_order():
    core = CountEveryDuration(3, 10)
    for i, ts in enumerate([1, 2, 5, 12, 13, 14, 15]):
        core.add(Entry(i, ts, i))
    fires = [(a.start, a.end, [e.seq for e in a.entries]) for a in core.advance(30) if isinstance(a, Fire)]
    assert fires == [(0, 10, [0, 1, 2]), (10, 20, [4, 5, 6])]
    core = DurationEveryCount(10, 2)
    out = [a for i, ts in enumerate([1, 5, 9, 12, 20, 21]) for a in core.add(Entry(i, ts, i))]
    fires = [(a.start, a.end, [e.seq for e in a.entries]) for a in out if isinstance(a, Fire)]
    assert fires == [(-4, 6, [0, 1]), (3, 13, [1, 2, 3]), (12, 22, [3, 4, 5])]
