"""The watermark tracker: the minimum over input tasks, an idle task stops holding it back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from gale.worker.windows.watermark import WatermarkTracker

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def test_the_watermark_is_the_minimum_over_input_tasks_minus_the_lag():
    t = WatermarkTracker([1, 2], lag_ms=5, idle_timeout_ms=1000, now_ms=0)
    t.observe(1, 100, now_ms=10)
    assert t.compute(now_ms=20) is None  # task 2 has sent nothing yet and is not idle
    t.observe(2, 50, now_ms=30)
    assert t.compute(now_ms=40) == 45
    t.observe(2, 200, now_ms=50)
    assert t.compute(now_ms=60) == 95  # task 1 now holds it back


def test_the_watermark_never_goes_back():
    t = WatermarkTracker([1], lag_ms=0, idle_timeout_ms=1000, now_ms=0)
    t.observe(1, 100, 1)
    assert t.compute(2) == 100
    t.observe(1, 40, 3)  # out of order: the newest timestamp stays 100
    assert t.compute(4) == 100


def test_an_idle_input_task_stops_holding_the_watermark_after_the_idle_timeout():
    t = WatermarkTracker([1, 2, 3], lag_ms=0, idle_timeout_ms=500, now_ms=0)
    for now in range(0, 2000, 100):  # task 1 and 2 send, task 3 never does
        t.observe(1, now, now)
        t.observe(2, now + 7, now)
        wm = t.compute(now)
        if now < 500:
            assert wm is None, now  # task 3 may still send: held
        else:
            assert wm == now, now  # task 3 idle: min over 1 and 2
    assert t.active_tasks(1900) == [1, 2]
    t.observe(3, 10_000, 2000)  # task 3 wakes up: it counts again (the watermark does not go back)
    assert t.active_tasks(2000) == [1, 2, 3] and t.compute(2000) == 1900


def test_when_every_input_is_idle_event_time_moves_on_with_the_clock():
    t = WatermarkTracker([1, 2], lag_ms=10, idle_timeout_ms=500, now_ms=0)
    t.observe(1, 1000, 100)
    t.observe(2, 900, 100)
    assert t.compute(200) == 890
    assert t.compute(599) == 890  # both still active
    assert t.compute(600) == 1000 - 10 + 500  # both idle: newest - lag + time since the last arrival
    assert t.compute(1600) == 1000 - 10 + 1500


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 1000), st.integers(0, 50)), max_size=60),
       st.integers(0, 20), st.integers(1, 200))
def test_watermark_property(observations, lag, idle):
    """Monotonic; while every task is active, never above min(newest) - lag (no tuple of an active
    task is wrongly made late by a faster task)."""
    t = WatermarkTracker([1, 2, 3], lag_ms=lag, idle_timeout_ms=idle, now_ms=0)
    now, last = 0, None
    newest: dict[int, int] = {}
    seen = {1: 0, 2: 0, 3: 0}
    for task, ts, dt in observations:
        now += dt
        t.observe(task, ts, now)
        newest[task] = max(newest.get(task, ts), ts)
        seen[task] = now
        wm = t.compute(now)
        if last is not None:
            assert wm is not None and wm >= last
        active = [k for k in (1, 2, 3) if now - seen[k] < idle]
        if active and wm is not None and wm != last:
            assert all(k in newest for k in active)
            assert wm == min(newest[k] for k in active) - lag
        last = wm
