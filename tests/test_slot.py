"""The supervisor slot state machine in simulated time (no processes, no sleeps)."""

from itertools import count

import pytest

from gale.supervisor.slot import (
    Cleanup, Kill, KillReason, Launch, LocalAssignment, Observation, RequestCode, Slot, State, Timeouts, step,
)

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

A = LocalAssignment("t-1-1", ((1, 2), (3, 3)), "c" * 64)
B = LocalAssignment("t-1-1", ((4, 4),), "c" * 64)
T = Timeouts(hb_timeout=30, start_timeout=120, shutdown_sleep=3, max_backoff=60, stable_secs=60)


class World:
    """A fake world the test controls: assignment, code, heartbeat, process."""

    def __init__(self):
        self.now = 1000.0
        self.assignment = None
        self.code = False
        self.hb = None
        self.alive = False
        self.ids = count(1)
        self.launched = []
        self.killed = []
        self.cleaned = []
        self.slot = Slot(port=6700, since=self.now)

    def tick(self, secs=1.0, n=1):
        actions = []
        for _ in range(n):
            self.now += secs
            obs = Observation(self.now, self.assignment, self.code, self.hb, self.alive)
            self.slot, acts = step(self.slot, obs, T, worker_id_factory=lambda: f"w{next(self.ids)}")
            for a in acts:
                if isinstance(a, Launch):
                    self.launched.append(a.worker_id)
                    self.alive = True
                    self.hb = None
                elif isinstance(a, Kill):
                    self.killed.append((a.worker_id, a.force, a.reason))
                elif isinstance(a, Cleanup):
                    self.cleaned.append(a.worker_id)
            actions += acts
        return actions


def running_world():
    w = World()
    w.assignment = A
    assert [type(a) for a in w.tick()] == [RequestCode]
    assert w.slot.state == State.WAITING_FOR_CODE
    w.tick()
    w.code = True
    assert [type(a) for a in w.tick()] == [Launch]
    assert w.slot.state == State.WAITING_FOR_WORKER_START
    w.hb = w.now
    w.tick()
    assert w.slot.state == State.RUNNING
    return w


def test_empty_to_running():
    w = running_world()
    assert w.launched == ["w1"] and w.slot.current == A


def test_process_exit_relaunches_at_once_then_backs_off():
    w = running_world()
    w.alive = False
    w.tick()  # dead → KILL_AND_RELAUNCH (nothing to signal)
    assert w.slot.state == State.KILL_AND_RELAUNCH and w.slot.kill_reason == KillReason.PROCESS_EXIT
    w.tick()  # cleaned up and relaunched immediately (first crash)
    assert w.cleaned == ["w1"] and w.launched == ["w1", "w2"]
    # crash again right away: second relaunch waits 1 s, third 2 s
    w.alive = False
    w.tick(0.1)
    w.tick(0.1)
    assert w.launched == ["w1", "w2"]
    w.tick(1.0)
    assert w.launched == ["w1", "w2", "w3"]
    w.alive = False
    w.tick(0.1, n=2)
    w.tick(1.0)
    assert len(w.launched) == 3
    w.tick(1.5)
    assert len(w.launched) == 4


def test_heartbeat_timeout_kills_then_forces_then_relaunches():
    w = running_world()
    w.tick(29)
    assert w.slot.state == State.RUNNING
    w.tick(2)  # 31 s without a new heartbeat
    assert w.slot.state == State.KILL_AND_RELAUNCH and w.slot.kill_reason == KillReason.HB_TIMEOUT
    assert w.killed == [("w1", False, KillReason.HB_TIMEOUT)]
    w.tick(1)
    assert len(w.killed) == 1  # waiting supervisor.worker.shutdown.sleep.secs
    w.tick(2)
    assert w.killed[-1] == ("w1", True, KillReason.HB_TIMEOUT)  # SIGKILL
    w.alive = False
    w.tick()
    assert w.cleaned == ["w1"] and w.launched[-1] == "w2" and w.slot.state == State.WAITING_FOR_WORKER_START


def test_missing_heartbeat_while_running_is_hb_null():
    w = running_world()
    w.hb = None
    w.tick()
    assert w.slot.kill_reason == KillReason.HB_NULL


def test_start_timeout():
    w = World()
    w.assignment, w.code = A, True
    w.tick()
    assert w.slot.state == State.WAITING_FOR_WORKER_START
    w.tick(100)
    assert w.slot.state == State.WAITING_FOR_WORKER_START
    w.tick(21)
    assert w.slot.state == State.KILL_AND_RELAUNCH and w.slot.kill_reason == KillReason.HB_TIMEOUT


def test_assignment_change_kills_and_starts_new_work():
    w = running_world()
    w.assignment = B
    w.tick()
    assert w.slot.state == State.KILL and w.killed == [("w1", False, KillReason.ASSIGNMENT_CHANGED)]
    w.alive = False
    w.tick()
    assert w.cleaned == ["w1"] and w.slot.current == B and w.launched[-1] == "w2"


def test_assignment_removed_goes_empty():
    w = running_world()
    w.assignment = None
    w.tick()
    w.alive = False
    w.tick()
    assert w.slot.state == State.EMPTY and w.slot.current is None and w.cleaned == ["w1"]


def test_assignment_changes_while_waiting_for_code():
    w = World()
    w.assignment = A
    w.tick()
    w.assignment = B
    acts = w.tick()
    assert acts == [RequestCode(B)] and w.slot.current == B
    w.assignment = None
    w.tick()
    assert w.slot.state == State.EMPTY


def test_restart_count_resets_after_stable_running():
    w = running_world()
    w.alive = False
    w.tick(n=2)
    w.hb = w.now
    w.tick()
    assert w.slot.state == State.RUNNING and w.slot.restarts == 1
    for _ in range(7):
        w.hb = w.now
        w.tick(10)
    assert w.slot.restarts == 0
