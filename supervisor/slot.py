"""The per-slot state machine (Storm's supervisor ``Slot``), as a pure function.

Each worker slot (port) has an immutable :class:`Slot` value. The supervisor's loop observes the
world (the desired assignment, whether its code is ready, the worker's LocalState heartbeat, whether
its process lives) and calls :func:`step`, which returns the next value and the actions to perform
(download code, launch, kill, clean up). Nothing here sleeps, reads a clock or touches a process,
so tests drive crashes, timeouts and reassignments in simulated time.

States: EMPTY → WAITING_FOR_CODE → WAITING_FOR_WORKER_START → RUNNING → KILL / KILL_AND_RELAUNCH.
Kill reasons (Storm's): ASSIGNMENT_CHANGED, PROCESS_EXIT, HB_TIMEOUT, HB_NULL.

A worker whose process exits is relaunched at once the first time; repeated crashes back off
exponentially (1 s, 2 s, 4 s ... up to ``max_backoff``), and the count resets once a worker has
run for ``stable_secs``.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace

from gale.records import ExecutorId


class State(str, enum.Enum):
    EMPTY = "EMPTY"
    WAITING_FOR_CODE = "WAITING_FOR_CODE"
    WAITING_FOR_WORKER_START = "WAITING_FOR_WORKER_START"
    RUNNING = "RUNNING"
    KILL = "KILL"
    KILL_AND_RELAUNCH = "KILL_AND_RELAUNCH"


class KillReason(str, enum.Enum):
    ASSIGNMENT_CHANGED = "ASSIGNMENT_CHANGED"
    PROCESS_EXIT = "PROCESS_EXIT"
    HB_TIMEOUT = "HB_TIMEOUT"
    HB_NULL = "HB_NULL"
    SHUTDOWN = "SHUTDOWN"


@dataclass(frozen=True)
class LocalAssignment:
    """What one slot should run: a topology's executors, with the code checksum."""

    topology_id: str
    executors: tuple[ExecutorId, ...]
    code_checksum: str

    def to_json(self) -> dict:
        return {"topology_id": self.topology_id, "executors": [list(e) for e in self.executors],
                "code_checksum": self.code_checksum}

    @classmethod
    def from_json(cls, d: dict) -> LocalAssignment:
        return cls(d["topology_id"], tuple(tuple(e) for e in d["executors"]), d["code_checksum"])


# ---------------------------------------------------------------- actions


@dataclass(frozen=True)
class RequestCode:
    assignment: LocalAssignment


@dataclass(frozen=True)
class Launch:
    assignment: LocalAssignment
    worker_id: str


@dataclass(frozen=True)
class Kill:
    worker_id: str
    force: bool
    reason: KillReason


@dataclass(frozen=True)
class Cleanup:
    worker_id: str


Action = RequestCode | Launch | Kill | Cleanup


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Timeouts:
    hb_timeout: float = 30.0  # supervisor.worker.timeout.secs
    start_timeout: float = 120.0  # supervisor.worker.start.timeout.secs
    shutdown_sleep: float = 3.0  # supervisor.worker.shutdown.sleep.secs
    max_backoff: float = 60.0
    stable_secs: float = 60.0


@dataclass(frozen=True)
class Observation:
    now: float  # wall-clock seconds (heartbeats carry wall-clock times)
    assignment: LocalAssignment | None  # what the slot should run now
    code_ready: bool  # code for ``assignment`` is downloaded and verified
    heartbeat_secs: float | None  # the slot's worker's last LocalState heartbeat time
    process_alive: bool  # any process of the slot's worker is alive


@dataclass(frozen=True)
class Slot:
    """The state of one of this supervisor's worker ports (Storm's supervisor ``Slot``). Nimbus's
    scheduler names a (node, port) place a :data:`~gale.nimbus.scheduler.WorkerSlot`."""

    port: int
    state: State = State.EMPTY
    current: LocalAssignment | None = None  # what the (starting/running) worker runs
    worker_id: str | None = None
    since: float = 0.0  # when the current state was entered
    kill_reason: KillReason | None = None
    kill_sent: float | None = None  # when the last kill signal was sent
    restarts: int = 0  # consecutive abnormal relaunches
    relaunch_at: float = 0.0  # earliest relaunch (backoff)
    running_since: float | None = None
    history: tuple[str, ...] = field(default=(), compare=False)


def new_worker_id() -> str:
    return str(uuid.uuid4())


def _to(slot: Slot, state: State, now: float, **changes) -> Slot:
    note = f"{state.value}" + (f"({changes['kill_reason'].value})" if changes.get("kill_reason") else "")
    return replace(slot, state=state, since=now, history=(slot.history + (note,))[-20:], **changes)


def _backoff(slot: Slot, t: Timeouts) -> float:
    """0 for the first relaunch after a crash, then 1, 2, 4, ... seconds up to ``max_backoff``."""
    if slot.restarts <= 1:
        return 0.0
    return min(t.max_backoff, 2.0 ** (slot.restarts - 2))


