"""What an update replaces (``window.replaces``, ``docs/windows.md`` "Updates"): a late tuple within the
allowed lateness that extends a session that fired, or merges several, re-fires it with new bounds;
the update lists the bounds of every earlier result it supersedes, so a sink that deletes those rows
and writes the new one ends with exactly the sessions computed from scratch. Pure cores (in memory,
and restored from a checkpoint of the store over managed state, as a persistent window is after a
restart), then the real runtime on a simulated clock."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gale import Duration, TopologyBuilder, WindowedBolt
from gale.clock import SimulatedClock
from gale.topology.state import KeyValueState
from gale.worker.local import LocalTopology, local_conf
from gale.worker.state.windows import StateWindowStore
from gale.worker.windows.core import FOREVER, Fire, SessionWindows, TimeWindows
from gale.worker.windows.store import Entry
from tests.test_windowed_bolt import Feed
from tests.test_windows_core import streams
from tests.test_windows_state_store import checkpointed, entry, fields_of
from tests.window_reference import _sessions


def fired(actions):
    return [(a.start, a.end, a.key, a.update, a.replaces) for a in actions if isinstance(a, Fire)]


def add(core, seq, ts, key="k"):
    return fired(core.add(Entry(seq, ts, ("value", seq), key)))


# ------------------------------------------------------------------------------------ examples


def test_a_late_tuple_extending_a_fired_session_replaces_its_bounds():
    core = SessionWindows(gap=5, allowed_lateness=20)
    add(core, 0, 0)
    assert fired(core.advance(10)) == [(0, 5, "k", False, [])]  # a first firing replaces nothing
    assert add(core, 1, 3) == [(0, 8, "k", True, [(0, 5)])]  # [3, 8) extends [0, 5)
    assert add(core, 2, 2) == [(0, 8, "k", True, [(0, 8)])]  # inside: same bounds, replaced all the same
    assert add(core, 3, 4) == [(0, 9, "k", True, [(0, 8)])]  # replaces what fired last, not [0, 5)


def test_a_late_tuple_merging_two_fired_sessions_replaces_both():
    core = SessionWindows(gap=5, allowed_lateness=20)
    add(core, 0, 0)
    add(core, 1, 8)
    assert fired(core.advance(14)) == [(0, 5, "k", False, []), (8, 13, "k", False, [])]
    assert add(core, 2, 4) == [(0, 13, "k", True, [(0, 5), (8, 13)])]  # [4, 9) bridges them


def test_an_extended_session_not_due_yet_replaces_its_bounds_when_it_fires():
    core = SessionWindows(gap=5, allowed_lateness=20)
    add(core, 0, 0)
    assert fired(core.advance(6)) == [(0, 5, "k", False, [])]
    assert add(core, 1, 7) == []  # not late: [7, 12) opens a session of its own
    assert add(core, 2, 4) == []  # [4, 9) merges [0, 5) (fired) and [7, 12) (not): ends after W = 6
    assert fired(core.advance(12)) == [(0, 12, "k", True, [(0, 5)])]


def test_replaces_names_only_sessions_of_the_same_key():
    core = SessionWindows(gap=5, allowed_lateness=20)
    add(core, 0, 0, "a")
    add(core, 1, 1, "b")
    assert sorted(fired(core.advance(10))) == [(0, 5, "a", False, []), (1, 6, "b", False, [])]
    assert add(core, 2, 3, "b") == [(1, 8, "b", True, [(1, 6)])]


def test_a_duration_window_update_replaces_its_own_bounds():
    core = TimeWindows(10, 10, allowed_lateness=5)
    core.add(Entry(0, 1, "x"))
    assert fired(core.advance(12)) == [(0, 10, None, False, [])]
    assert fired(core.add(Entry(1, 8, "late"))) == [(0, 10, None, True, [(0, 10)])]


# ------------------------------------------------------------------------------------ persistent windows


def restored(core, gap, lateness):
    """A new core over the store a persistent window's task loads after a commit (msgpack)."""
    out = SessionWindows(gap, lateness, StateWindowStore(checkpointed(core.store.state), fields_of))
    out.restore()
    return out


def test_a_restored_persistent_session_window_replaces_the_bounds_that_fired_before_the_restart():
    def over_state():
        return SessionWindows(5, 30, StateWindowStore(KeyValueState(), fields_of))

    def put(core, seq, ts, key="k"):
        return fired(core.add(entry(("e", seq, ts, key))))

    core = over_state()
    put(core, 0, 0)
    put(core, 1, 8)
    put(core, 2, 20)
    assert [f[:2] for f in fired(core.advance(14))] == [(0, 5), (8, 13)]
    core = restored(core, 5, 30)
    assert put(core, 3, 3) == [(0, 8, "k", True, [(0, 5)])]  # extends [0, 5)
    core = restored(core, 5, 30)
    assert put(core, 4, 7) == [(0, 13, "k", True, [(0, 8), (8, 13)])]  # merges [0, 8) and [8, 13)
    # a session extended by a late tuple and not due yet when the checkpoint is taken
    assert put(core, 5, 12) == []  # [12, 17) extends [0, 13) past W = 14
    assert put(core, 6, 16) == []  # [16, 21) bridges it with [20, 25), which has not fired
    core = restored(core, 5, 30)
    assert fired(core.advance(25)) == [(0, 25, "k", True, [(0, 13)])]


# ------------------------------------------------------------------------------------ properties


