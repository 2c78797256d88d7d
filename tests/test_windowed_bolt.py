"""Windowed bolts through the real runtime: results equal the offline reference, every input tuple is
acked (window tuples on expiry, late tuples at once), outputs are anchored to the whole window.

Most tests drive a LocalTopology on a simulated clock (``spawn=False``): the test feeds the spout,
runs the executors until idle and moves the clock past the watermark interval, so the watermarks the
bolt computes are known (newest timestamp - lag) and the reference gets the same ones. The
``complete_topology`` tests run the real threads and clock on inputs whose result does not depend on
timing.
"""

from __future__ import annotations

import random
from collections import defaultdict, deque

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gale import (
    Bolt,
    Count,
    Duration,
    Spout,
    TopologyBuilder,
    WindowedBolt,
    complete_topology,
)
from gale.clock import SimulatedClock
from gale.worker.local import LocalTopology, local_conf
from gale.worker.windows.core import FOREVER
from tests.window_reference import (
    ref_count,
    ref_count_every_duration,
    ref_duration_every_count,
    ref_session,
    ref_time,
)


class Feed(Spout):
    """Emits what the test puts in ``todo`` — ``[seq, ts, key]`` — with ``seq`` as the message id."""

    def declare_output_fields(self, d):
        d.declare(["seq", "ts", "key"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.todo: deque = deque()
        self.acked: list[int] = []
        self.failed: list[int] = []

    def next_tuple(self):
        if self.todo:
            v = self.todo.popleft()
            self.collector.emit(v, msg_id=v[0])

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


class Collect(WindowedBolt):
    """Emits ``[start, end, key, seqs, is_update]`` per window; configured from a JSON dict."""

    def __init__(self, window):
        super().__init__()
        kind = window["kind"]
        if kind == "time":
            self.with_window(Duration(window["length"]), Duration(window["slide"]))
        elif kind == "count":
            self.with_window(Count(window["length"]), Count(window["slide"]))
        elif kind == "count_every_duration":
            self.with_window(Count(window["length"]), Duration(window["slide"]))
        elif kind == "duration_every_count":
            self.with_window(Duration(window["length"]), Count(window["slide"]))
        else:
            self.with_session_window(Duration(window["gap"]), key_field="key")
        if window.get("event_time"):
            self.with_timestamp_field("ts")
        if window.get("lag"):
            self.with_lag(Duration(window["lag"]))
        if window.get("lateness"):
            self.with_allowed_lateness(Duration(window["lateness"]))
        if window.get("late_stream"):
            self.with_late_tuple_stream(window["late_stream"])
        self.with_watermark_interval(Duration(window.get("interval", 100)))
        self.with_idle_timeout(Duration(window.get("idle", 10_000)))
        self.fail_start = window.get("raise_on_start")

    def declare_output_fields(self, d):
        d.declare(["start", "end", "key", "seqs", "update"])

    def execute(self, window):
        if self.fail_start is not None and window.start == self.fail_start:
            raise RuntimeError("boom in execute(window)")
        seqs = [t["seq"] for t in window.get()]
        self.collector.emit([window.start, window.end, window.key, seqs, window.is_update])


class FailWindow(Bolt):
    """Fails the outputs of the window starting at ``start``, acks the rest."""

    def __init__(self, start):
        self.start = start

    def execute(self, tup):
        (self.collector.fail if tup["start"] == self.start else self.collector.ack)(tup)


def topology(window, spout_tasks=1, conf=None, judge=None):
    b = TopologyBuilder()
    b.set_spout("src", Feed, spout_tasks)
    b.set_bolt("win", Collect, 1, kwargs={"window": window}).global_grouping("src")
    if judge is not None:
        b.set_bolt("judge", FailWindow, 1, kwargs={"start": judge}).shuffle_grouping("win")
    return b.create_topology(name="windows", conf=conf or {})


class Sim:
    def __init__(self, window, spout_tasks=1, conf=None, judge=None):
        topo = topology(window, spout_tasks, conf, judge)
        self.clock = SimulatedClock()
        self.emitted: dict = defaultdict(list)
        self.lt = LocalTopology("sim", topo, local_conf(topo, conf), clock=self.clock, spawn=False,
                                capture=lambda c, s, v: self.emitted[(c, s)].append(list(v)))
        self.rt = self.lt.runtime
        self.spouts = self._instances("src")
        (self.runner,) = self._instances("win")
        self.interval = window.get("interval", 100)

    def _instances(self, component):
        out = []
        for ex_id, ex in self.rt.executors.items():
            if self.lt.layout.executor_to_component[ex_id] == component:
                out.extend((getattr(ex, "spouts", None) or ex.bolts).values())
        return out

    def feed(self, values, spout=0):
        self.spouts[spout].todo.extend(values)
        self.rt.run_until_idle()

    def tick(self, ms=None):
        """Move the clock by ``ms`` (default: the watermark interval) and run until idle."""
        self.clock.advance((self.interval if ms is None else ms) / 1000.0)
        self.rt.run_until_idle()

    def windows(self):
        return sorted((s, e, k, tuple(seqs), u) for s, e, k, seqs, u in self.emitted[("win", "default")])

    def late(self, stream="late"):
        return sorted(v[0][0] for v in self.emitted[("win", stream)])

    @property
    def acked(self):
        return sorted(a for s in self.spouts for a in s.acked)

    @property
    def failed(self):
        return sorted(a for s in self.spouts for a in s.failed)

    def stop(self):
        self.rt.stop()


def drive(sim, batches, lag, close=True):
    """Feed ``batches`` of (seq, ts, key), a watermark tick after each; then go idle until
    everything closed (``close``: a long idle stretch, which times out whatever stays buffered, as
    the last tuples of windows counted in tuples do). Returns the reference items (watermark =
    newest timestamp - lag)."""
    items, newest = [], None
    for batch in batches:
        sim.feed([list(v) for v in batch])
        for seq, ts, key in batch:
            items.append(("e", seq, ts, key))
            newest = ts if newest is None else max(newest, ts)
        sim.tick()
        if newest is not None:
            items.append(("w", newest - lag))
    sim.tick(20_000)  # past the idle timeout: the watermark moves on with the clock
    if close:
        sim.tick(1_000_000)
    items.append(("w", FOREVER))
    return items


def flat(steps):
    return sorted(f for fires, _ in steps for f in fires), sorted(s for _, late in steps for s in late)


def random_batches(rng, n, lag, keys=("a",)):
    batches, batch, newest, seq = [], [], 0, 0
    for _ in range(n):
        ts = rng.randint(max(0, newest - lag - 20), newest + 30)  # sometimes later than the lag allows
        newest = max(newest, ts)
        batch.append((seq, ts, rng.choice(keys)))
        seq += 1
        if rng.random() < 0.3:
            batches.append(batch)
            batch = []
    batches.append(batch)
    return batches


# ------------------------------------------------------------------------------------ event time


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), length=st.integers(10, 120), data=st.data(), lag=st.integers(0, 40),
       lateness=st.integers(0, 60))