def _prepare(slot: Slot, obs: Observation, worker_id_factory) -> tuple[Slot, list[Action]]:
    """Start preparing ``obs.assignment`` (or go EMPTY when there is none)."""
    if obs.assignment is None:
        return _to(slot, State.EMPTY, obs.now, current=None, worker_id=None, kill_reason=None, kill_sent=None,
                   running_since=None), []
    if obs.code_ready:
        wid = worker_id_factory()
        return _to(slot, State.WAITING_FOR_WORKER_START, obs.now, current=obs.assignment, worker_id=wid,
                   kill_reason=None, kill_sent=None, running_since=None), [Launch(obs.assignment, wid)]
    return _to(slot, State.WAITING_FOR_CODE, obs.now, current=obs.assignment, worker_id=None, kill_reason=None,
               kill_sent=None, running_since=None), [RequestCode(obs.assignment)]


def _kill(slot: Slot, obs: Observation, reason: KillReason, relaunch: bool, t: Timeouts) -> tuple[Slot, list[Action]]:
    state = State.KILL_AND_RELAUNCH if relaunch else State.KILL
    restarts = slot.restarts
    if relaunch:
        stable = slot.running_since is not None and obs.now - slot.running_since >= t.stable_secs
        restarts = 1 if stable else slot.restarts + 1
    if not obs.process_alive:
        # nothing to signal: go straight to the dead-worker handling next step
        return _to(slot, state, obs.now, kill_reason=reason, kill_sent=obs.now, restarts=restarts), []
    return _to(slot, state, obs.now, kill_reason=reason, kill_sent=obs.now, restarts=restarts), [
        Kill(slot.worker_id, force=False, reason=reason)
    ]


def step(slot: Slot, obs: Observation, t: Timeouts = Timeouts(), worker_id_factory=new_worker_id) -> tuple[Slot, list[Action]]:
    """One transition of the slot given the current observation."""
    s = slot.state
    changed = obs.assignment != slot.current

    if s == State.EMPTY:
        if obs.assignment is None:
            return slot, []
        return _prepare(slot, obs, worker_id_factory)

    if s == State.WAITING_FOR_CODE:
        if changed or obs.code_ready:
            return _prepare(slot, obs, worker_id_factory)
        return slot, []

    if s == State.WAITING_FOR_WORKER_START:
        if changed:
            return _kill(slot, obs, KillReason.ASSIGNMENT_CHANGED, relaunch=False, t=t)
        hb = obs.heartbeat_secs
        if hb is not None and obs.now - hb <= t.hb_timeout and obs.process_alive:
            return _to(slot, State.RUNNING, obs.now, running_since=obs.now), []
        if not obs.process_alive:
            return _kill(slot, obs, KillReason.PROCESS_EXIT, relaunch=True, t=t)
        if obs.now - slot.since > max(t.hb_timeout, t.start_timeout):
            return _kill(slot, obs, KillReason.HB_TIMEOUT, relaunch=True, t=t)
        return slot, []

    if s == State.RUNNING:
        if changed:
            return _kill(slot, obs, KillReason.ASSIGNMENT_CHANGED, relaunch=False, t=t)
        if not obs.process_alive:
            return _kill(slot, obs, KillReason.PROCESS_EXIT, relaunch=True, t=t)
        if obs.heartbeat_secs is None:
            return _kill(slot, obs, KillReason.HB_NULL, relaunch=True, t=t)
        if obs.now - obs.heartbeat_secs > t.hb_timeout:
            return _kill(slot, obs, KillReason.HB_TIMEOUT, relaunch=True, t=t)
        if slot.restarts and slot.running_since is not None and obs.now - slot.running_since >= t.stable_secs:
            return replace(slot, restarts=0), []
        return slot, []

    if s in (State.KILL, State.KILL_AND_RELAUNCH):
        if obs.process_alive:
            if slot.kill_sent is None or obs.now - slot.kill_sent >= t.shutdown_sleep:
                return replace(slot, kill_sent=obs.now), [Kill(slot.worker_id, force=True, reason=slot.kill_reason)]
            return slot, []
        # the worker is dead: clean it up once, then relaunch (same assignment) or prepare the new one
        actions: list[Action] = [Cleanup(slot.worker_id)] if slot.worker_id else []
        slot = replace(slot, worker_id=None)
        if s == State.KILL or changed or obs.assignment is None:
            restarts = 0 if changed else slot.restarts
            nxt, more = _prepare(replace(slot, restarts=restarts, relaunch_at=0.0), obs, worker_id_factory)
            return nxt, actions + more
        if slot.relaunch_at == 0.0:
            slot = replace(slot, relaunch_at=obs.now + _backoff(slot, t))
        if obs.now < slot.relaunch_at:
            return slot, actions  # crash-loop backoff
        nxt, more = _prepare(replace(slot, relaunch_at=0.0), obs, worker_id_factory)
        return nxt, actions + more

    raise AssertionError(f"unknown slot state {s}")  # pragma: no cover
