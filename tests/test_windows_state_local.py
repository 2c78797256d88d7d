"""Persistent windows (``WindowedBolt.with_persistence()``) in local mode: the real runtime, acker
and checkpoint protocol over the memory provider."""

from __future__ import annotations

import pytest

import gale
from gale import TopologyBuilder
from gale.errors import TopologyError
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.worker.local import LocalCluster, LocalTopology, local_conf
from tests.state_topologies import EventTimeTenths, FailingPrepare, NumberedItems, PersistentTens, Sink, TaskTotals
from tests.waiting import eventually


def items_topology(first: int, stop: int, name: str = "pw", extra: dict | None = None):
    b = TopologyBuilder()
    b.set_spout("items", NumberedItems, 1)
    b.set_bolt("windows", PersistentTens, 1).global_grouping("items")
    b.set_bolt("sink", Sink, 1).shuffle_grouping("windows")
    conf = {"test.items.first": first, "test.items.stop": stop, "topology.state.checkpoint.interval.ms": 50,
            **(extra or {})}
    return b.create_topology(name, conf)


def of(running, component, attr):
    return [x for ex in running.runtime.executors.values() if ex.component == component
            for x in getattr(ex, attr, {}).values()]


def test_a_persistent_window_gets_checkpoints_and_acks_its_tuples_when_they_commit():
    topo = items_topology(0, 100)
    assert CHECKPOINT_COMPONENT in topo.definition.components
    with LocalCluster() as cluster:
        running = cluster.submit_topology("pw", {}, topo)

        def all_acked():
            (spout,) = of(running, "items", "spouts")
            assert len(spout.acked_ids) == 100
            return spout

        spout = eventually(all_acked, timeout=60)
        (runner,) = of(running, "windows", "bolts")
        windows = list(runner.bolt.windows)
        committed = running.component_stats()[CHECKPOINT_COMPONENT]["extra"]["checkpoints_committed"]
        errors = dict(running.errors)
    assert windows == [list(range(s, s + 10)) for s in range(0, 100, 10)]
    assert spout.failed == 0 and spout.replayed == 0
    assert committed >= 1
    assert not errors


class _LongWindow(gale.WindowedBolt):
    def __init__(self, persistent: bool):
        super().__init__()
        self.with_tumbling_window(gale.Duration.seconds(120))
        if persistent:
            self.with_persistence()

    def execute(self, window):
        pass


class _BigCountWindow(gale.WindowedBolt):
    def __init__(self, persistent: bool):
        super().__init__()
        self.with_tumbling_window(gale.Count.of(5000))
        if persistent:
            self.with_persistence()

    def execute(self, window):
        pass


@pytest.mark.parametrize("bolt,rule", [(_LongWindow, "window duration <= topology.message.timeout.secs"),
                                        (_BigCountWindow, "window count <= topology.max.spout.pending")])
def test_the_submit_rules_are_lifted_for_persistent_windows_and_the_error_says_so(bolt, rule):
    def build(persistent):
        b = TopologyBuilder()
        b.set_spout("items", NumberedItems, 1)
        b.set_bolt("w", bolt, 1, kwargs={"persistent": persistent}).global_grouping("items")
        return b.create_topology("rules", {"topology.max.spout.pending": 100})

    with pytest.raises(TopologyError) as err:
        build(False)
    assert rule in str(err.value) and "with_persistence()" in str(err.value)
    topo = build(True)  # no error: acked at commit, not when the window fires
    assert CHECKPOINT_COMPONENT in topo.definition.components


