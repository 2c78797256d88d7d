"""A restarted bolt or acker executor makes the spouts replay their pending trees at once
(``topology.replay.on.restart``, ``gale.worker.state.liveness``): the hellos, the replay, and what
it leaves alone. Local topologies in simulated time; the cluster test (a ``kill -9`` under a message
timeout far beyond the wait) is in ``tests/test_cluster.py``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gale.topology.definition import ACKER_COMPONENT
from gale.worker.runtime.rotating import RotatingMap
from gale.worker.state.liveness import hello_message, replays_on_restart
from tests.test_reliable_spout import Hold, Numbers, _component, _simulated

#: far beyond anything these tests advance the clock by: no tree may time out
NO_TIMEOUT = {"topology.message.timeout.secs": 600}


def _executor(lt, component):
    for ex_id, ex in lt.runtime.executors.items():
        if lt.layout.executor_to_component[ex_id] == component:
            return ex
    raise AssertionError(f"no executor of {component}")


def _running(conf=None):
    """Numbers(3) → Hold (holds every first delivery): three trees pending; then every executor's
    first timer, so the spout has heard each one's hello."""
    lt, clock = _simulated(Numbers, Hold, {"n": 3}, {}, {**NO_TIMEOUT, **(conf or {})})
    rt = lt.runtime
    rt.run_until_idle()
    rt.fire_timers(clock.monotonic())
    rt.run_until_idle()
    return lt, clock


def test_a_restarted_bolt_executor_makes_the_spout_replay_every_pending_tree_at_once():
    lt, clock = _running()
    rt = lt.runtime
    spout, src, work = _component(lt, "src"), _executor(lt, "src"), _executor(lt, "work")
    assert sorted(spout.pending) == [0, 1, 2] and spout.acked == 0
    known = src.layers["restart_replay"].incarnations.known
    acker = _executor(lt, ACKER_COMPONENT)
    assert known == {work.tasks[0]: work.layers["incarnation"].incarnation,
                     acker.tasks[0]: acker.layers["incarnation"].incarnation}
    # the same executors say hello again a second later: nothing is replayed
    rt.fire_timers(clock.monotonic() + 1.0)
    rt.run_until_idle()
    assert spout.replayed == 0 and sorted(spout.pending) == [0, 1, 2]
    # the work executor's replacement (its worker was restarted) says hello with a new incarnation
    new = work.layers["incarnation"].incarnation ^ 1
    rt.send_control(src.tasks[0], hello_message(work.tasks[0], work.tasks[-1], new))
    rt.run_until_idle()
    assert spout.replayed == 3 and sorted(spout.acked_ids) == [0, 1, 2] and not spout.pending
    st = lt.component_stats()["src"]
    assert st["failed"] == 3 and st["acked"] == 3
    assert st["extra"]["replayed_on_restart"] == 3 and st["extra"]["task_restarts_seen"] == 1
    assert st["extra"].get("timed_out", 0) == 0
    rt.stop()


def test_a_restarted_acker_executor_makes_the_spout_replay_too():
    lt, _ = _running()
    rt = lt.runtime
    spout, src, acker = _component(lt, "src"), _executor(lt, "src"), _executor(lt, ACKER_COMPONENT)
    new = acker.layers["incarnation"].incarnation ^ 1
    rt.send_control(src.tasks[0], hello_message(acker.tasks[0], acker.tasks[-1], new))
    rt.run_until_idle()
    assert spout.replayed == 3 and sorted(spout.acked_ids) == [0, 1, 2]
    rt.stop()


def test_a_hello_naming_a_spout_task_is_refused_and_replays_nothing():
    lt, _ = _running()
    rt = lt.runtime
    spout, src = _component(lt, "src"), _executor(lt, "src")
    rt.send_control(src.tasks[0], hello_message(src.tasks[0], src.tasks[0], 5))
    rt.run_until_idle()
    assert spout.replayed == 0 and sorted(spout.pending) == [0, 1, 2]
    assert any("not bolt tasks of this topology" in e for e in lt.errors["src"]), lt.errors["src"]
    rt.stop()


def test_another_control_message_for_a_spout_with_no_handler_is_counted_as_refused():
    lt, _ = _running()
    rt = lt.runtime
    spout, src = _component(lt, "src"), _executor(lt, "src")
    rt.send_control(src.tasks[0], (9, 1, 2, 3))
    rt.run_until_idle()
    assert spout.replayed == 0 and lt.component_stats()["src"]["extra"]["control_refused"] == 1
    rt.stop()


def test_turned_off_no_executor_says_hello_and_a_restart_waits_for_the_message_timeout():
    lt, clock = _running({"topology.replay.on.restart": False})
    rt = lt.runtime
    spout, src, work = _component(lt, "src"), _executor(lt, "src"), _executor(lt, "work")
    assert "restart_replay" not in src.layers and "incarnation" not in work.layers
    rt.send_control(src.tasks[0], hello_message(work.tasks[0], work.tasks[-1], 1))
    rt.send_control(src.tasks[0], hello_message(work.tasks[0], work.tasks[-1], 2))
    rt.run_until_idle()
    assert spout.replayed == 0 and lt.component_stats()["src"]["extra"]["control_refused"] == 2
    clock.advance(1200.5)  # two rotations of the pending map: the Storm way, a timeout
    rt.fire_timers(clock.monotonic())
    rt.run_until_idle()
    assert spout.replayed == 3 and lt.component_stats()["src"]["extra"]["timed_out"] == 3
    rt.stop()


@pytest.mark.parametrize("acking,key,checkpointed,guarantee,expected", [
    (True, True, False, "at-least-once", True),
    (True, True, True, "at-least-once", True),
    (True, True, True, "exactly-once", False),  # the generations do it (gale.worker.state.epochs)
    (True, False, False, "at-least-once", False),
    (False, True, False, "at-least-once", False),  # no acker: nothing is pending
])
def test_which_topologies_replay_on_a_restart(monkeypatch, acking, key, checkpointed, guarantee, expected):
    import gale.worker.state.liveness as liveness

    monkeypatch.setattr(liveness, "has_checkpointing", lambda defn: checkpointed)
    runtime = SimpleNamespace(acking=acking, defn=None, config=SimpleNamespace(
        topology_replay_on_restart=key, topology_state_guarantee=guarantee))
    assert replays_on_restart(runtime) is expected


def test_drain_takes_every_entry_out_without_expiring_any():
    expired = []
    m = RotatingMap(3, on_expire=lambda k, v: expired.append(k))
    m.put("a", 1)
    m.rotate()
    m.put("b", 2)
    assert m.drain() == {"a": 1, "b": 2}
    assert len(m) == 0 and "a" not in m and not expired
    m.rotate(), m.rotate(), m.rotate()
    assert not expired