def sink_run(core, items, rebuild=None, cut=None):
    """Drive ``core`` (rebuilt by ``rebuild`` after ``cut`` items) into a sink that deletes the rows
    an output replaces and writes the output's: every replaced row must be in the sink. Returns the
    sink's rows per key, and every firing."""
    rows: dict = {}
    out = []
    for i, item in enumerate(items):
        if rebuild is not None and i == cut:
            core = rebuild(core)
        actions = core.add(entry(item)) if item[0] == "e" else core.advance(item[1])
        for a in actions:
            if not isinstance(a, Fire):
                continue
            held = rows.setdefault(a.key, set())
            assert set(a.replaces) <= held, (a, held)
            assert a.update == bool(a.replaces)
            assert all(s < a.end and a.start < e for s, e in a.replaces)  # what it covers, nothing else
            held.difference_update(a.replaces)
            held.add((a.start, a.end))
            out.append((a.start, a.end, a.key, a.update, list(a.replaces)))
    return rows, out


def scratch(items, gap, lateness):
    """The final sessions per key from scratch over the tuples that were not late."""
    w, accepted = None, {}
    for item in items:
        if item[0] == "e":
            if w is None or item[2] >= w - lateness:
                accepted.setdefault(item[3], []).append((item[2], item[1]))
        elif w is None or item[1] > w:
            w = item[1]
    return {k: {(s, e) for s, e, _ in _sessions(v, gap)} for k, v in accepted.items()}


@settings(max_examples=300, deadline=None)
@given(gap=st.integers(1, 20), lateness=st.integers(0, 30), items=streams(keys=True), data=st.data())
def test_a_sink_applying_replaces_ends_with_the_sessions_from_scratch_after_a_restore_too(gap, lateness, items,
                                                                                             data):
    assert items[-1] == ("w", FOREVER)

    def make():
        return SessionWindows(gap, lateness, StateWindowStore(KeyValueState(), fields_of))

    rows, out = sink_run(make(), items)
    assert rows == scratch(items, gap, lateness)
    # restored from a checkpoint at any point (the state through msgpack): the same outputs, replaces too
    cut = data.draw(st.integers(0, len(items)))
    again_rows, again = sink_run(make(), items, lambda core: restored(core, gap, lateness), cut)
    assert again == out and again_rows == rows


# ------------------------------------------------------------------------------------ the runtime


class SessionRows(WindowedBolt):
    """Sessions per ``key``, gap 5 ms, allowed lateness 50 ms: emits ``[key, start, end, replaces, update]``."""

    def __init__(self):
        super().__init__()
        (self.with_session_window(Duration(5), key_field="key").with_timestamp_field("ts")
             .with_allowed_lateness(Duration(50)).with_watermark_interval(Duration(100)))

    def declare_output_fields(self, d):
        d.declare(["key", "start", "end", "replaces", "update"])

    def execute(self, window):
        self.collector.emit([window.key, window.start, window.end, list(window.replaces), window.is_update])


class Run:
    """The real runtime on a simulated clock (as ``Sim`` of tests/test_windowed_bolt.py)."""

    def __init__(self):
        b = TopologyBuilder()
        b.set_spout("src", Feed, 1)
        b.set_bolt("win", SessionRows, 1).global_grouping("src")
        topo = b.create_topology(name="sessions", conf={})
        self.clock = SimulatedClock()
        self.rows: list = []
        self.lt = LocalTopology("sim", topo, local_conf(topo), clock=self.clock, spawn=False,
                                capture=lambda c, s, v: self.rows.append(list(v)) if c == "win" else None)
        self.rt = self.lt.runtime
        (self.spout,) = [t for ex in self.rt.executors.values() if ex.component == "src" for t in ex.spouts.values()]
        (self.runner,) = [t for ex in self.rt.executors.values() if ex.component == "win" for t in ex.bolts.values()]

    def feed(self, *values):
        self.spout.todo.extend(list(v) for v in values)
        self.rt.run_until_idle()
        out, self.rows = self.rows, []
        return out

    def tick(self):
        self.clock.advance(0.1)
        self.rt.run_until_idle()
        out, self.rows = self.rows, []
        return out


def test_execute_gets_what_an_update_replaces_and_a_restored_window_still_knows():
    run = Run()
    try:
        assert run.feed([0, 0, "a"], [1, 10, "a"], [2, 40, "a"], [3, 2, "b"]) == []
        assert sorted(run.tick()) == [["a", 0, 5, [], False], ["a", 10, 15, [], False],
                                      ["b", 2, 7, [], False]]  # watermark 40
        assert run.feed([4, 3, "a"]) == [["a", 0, 8, [(0, 5)], True]]  # extends [0, 5)
        # the task restarts from a checkpoint of its window (the store over managed state, msgpack)
        old = run.runner.core.store
        fields = old.entries()[0].item.fields
        store = StateWindowStore(KeyValueState(), lambda component, stream: fields)
        for e in sorted(old.entries(), key=lambda e: e.seq):
            store.put(e)
        store.set_meta(old.meta())
        run.runner.restore(StateWindowStore(checkpointed(store.state), lambda component, stream: fields),
                           run.runner.latest_timestamps())
        assert run.feed([5, 7, "a"]) == [["a", 0, 15, [(0, 8), (10, 15)], True]]  # merges [0, 8) and [10, 15)
        assert run.feed([6, 6, "b"]) == [["b", 2, 11, [(2, 7)], True]]
    finally:
        run.rt.stop()