def test_event_time_windows_equal_the_reference(seed, length, data, lag, lateness):
    slide = data.draw(st.integers(5, length))
    window = {"kind": "time", "length": length, "slide": slide, "event_time": True, "lag": lag,
              "lateness": lateness, "late_stream": "late"}
    sim = Sim(window)
    try:
        batches = random_batches(random.Random(seed), 40, lag)
        items = drive(sim, batches, lag)
        fires, late = flat(ref_time(length, slide, lateness, items))
        assert sim.windows() == fires
        assert sim.late() == late
        n = sum(len(b) for b in batches)
        assert sim.acked == list(range(n)) and sim.failed == []  # late ones too (STORM-1859)
        assert sim.lt.component_stats()["win"]["extra"]["late_tuples"] == len(late)
    finally:
        sim.stop()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), gap=st.integers(5, 60), lag=st.integers(0, 40), lateness=st.integers(0, 60))
def test_session_windows_equal_the_reference(seed, gap, lag, lateness):
    window = {"kind": "session", "gap": gap, "event_time": True, "lag": lag, "lateness": lateness}
    sim = Sim(window)
    try:
        batches = random_batches(random.Random(seed), 40, lag, keys=("a", "b", "c"))
        items = drive(sim, batches, lag)
        fires, late = flat(ref_session(gap, lateness, items))
        assert sim.windows() == sorted(fires)
        n = sum(len(b) for b in batches)
        # no late-tuple stream: late tuples are acked and counted
        assert sim.acked == list(range(n)) and sim.failed == []
        assert sim.lt.component_stats()["win"]["extra"]["late_tuples"] == len(late)
    finally:
        sim.stop()