def test_a_restart_with_the_same_provider_continues_the_window_in_progress():
    """Run 1 feeds items 0..24 (windows 0-9 and 10-19 fire; 20..24 wait in the window, acked once
    their checkpoint committed); run 2, on the same provider, feeds 25..49: the window in progress
    continues from the state — the results equal the offline reference, and nothing is replayed."""
    reference = [list(range(s, s + 10)) for s in range(0, 50, 10)]
    first_topo = items_topology(0, 25)
    with LocalCluster() as cluster:
        first = cluster.submit_topology("pw", {}, first_topo)
        eventually(lambda: _assert_eq(len(of(first, "items", "spouts")[0].acked_ids), 25), timeout=60)
        (runner,) = of(first, "windows", "bolts")
        windows = list(runner.bolt.windows)
        (spout1,) = of(first, "items", "spouts")
        provider = first.runtime.resources["state"]
        first.runtime.resources.pop("state")  # keep it open across the restart (as Redis outlives a worker)
        cluster.kill_topology("pw")
    assert windows == reference[:2]

    second_topo = items_topology(25, 50)
    second = LocalTopology("pw", second_topo, local_conf(second_topo), start=False)
    second.runtime.resources["state"] = provider
    second.runtime.start(active=True)
    try:
        eventually(lambda: _assert_eq(len(of(second, "items", "spouts")[0].acked_ids), 25), timeout=60)
        (runner2,) = of(second, "windows", "bolts")
        windows += runner2.bolt.windows
        (spout2,) = of(second, "items", "spouts")
        errors = dict(second.errors)
    finally:
        second.kill()
    assert windows == reference
    assert spout1.replayed == spout2.replayed == 0 and spout1.failed == spout2.failed == 0
    assert not errors


def _assert_eq(actual, expected):
    assert actual == expected
    return actual


def test_persistence_set_by_configuration_without_checkpoints_is_refused_naming_the_bolt():
    b = TopologyBuilder()
    b.set_spout("items", NumberedItems, 1)
    b.set_bolt("w", _LongWindow, 1, kwargs={"persistent": False}).global_grouping("items")
    topo = b.create_topology("cfg", {"topology.message.timeout.secs": 300})
    with LocalCluster() as cluster, pytest.raises(TopologyError, match=r"windowed bolts \(w\) have "
                                                  r"topology.bolts.window.persistent set by configuration"):
        cluster.submit_topology("cfg", {"topology.bolts.window.persistent": True}, topo)


def test_a_fields_grouped_persistent_window_keeps_per_task_state_and_acks_tuples_of_unfired_windows():
    """Any grouping is allowed: the state is per task (its keys are arrival ordinals, so key groups do
    not apply). Tuples of a last window that never fills are acked too (at their checkpoint)."""
    n = 203
    b = TopologyBuilder()
    b.set_spout("items", NumberedItems, 1)
    b.set_bolt("windows", PersistentTens, 2).fields_grouping("items", ["i"])
    topo = b.create_topology("pwf", {"test.items.first": 0, "test.items.stop": n,
                                     "topology.state.checkpoint.interval.ms": 50})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("pwf", {}, topo)
        eventually(lambda: _assert_eq(len(of(running, "items", "spouts")[0].acked_ids), n), timeout=60)
        runners = of(running, "windows", "bolts")
        per_task = {r.collector.task: (list(r.bolt.windows), len(r.core)) for r in runners}
        namespaces = sorted(ns for ex in running.runtime.executors.values() if ex.component == "windows"
                            for s in ex.layers["state"].states.values() for ns in s.namespaces)
        errors = dict(running.errors)
    assert namespaces == ["pwf/windows/task0", "pwf/windows/task1"]
    fired = [i for windows, _ in per_task.values() for w in windows for i in w]
    assert all(len(w) == 10 for windows, _ in per_task.values() for w in windows)
    assert len(fired) == len(set(fired)) and set(fired) <= set(range(n))
    assert len(fired) + sum(waiting for _, waiting in per_task.values()) == n
    assert not errors


def event_time_topology(first, stop, persistent=True, name="pet"):
    b = TopologyBuilder()
    b.set_spout("items", NumberedItems, 1)
    b.set_bolt("windows", EventTimeTenths, 1, kwargs={"persistent": persistent}).global_grouping("items")
    if not persistent:  # checkpoints come from a stateful bolt elsewhere in the topology
        b.set_bolt("count", TaskTotals, 1).shuffle_grouping("windows")
    return b.create_topology(name, {"test.items.first": first, "test.items.stop": stop,
                                    "topology.state.checkpoint.interval.ms": 50,
                                    "topology.message.timeout.secs": 600})


