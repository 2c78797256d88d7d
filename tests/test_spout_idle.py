"""A long-idle spout is asked less often (``topology.spout.wait.idle.max.sleep.millis``), and a
thread whose spouts are at ``topology.max.spout.pending`` sleeps until woken: an idle worker costs
~100 wake-ups a second, not 1,000. Local topologies on real executor threads."""

from __future__ import annotations

import pytest

from gale.worker.local import LocalCluster, LocalTopology, local_conf
from gale.worker.runtime.spout import IDLE_ASKS
from tests.test_local_mode import _mean_idle_wait, chain
from tests.waiting import until


def _spout_executor(running):
    return next(ex for ex in running.runtime.executors.values() if ex.component == "src")


def test_the_wait_after_an_empty_ask_grows_after_a_run_of_them_up_to_the_idle_maximum():
    topo = chain(spout_values=[]).create_topology("pause", {"topology.spout.wait.idle.max.sleep.millis": 10})
    lt = LocalTopology("pause", topo, local_conf(topo), start=False)
    try:
        ex = _spout_executor(lt)
        ex.spout_wait = 0.001
        pauses = {}
        for n in (1, IDLE_ASKS, IDLE_ASKS + 1, IDLE_ASKS + 4, IDLE_ASKS + 9, IDLE_ASKS + 500):
            ex.empty_asks = n
            pauses[n] = round(ex.idle_pause(), 6)
        assert pauses == {1: 0.001, IDLE_ASKS: 0.001, IDLE_ASKS + 1: 0.002, IDLE_ASKS + 4: 0.005,
                          IDLE_ASKS + 9: 0.01, IDLE_ASKS + 500: 0.01}
        ex.idle_wait_max = 0.0005  # a maximum under the spout wait: no growth
        assert ex.idle_pause() == 0.001
    finally:
        lt.runtime.close_resources()


# the mean sleep of an idle round: grown past Storm's 1 ms with the default maximum (10 ms), and
# bounded by the maximum, far under the 100 ms an idle thread sleeps without one (a busy host
# oversleeps: the upper bounds leave room)
@pytest.mark.parametrize("max_ms,low,high", [(10.0, 0.005, 0.05), (1.0, 0.0, 0.02)])
def test_a_long_idle_spout_s_thread_sleeps_up_to_the_idle_maximum_and_an_emit_ends_it(max_ms, low, high):
    b = chain(spout_values=[])
    with LocalCluster() as cluster:
        running = cluster.submit_topology("idle", {"topology.spout.wait.idle.max.sleep.millis": max_ms},
                                          b.create_topology())
        ex = _spout_executor(running)
        src = next(iter(ex.spouts.values()))
        until(lambda: ex.empty_asks > IDLE_ASKS + 20, 30, lambda: f"{ex.empty_asks} empty asks")
        mean = _mean_idle_wait(running.runtime)
        assert low <= mean <= high, mean
        src.values.append("again")
        until(lambda: src.acked == [0], 10, lambda: f"acked {src.acked}, failed {src.failed}")


def test_a_thread_whose_spout_is_at_max_spout_pending_sleeps_until_a_verdict_wakes_it():
    """The spout emits one tuple (max spout pending 1) that the bolt holds; its thread is not woken
    every spout wait (1 ms) to find the spout still full, but sleeps until its timers (≤ 100 ms)."""
    from tests.test_reliable_spout import Hold, Numbers, _simulated  # noqa: F401 - Hold holds first deliveries

    from gale import TopologyBuilder

    b = TopologyBuilder()
    b.set_spout("src", Numbers, 1, kwargs={"n": 5})
    b.set_bolt("work", Hold, 1).shuffle_grouping("src")
    conf = {"topology.max.spout.pending": 1, "topology.message.timeout.secs": 600}
    with LocalCluster() as cluster:
        running = cluster.submit_topology("full", conf, b.create_topology())
        ex = _spout_executor(running)
        until(lambda: ex.pending_full(), 10, "the spout's one pending tree")
        mean = _mean_idle_wait(running.runtime)
        assert mean >= 0.01, mean
        assert ex.pending_full()
