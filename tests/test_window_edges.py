"""Window edges: Gale's duration and session windows are ``[start, end)`` — a timestamp exactly on an
edge ``B`` is in the window starting at ``B`` —, where Storm's event-time windows are
``(end - length, end]`` (``docs/storm-model.md`` §12, ``docs/windows.md``). Pure cores, and one run
through the real runtime to see the bounds ``execute(window)`` gets."""

from __future__ import annotations

from gale.worker.windows.core import Fire, Late, SessionWindows, TimeWindows
from gale.worker.windows.store import Entry

from tests.test_windowed_bolt import Sim


def fires(actions):
    return [(a.start, a.end, [e.seq for e in a.entries]) for a in actions if isinstance(a, Fire)]


def test_a_timestamp_on_an_edge_is_in_the_tumbling_window_starting_there():
    """The issue's example: 10 s tumbling windows, a tuple at t = 10 s is in [10 s, 20 s) (Storm:
    (0, 10 s]), so it fires when the watermark reaches 20 s, not 10 s."""
    core = TimeWindows(10_000, 10_000)
    assert core.window_starts(10_000) == [10_000]
    assert core.window_starts(9_999) == [0]
    core.add(Entry(0, 9_999, "last of [0, 10 s)"))
    core.add(Entry(1, 10_000, "on the edge"))
    assert fires(core.advance(10_000)) == [(0, 10_000, [0])]
    assert fires(core.advance(19_999)) == []
    assert fires(core.advance(20_000)) == [(10_000, 20_000, [1])]


def test_a_timestamp_on_an_edge_of_sliding_windows_is_in_those_starting_at_or_before_it():
    core = TimeWindows(length=20, slide=10)
    assert core.window_starts(10) == [0, 10]  # not [-10, 10): it ends there
    assert core.window_starts(19) == [0, 10]
    assert core.window_starts(20) == [10, 20]
    core.add(Entry(0, 10, "edge"))
    assert fires(core.advance(30)) == [(0, 20, [0]), (10, 30, [0])]


def test_a_timestamp_equal_to_the_watermark_is_not_late_and_waits_for_the_window_starting_there():
    """Late means ``ts < W``: a tuple at ``W`` lands in ``[W, W + length)``, which has not fired."""
    core = TimeWindows(10, 10)
    core.add(Entry(0, 5, "a"))
    assert fires(core.advance(10)) == [(0, 10, [0])]
    assert core.add(Entry(1, 10, "at the watermark")) == []
    (late,) = core.add(Entry(2, 9, "before it"))
    assert isinstance(late, Late) and late.entry.seq == 2
    assert fires(core.advance(20)) == [(10, 20, [1])]


def test_a_session_ends_before_its_last_timestamp_plus_the_gap():
    """``[first ts, last ts + gap)``: a tuple exactly ``gap`` after the last opens a new session."""
    core = SessionWindows(gap=5)
    for seq, ts in enumerate([0, 4, 9]):
        core.add(Entry(seq, ts, seq, "k"))
    assert fires(core.advance(100)) == [(0, 9, [0, 1]), (9, 14, [2])]


def test_execute_gets_the_window_starting_on_the_edge():
    window = {"kind": "time", "length": 10_000, "slide": 10_000, "event_time": True}
    sim = Sim(window)
    try:
        sim.feed([[0, 10_000, "a"], [1, 20_000, "a"]])
        sim.tick()  # watermark 20 s: [10 s, 20 s) fires; 20 s waits in [20 s, 30 s)
        assert sim.windows() == [(10_000, 20_000, None, (0,), False)]
    finally:
        sim.stop()