def test_the_checkpoint_spout_does_not_hold_back_the_watermark_of_an_event_time_window():
    """A windowed bolt reading a spout also reads the checkpoint spout's $checkpoint stream: that
    task sends no data, and must not count as a silent input (it would stall the watermark for the
    idle timeout, here 600 s)."""
    with LocalCluster() as cluster:
        running = cluster.submit_topology("pet", {}, event_time_topology(0, 50, persistent=False))
        (runner,) = of(running, "windows", "bolts")
        eventually(lambda: _assert_eq(runner.bolt.windows[:4], [list(range(s, s + 10)) for s in range(0, 40, 10)]),
                   timeout=30)
        errors = dict(running.errors)
    assert not errors


def test_a_restart_continues_an_event_time_window_in_progress_with_its_watermark():
    """Run 1: items 0..24 at ts = i * 100 ms: windows [0, 1 s) and [1 s, 2 s) fire; 20..24 wait in
    [2 s, 3 s) with the watermark at 2.4 s. Run 2 (same provider): 25..59; the window in progress
    fires with 20..29 once the watermark passes 3 s, and so on (the last window waits for input)."""
    reference = [list(range(s, s + 10)) for s in range(0, 50, 10)]
    with LocalCluster() as cluster:
        first = cluster.submit_topology("pet", {}, event_time_topology(0, 25))
        eventually(lambda: _assert_eq(len(of(first, "items", "spouts")[0].acked_ids), 25), timeout=60)
        (runner,) = of(first, "windows", "bolts")
        eventually(lambda: _assert_eq(runner.bolt.windows, reference[:2]), timeout=30)
        # windows [0, 1 s) and [1 s, 2 s) fire once the watermark passes 2 s; it reaches 2.4 s at the
        # next watermark event after item 24 (topology.bolts.watermark.event.interval.ms) — wait for that
        watermark = eventually(lambda: _assert_eq(runner.core.watermark, 2400), timeout=30)

        def committed() -> int:
            return first.component_stats()[CHECKPOINT_COMPONENT]["extra"]["checkpoints_committed"]

        # the restart restores the last committed checkpoint: wait for one prepared after the watermark
        # reached 2.4 s (the one in flight now may hold the state from before; the next one cannot)
        seen = committed()
        eventually(lambda: _assert_eq(committed() >= seen + 2, True), timeout=30)
        provider = first.runtime.resources["state"]
        first.runtime.resources.pop("state")
        cluster.kill_topology("pet")
    assert watermark == 2400
    topo = event_time_topology(25, 60)
    second = LocalTopology("pet", topo, local_conf(topo), start=False)
    second.runtime.resources["state"] = provider
    second.runtime.start(active=True)
    try:
        eventually(lambda: _assert_eq(len(of(second, "items", "spouts")[0].acked_ids), 35), timeout=60)
        (runner2,) = of(second, "windows", "bolts")
        eventually(lambda: _assert_eq(runner2.bolt.windows, reference[2:]), timeout=30)
        (spout2,) = of(second, "items", "spouts")
        errors = dict(second.errors)
    finally:
        second.kill()
    assert spout2.replayed == 0 and not errors


def test_nimbus_effective_config_check_lifts_the_rules_for_persistent_windows_only():
    """What nimbus runs at submit (validate_windows with the effective configuration): a -c override
    shortening the message timeout refuses the plain window naming with_persistence(), not the
    persistent one."""
    from gale import config as gconfig
    from gale.errors import ConfigError
    from gale.topology.windowing import validate_windows

    def defn(persistent):
        b = TopologyBuilder()
        b.set_spout("items", NumberedItems, 1)
        b.set_bolt("w", _LongWindow, 1, kwargs={"persistent": persistent}).global_grouping("items")
        return b.create_topology("eff", {"topology.message.timeout.secs": 600}).definition

    effective = {**gconfig.defaults(), "topology.message.timeout.secs": 10}
    validate_windows(defn(True).components, effective)
    with pytest.raises(ConfigError, match=r"windowed bolt 'w': rule 'window duration <= topology.message.timeout"
                                          r".secs'.*with_persistence\(\)"):
        validate_windows(defn(False).components, effective)