def test_count_windows_by_event_time_equal_the_reference():
    window = {"kind": "count", "length": 4, "slide": 2, "event_time": True, "lag": 10, "late_stream": "late"}
    sim = Sim(window)
    try:
        batches = random_batches(random.Random(7), 60, 10)
        items = drive(sim, batches, 10)
        fires, late = flat(ref_count(4, 2, True, items))
        assert sim.windows() == fires and sim.late() == late
        # acked: late ones and those no window can hold any more; the rest wait for the next window
        buffered = [e.item["seq"] for e in sim.runner.core.buffered()]
        assert len(buffered) <= 2 and sorted(sim.acked + buffered) == list(range(60))
    finally:
        sim.stop()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), length=st.integers(1, 8), slide=st.integers(5, 60), lag=st.integers(0, 30))
def test_mixed_windows_by_event_time_equal_the_reference(seed, length, slide, lag):
    for kind, ref, n, d in (("count_every_duration", ref_count_every_duration, length, slide),
                            ("duration_every_count", ref_duration_every_count, slide, length)):
        window = {"kind": kind, "length": n, "slide": d, "event_time": True, "lag": lag, "late_stream": "late"}
        sim = Sim(window)
        try:
            items = drive(sim, random_batches(random.Random(seed), 40, lag), lag, close=False)
            fires, late = flat(ref(n, d, True, items))
            assert sim.windows() == fires and sim.late() == late
            buffered = [e.item["seq"] for e in sim.runner.core.buffered()]
            assert sorted(sim.acked + buffered) == list(range(40)) and sim.failed == []
        finally:
            sim.stop()


def test_the_last_n_tuples_every_duration_in_processing_time():
    sim = Sim({"kind": "count_every_duration", "length": 3, "slide": 1000})
    try:
        sim.feed([[i, 0, "a"] for i in range(5)])
        sim.tick(1000)
        sim.feed([[5, 0, "a"]])
        sim.tick(1000)
        sim.tick(1000)  # nothing new: no window
        assert [w[3] for w in sim.windows()] == [(2, 3, 4), (3, 4, 5)]
        assert sim.acked == [0, 1, 2]
    finally:
        sim.stop()


def test_an_update_is_emitted_when_a_late_tuple_lands_in_a_fired_window():
    window = {"kind": "time", "length": 100, "slide": 100, "event_time": True, "lateness": 50,
              "late_stream": "late"}
    sim = Sim(window)
    try:
        sim.feed([[0, 10, "a"], [1, 120, "a"]])
        sim.tick()
        assert sim.windows() == [(0, 100, None, (0,), False)]
        sim.feed([[2, 90, "a"]])  # watermark 120: 90 >= 120 - 50: an update
        sim.feed([[3, 75, "a"]])  # and another
        assert [w for w in sim.windows() if w[4]] == [(0, 100, None, (0, 2), True), (0, 100, None, (0, 3, 2), True)]
        sim.feed([[4, 60, "a"], [5, 5, "a"]])  # 60 and 5 < 120 - 50: late
        assert sim.late() == [4, 5]
        assert sim.acked == [4, 5]  # acked at once; the window stays open for updates until 100 <= W - 50
        sim.feed([[6, 160, "a"]])
        sim.tick()  # watermark 160: [0, 100) dropped, its tuples acked
        assert sim.acked == [0, 2, 3, 4, 5]
    finally:
        sim.stop()


# ------------------------------------------------------------------------------------ watermarks


