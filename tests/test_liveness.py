"""A restarted task makes the checkpoint coordinator recover at once (``gale.worker.state.liveness``):
the hello message, the coordinator's memory of incarnations, and what both coordinators do on a
restart — pure, no I/O. The cluster tests (tests/test_state_cluster.py, tests/test_exactly_once_cluster.py)
kill -9 a worker with a message timeout longer than the test and see checkpoints commit again."""

from __future__ import annotations

import random

import pytest

from gale.worker.state.coordinator import (
    COMMIT, COMMITTED, COMMITTING, INITSTATE, PREPARE, PREPARING, ROLLBACK, Coordinator, Emit, TxState,
)
from gale.worker.state.epochs import ROLLING_BACK, Epoch, EpochCoordinator, Report, read_control
from gale.worker.state.liveness import (
    HELLO_SECS, TASK_HELLO, Incarnation, Incarnations, hello_message, is_hello, read_hello,
)
from tests.test_epochs import emits, rewound, running, saves

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def test_a_hello_round_trips_and_a_bad_one_is_refused_by_what_is_wrong():
    assert read_hello(hello_message(4, 6, 2**63 - 1)) == (4, 6, 2**63 - 1)
    assert is_hello((TASK_HELLO, 1, 2, 3)) and not is_hello((1, 1, 2, 3)) and not is_hello("x")
    with pytest.raises(ValueError, match="last task 3 before its first 5"):
        read_hello((TASK_HELLO, 5, 9, 3))
    with pytest.raises(ValueError, match="not a task hello"):
        read_hello((TASK_HELLO, -1, 9, 3))
    # the exactly-once decoder does not mistake it for an epoch or a report
    with pytest.raises(ValueError, match="unknown kind 3"):
        read_control(hello_message(1, 1, 7))


def test_a_new_incarnation_of_a_known_executor_is_a_restart():
    seen = Incarnations({3, 4, 5})
    assert seen.hello(hello_message(3, 4, 111)) is None  # first hello: no restart
    assert seen.hello(hello_message(3, 4, 111)) is None  # the periodic repeat
    assert seen.hello(hello_message(5, 5, 222)) is None
    assert seen.hello(hello_message(3, 4, 333)) == (3, 4)  # a new incarnation: restarted
    assert seen.hello(hello_message(3, 4, 333)) is None
    assert seen.restarts == 1
    with pytest.raises(ValueError, match="tasks 1-1, which are not bolt tasks"):
        seen.hello(hello_message(1, 1, 5))


class FakeRuntime:
    class layout:
        @staticmethod
        def component_tasks(component):
            return [9]

    def __init__(self):
        self.sent = []

    def send_control(self, task, payload):
        self.sent.append((task, payload))


class FakeExecutor:
    def __init__(self):
        self.runtime = FakeRuntime()
        self.tasks = [3, 4]
        self.preparers, self.timers, self.layers = [], [], {}


def test_a_bolt_executor_says_hello_at_its_first_timer_and_every_second():
    ex = FakeExecutor()
    layer = Incarnation(ex, coordinator=True, spouts=False, rng=random.Random(7))
    layer.attach()
    for step in ex.preparers:
        step()
    for now in (10.0, 10.5, 10.0 + HELLO_SECS, 10.0 + 2.5 * HELLO_SECS):
        for timer in ex.timers:
            timer(now)
    hello = hello_message(3, 4, layer.incarnation)
    assert ex.runtime.sent == [(9, hello)] * 3
    # a rebuilt executor (a restarted worker) has another incarnation
    assert Incarnation(FakeExecutor(), coordinator=True, spouts=False).incarnation != layer.incarnation


# ------------------------------------------------------------------------------ at-least-once


@pytest.mark.parametrize("recorded,in_flight,recovery", [
    # PREPARE lost with the dead task: roll back the prepared checkpoint, then initialize
    (TxState(4, PREPARING), (4, PREPARE), [(4, ROLLBACK), (3, INITSTATE)]),
    # COMMIT lost: past the commit point, commit again, then initialize
    (TxState(4, COMMITTING), (4, COMMIT), [(4, COMMIT), (4, INITSTATE)]),
    # nothing in flight between checkpoints: the restarted task is initialized now
    (TxState(4, COMMITTED), None, [(4, INITSTATE)]),
])
def test_at_least_once_a_restart_recovers_now_instead_of_at_the_message_timeout(recorded, in_flight, recovery):
    c = Coordinator(interval=1.0)
    c.start(recorded, 0.0)
    c.recovering, c.in_flight, c.last_checkpoint = False, in_flight, 0.0  # running, a tuple in flight
    steps = []
    out = c.restarted(0.2)
    while True:
        emitted = [(a.txid, a.action) for a in out if isinstance(a, Emit)]
        if not emitted:
            break
        steps += emitted
        out = c.acked(*emitted[0], 0.3)
        if not c.recovering:
            break
    assert steps == recovery
    assert not c.recovering and c.state.phase == COMMITTED
    if in_flight is not None:  # the lost tuple's late ack changes nothing
        assert c.acked(*in_flight, 0.4) == []


def test_at_least_once_a_restart_before_the_record_is_read_does_nothing():
    c = Coordinator(interval=1.0)
    assert c.restarted(0.0) == []


# ------------------------------------------------------------------------------ exactly-once


@pytest.mark.parametrize("phase", ["COMMITTED", "PAUSING", "PREPARING", "ROLLING_BACK"])
def test_exactly_once_a_restart_rolls_back_now(phase):
    c = running(now=0.0)  # COMMITTED(0, 1)
    if phase in ("PAUSING", "PREPARING"):
        c.tick(1.0, rewound(1))
        if phase == "PREPARING":
            c.tick(1.1, {1: Report(1, paused=1), 2: Report(1, paused=1)})
    elif phase == "ROLLING_BACK":
        c.restarted("first")
        c.tick(0.1, rewound(1))
    before = c.epoch
    c.restarted("bolt task(s) 3-4 restarted")
    out = c.tick(1.2, rewound(before.generation))
    assert saves(out) == [Epoch(before.committed, ROLLING_BACK, before.generation + 1)]
    assert emits(out) == [(before.committed + 1, ROLLBACK)]


def test_exactly_once_a_restart_past_the_commit_point_commits_first_then_rolls_back():
    c = running(now=0.0)
    c.tick(1.0, rewound(1))
    c.tick(1.1, {1: Report(1, paused=1), 2: Report(1, paused=1)})
    c.acked(1, PREPARE, 1.2)  # COMMITTING(1): COMMIT in flight
    assert c.epoch == Epoch(1, COMMITTING, 1)
    c.restarted("bolt task(s) 3-4 restarted")
    out = c.tick(1.3, rewound(1))
    assert emits(out) == [(1, COMMIT)]  # sent again: the restarted task may have lost it
    out = c.acked(1, COMMIT, 1.4)
    assert saves(out) == [Epoch(1, COMMITTED, 1)]
    out = c.tick(1.5, rewound(1))
    assert saves(out) == [Epoch(1, ROLLING_BACK, 2)] and emits(out) == [(2, ROLLBACK)]


def test_exactly_once_a_restart_before_start_does_nothing():
    c = EpochCoordinator(interval=1.0, pause_timeout=5.0)
    c.restarted("x")
    assert c.rollback_wanted is None and c.tick(0.0, {}) == []