def test_a_rollback_reloads_the_window_and_replays_what_it_discarded():
    """A failed checkpoint (another bolt's prepare raises) rolls every stateful task back, the
    persistent window too: it reloads its committed contents and the inputs since then fail and
    replay. Nothing is lost: every item is in a fired window (a window that fired after the commit
    may fire again), every spout tuple is acked."""
    n = 300
    b = TopologyBuilder()
    b.set_spout("items", NumberedItems, 1)
    b.set_bolt("windows", PersistentTens, 1).global_grouping("items")
    b.set_bolt("flaky", FailingPrepare, 1).shuffle_grouping("items")
    topo = b.create_topology("prb", {"test.items.first": 0, "test.items.stop": n, "test.fail.prepare": 3,
                                     "topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 40})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("prb", {}, topo)
        eventually(lambda: _assert_eq(len(of(running, "items", "spouts")[0].acked_ids), n), timeout=60)
        (runner,) = of(running, "windows", "bolts")
        windows = list(runner.bolt.windows)
        (spout,) = of(running, "items", "spouts")
        errors = dict(running.errors)
        failures = running.component_stats()[CHECKPOINT_COMPONENT]["extra"]["checkpoint_failures"]
    assert failures >= 1 and any("injected prepare failure" in e for e in errors["flaky"])
    assert spout.replayed >= 1  # the rollback failed the inputs whose acks it held
    assert runner.restores >= 2  # the window was loaded at INITSTATE and reloaded by the rollback
    assert all(len(w) == 10 and len(set(w)) == 10 for w in windows)
    fired = {i for w in windows for i in w}
    # every item in a fired window, except those still waiting in the last, unfilled one
    assert fired | {e.item["i"] for e in runner.core.buffered()} == set(range(n))
    assert "windows" not in errors


def test_a_window_output_that_fails_downstream_fires_the_window_again():
    """A persistent window's outputs are sent anchored to the next PREPARE: the sink failing one
    fails that checkpoint, the topology rolls back to the previous one — where the window had not
    fired — and the windows fire again from the reloaded state and the replayed inputs. Every item
    reaches the sink; before, the items of a failed output were lost (acked with their checkpoint,
    never replayed)."""
    from tests.state_topologies import FlakyWindowSink

    n = 200
    b = TopologyBuilder()
    b.set_spout("items", NumberedItems, 1)
    b.set_bolt("windows", PersistentTens, 1).global_grouping("items")
    b.set_bolt("sink", FlakyWindowSink, 1).shuffle_grouping("windows")
    topo = b.create_topology("pwo", {"test.items.first": 0, "test.items.stop": n, "test.fail.window": 30,
                                     "topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 40})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("pwo", {}, topo)

        (runner,) = of(running, "windows", "bolts")

        def every_item_sunk():
            (sink,) = of(running, "sink", "bolts")
            assert sink.failed == [list(range(30, 40))]
            sunk = {i for w in sink.acked for i in w}
            # every item reached the sink in a window, but those in the last window, still filling
            assert sunk | {e.item["i"] for e in runner.core.buffered()} == set(range(n)), sorted(set(range(n)) - sunk)
            return sink

        sink = eventually(every_item_sunk, timeout=60)
        extra = running.component_stats()[CHECKPOINT_COMPONENT]["extra"]
    assert extra["checkpoint_failures"] >= 1  # the failed output failed its checkpoint
    assert runner.restores >= 2  # ... which reloaded the window (count windows: by arrival, so the
    assert all(len(w) == 10 and len(set(w)) == 10 for w in sink.acked)  # replays make other windows)