def test_watermark_waits_for_every_input_task_until_the_idle_one_times_out():
    window = {"kind": "time", "length": 100, "slide": 100, "event_time": True, "idle": 1000, "interval": 100}
    sim = Sim(window, spout_tasks=3)
    try:
        for step in range(5):  # tasks 0 and 1 send, task 2 is idle
            sim.feed([[step * 2, step * 100 + 10, "a"]], spout=0)
            sim.feed([[step * 2 + 1, step * 100 + 20, "a"]], spout=1)
            sim.tick()
        assert len(sim.runner.core) == 10  # every tuple arrived (the positive marker) ...
        assert sim.windows() == [] and sim.runner.core.watermark is None  # ... and task 2 holds the watermark
        sim.tick(600)  # task 2 idle for 1100 ms now; tasks 0 and 1 were last heard 600 ms ago: still active
        assert sim.runner.core.watermark == 410
        assert [w[:2] for w in sim.windows()] == [(0, 100), (100, 200), (200, 300), (300, 400)]
        sim.feed([[10, 50, "a"]], spout=2)  # the idle task wakes up with an old timestamp: late, acked
        assert 10 in sim.acked
        assert sim.lt.component_stats()["win"]["extra"]["late_tuples"] == 1
    finally:
        sim.stop()


# ------------------------------------------------------------------------------------ reliability


def test_outputs_are_anchored_to_every_tuple_of_the_window():
    window = {"kind": "time", "length": 100, "slide": 100, "event_time": True}
    sim = Sim(window, judge=100)  # the judge fails the output of window [100, 200)
    try:
        drive(sim, [[(i, i * 25, "a") for i in range(12)]], 0)  # ts 0..275
        assert sim.failed == [4, 5, 6, 7]  # ts 100, 125, 150, 175: that window's tuples, all of them
        assert sim.acked == [0, 1, 2, 3, 8, 9, 10, 11]
    finally:
        sim.stop()


def test_window_tuples_are_acked_only_when_they_leave_their_last_window():
    window = {"kind": "time", "length": 300, "slide": 100, "event_time": True}
    sim = Sim(window)
    try:
        sim.feed([[0, 50, "a"], [1, 150, "a"]])
        sim.tick()
        sim.feed([[2, 350, "a"]])
        sim.tick()  # watermark 350: [-200, 100), [-100, 200), [0, 300) fired; ts 50's last window is [0, 300)
        assert sim.acked == [0]
        sim.feed([[3, 420, "a"]])
        sim.tick()  # watermark 420: [100, 400) fired; ts 150's last window
        assert sim.acked == [0, 1]
    finally:
        sim.stop()


def test_an_exception_in_execute_is_reported_and_fails_the_window_tuples():
    window = {"kind": "time", "length": 100, "slide": 100, "event_time": True, "raise_on_start": 0}
    sim = Sim(window)
    try:
        drive(sim, [[(0, 10, "a"), (1, 20, "a"), (2, 150, "a")]], 0)
        assert sim.failed == [0, 1] and sim.acked == [2]
        assert "boom in execute(window)" in sim.lt.errors["win"][0]
    finally:
        sim.stop()


def test_a_tuple_without_a_timestamp_fails_with_the_field_named():
    window = {"kind": "time", "length": 100, "slide": 100, "event_time": True}
    sim = Sim(window)
    try:
        sim.feed([[0, "yesterday", "a"]])
        assert sim.failed == [0]
        assert "expected epoch milliseconds" in sim.lt.errors["win"][0]
    finally:
        sim.stop()


# ------------------------------------------------------------------------------------ processing time


def test_processing_time_count_window_tumbling():
    sim = Sim({"kind": "count", "length": 3, "slide": 3})
    try:
        sim.feed([[i, 0, "a"] for i in range(10)])
        assert [w[3] for w in sim.windows()] == [(0, 1, 2), (3, 4, 5), (6, 7, 8)]
        assert sim.acked == list(range(9)) and len(sim.runner.core) == 1
    finally:
        sim.stop()


def test_processing_time_duration_window_fires_on_the_clock():
    sim = Sim({"kind": "time", "length": 1000, "slide": 500})
    try:
        start_ms = int(sim.clock.time() * 1000)
        sim.feed([[0, 0, "a"], [1, 0, "a"]])
        sim.tick(600)
        sim.feed([[2, 0, "a"]])
        sim.tick(2000)
        wins = sim.windows()
        assert all(s % 500 == 0 and e - s == 1000 for s, e, *_ in wins)
        first = [w for w in wins if w[0] <= start_ms < w[1]]
        assert len(first) == 2 and all({0, 1} <= set(w[3]) for w in first)
        assert sim.acked == [0, 1, 2]
    finally:
        sim.stop()


# ------------------------------------------------------------------------------------ complete_topology


def test_complete_topology_event_time_sliding_equals_the_reference():
    rng = random.Random(3)
    ts, rows = 0, []
    for seq in range(300):
        ts += rng.randint(0, 20)
        rows.append([seq, max(0, ts - rng.randint(0, 50)), "a"])  # out of order within the lag (50)
    window = {"kind": "time", "length": 500, "slide": 100, "event_time": True, "lag": 50, "interval": 20,
              "idle": 200}
    res = complete_topology(topology(window), {"src": rows}, timeout=60)
    assert res.failed == [] and res.acked == list(range(300))
    got = sorted((s, e, k, tuple(seqs), u) for s, e, k, seqs, u in res.read("win"))
    items = [("e", s, t, None) for s, t, _ in rows] + [("w", FOREVER)]
    assert got == flat(ref_time(500, 100, 0, items))[0]


def test_complete_topology_sessions_equal_the_reference():
    rows = [[i, t, k] for i, (t, k) in enumerate(
        [(0, "u1"), (30, "u1"), (5, "u2"), (400, "u1"), (90, "u2"), (420, "u1"), (1000, "u2"), (1010, "u1")])]
    window = {"kind": "session", "gap": 100, "event_time": True, "lag": 100, "interval": 20, "idle": 200}
    res = complete_topology(topology(window), {"src": rows}, timeout=60)
    got = sorted((s, e, k, tuple(seqs), u) for s, e, k, seqs, u in res.read("win"))
    assert got == [(0, 130, "u1", (0, 1), False), (5, 190, "u2", (2, 4), False), (400, 520, "u1", (3, 5), False),
                   (1000, 1100, "u2", (6,), False), (1010, 1110, "u1", (7,), False)]
    assert res.acked == list(range(8))


def test_a_session_longer_than_the_message_timeout_keeps_its_tuples_without_replays():
    """A user clicking every 2 s for 60 s: one session far longer than the 10 s message timeout. Its
    tuples' timeouts are reset while they wait, so none is failed and replayed."""
    window = {"kind": "session", "gap": 5000, "event_time": True, "interval": 500, "idle": 60_000}
    sim = Sim(window, conf={"topology.message.timeout.secs": 10})
    try:
        t0 = 1000
        for i in range(30):
            sim.feed([[i, t0 + i * 2000, "u"]])
            sim.tick(2000)
        assert sim.windows() == [] and len(sim.runner.core) == 30  # the session is still open ...
        assert sim.failed == []  # ... and 60 s > 2 x the timeout passed without a replay
        assert sim.lt.component_stats()["win"]["extra"]["window_timeout_resets"] > 0
        sim.feed([[30, t0 + 80_000, "u"]])  # the watermark passes the session's end
        sim.tick(500)
        (session,) = [w for w in sim.windows() if w[0] == t0]
        assert session[3] == tuple(range(30)) and session[1] == t0 + 58_000 + 5000
        assert sim.acked == list(range(30)) and sim.failed == []
    finally:
        sim.stop()


def test_late_tuples_and_fired_windows_are_in_the_workers_metrics():
    from types import SimpleNamespace

    from gale.worker.metrics import WorkerMetrics
    from tests.test_metrics import samples, value

    sim = Sim({"kind": "time", "length": 100, "slide": 100, "event_time": True})
    try:
        sim.feed([[0, 10, "a"], [1, 250, "a"]])
        sim.tick()  # watermark 250: [0, 100) fired
        sim.feed([[2, 20, "a"], [3, 30, "a"]])  # late, no late-tuple stream: acked and counted
        worker = SimpleNamespace(runtime=sim.rt, transfer=None, topology_id="w-1-1", supervisor_id="s", port=6700,
                                 worker_id="w", started=0.0, conf=sim.lt.conf)
        s = samples(WorkerMetrics(worker).registry)
        assert value(s, "gale_worker_extra_late_tuples", component="win") == 2
        assert value(s, "gale_worker_extra_windows_fired", component="win") == 1
        assert sim.acked == [0, 2, 3]
    finally:
        sim.stop()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), lag=st.integers(0, 30), lateness=st.integers(0, 40))
def test_watermark_over_several_input_tasks_equals_the_reference(seed, lag, lateness):
    """Three spout tasks, each with its own clock skew: the bolt's watermark is the minimum over the
    tasks (none until every task has sent); the results equal the reference fed those watermarks."""
    rng = random.Random(seed)
    window = {"kind": "time", "length": 60, "slide": 20, "event_time": True, "lag": lag, "lateness": lateness,
              "late_stream": "late"}
    sim = Sim(window, spout_tasks=3)
    try:
        newest: dict[int, int] = {}
        skew = [rng.randint(0, 40) for _ in range(3)]
        items, seq, clock = [], 0, 0
        for _ in range(25):
            task = rng.randrange(3)
            batch = []
            for _ in range(rng.randint(1, 4)):
                clock += rng.randint(0, 6)
                ts = max(0, clock - skew[task] - rng.randint(0, lag + 5))
                batch.append([seq, ts, "a"])
                items.append(("e", seq, ts, None))
                newest[task] = max(newest.get(task, ts), ts)
                seq += 1
            sim.feed(batch, spout=task)
            sim.tick()
            if len(newest) == 3:
                items.append(("w", min(newest.values()) - lag))
        sim.tick(20_000)
        sim.tick(1_000_000)
        items.append(("w", FOREVER))
        fires, late = flat(ref_time(60, 20, lateness, items))
        assert sim.windows() == fires and sim.late() == late
        assert sim.acked == list(range(seq)) and sim.failed == []
    finally:
        sim.stop()


class Fan(Bolt):
    """Three copies of each input, anchored to it (the words of a sentence: one root, three tuples)."""

    def declare_output_fields(self, d):
        d.declare(["seq", "ts", "key"])

    def execute(self, tup):
        for _ in range(3):
            self.collector.emit(list(tup.values), anchors=tup)
        self.collector.ack(tup)


class Judge(Bolt):
    """Records how many roots each window output carries; fails the output of window ``start``."""

    def __init__(self, start):
        self.start = start

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.roots: list[int] = []

    def execute(self, tup):
        self.roots.append(len(tup.message_id))
        (self.collector.fail if tup["start"] == self.start else self.collector.ack)(tup)


def test_outputs_carry_one_edge_per_spout_tuple_of_the_window_and_fail_all_of_them():
    b = TopologyBuilder()
    b.set_spout("src", Feed, 1)
    b.set_bolt("fan", Fan, 2).shuffle_grouping("src")
    b.set_bolt("win", Collect, 1, kwargs={"window": {"kind": "time", "length": 100, "slide": 100,
                                                     "event_time": True}}).global_grouping("fan")
    b.set_bolt("judge", Judge, 1, kwargs={"start": 100}).shuffle_grouping("win")
    topo = b.create_topology(name="fan")
    clock = SimulatedClock()
    lt = LocalTopology("fan", topo, local_conf(topo, {}), clock=clock, spawn=False)
    try:
        spout = next(s for ex in lt.runtime.executors.values() if ex.component == "src" for s in ex.spouts.values())
        judge = next(j for ex in lt.runtime.executors.values() if ex.component == "judge" for j in ex.bolts.values())
        spout.todo.extend([[i, i * 25, "a"] for i in range(12)])  # 4 sentences per window, 12 tuples
        lt.runtime.run_until_idle()
        clock.advance(20)  # every input idle: the watermark moves on with the clock; all windows close
        lt.runtime.run_until_idle()
        clock.advance(1)
        lt.runtime.run_until_idle()
        assert judge.roots == [4, 4, 4]  # one edge per sentence, not per tuple (12 tuples a window)
        assert sorted(spout.failed) == [4, 5, 6, 7] and sorted(spout.acked) == [0, 1, 2, 3, 8, 9, 10, 11]
    finally:
        lt.runtime.stop()
