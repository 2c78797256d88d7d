"""The checkpoint coordinator: Storm's ``CheckpointSpout`` + ``CheckPointState`` as a pure state machine.

Events in (:meth:`Coordinator.start`, :meth:`tick`, :meth:`acked`, :meth:`failed`, each with the
time), actions out: :class:`Save` (durably record the transaction state before going on) and
:class:`Emit` (send ``(txid, action)`` on the ``$checkpoint`` stream as one tracked tuple). No I/O,
no clock of its own: the shell (``checkpoint_spout.CheckpointSpout``) performs the actions in order.

States (the durable record, under the provider's ``__state``): ``COMMITTED(n)`` — checkpoint ``n``
is committed everywhere; ``PREPARING(n)`` — checkpoint ``n`` is being prepared; ``COMMITTING(n)`` —
every stateful task prepared ``n`` (the PREPARE tree was acked): ``n`` *will* commit. Recording
COMMITTING before any COMMIT is sent makes it the global commit point.

Normal cycle: COMMITTED(n) and the interval elapsed → save PREPARING(n+1), emit PREPARE(n+1);
acked → save COMMITTING(n+1), emit COMMIT(n+1); acked → save COMMITTED(n+1).

Recovery (at start, after any checkpoint tuple fails or times out, and at once when a task was
restarted — :meth:`Coordinator.restarted`), by the recorded state:
PREPARING(n) → ROLLBACK(n), acked → COMMITTED(n-1); COMMITTING(n) → COMMIT(n) (again), acked →
COMMITTED(n); COMMITTED(n) → INITSTATE(n), acked → recovery done. A failed recovery step is
retried (after ``retry_secs``) until it succeeds.
"""

from __future__ import annotations

from dataclasses import dataclass

from gale.worker.state.epochs import Epoch

COMMITTED = "COMMITTED"
PREPARING = "PREPARING"
COMMITTING = "COMMITTING"

PREPARE = "PREPARE"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
INITSTATE = "INITSTATE"
ACTIONS = (PREPARE, COMMIT, ROLLBACK, INITSTATE)


@dataclass(frozen=True)
class TxState:
    txid: int
    phase: str

    def to_record(self) -> dict:
        return {"version": 1, "guarantee": "at-least-once", "txid": self.txid, "state": self.phase}

    @classmethod
    def from_record(cls, record: dict | None) -> TxState:
        """The record, also one an exactly-once run of the topology left (the guarantee was
        switched): its phase maps to the same recovery — a commit past its commit point finishes,
        anything prepared or paused for rolls back, the committed state is kept."""
        if not record:
            return cls(0, COMMITTED)
        if record.get("guarantee") == "exactly-once":
            epoch = Epoch.from_record(record)
            if epoch.phase == COMMITTING:
                return cls(epoch.txid, COMMITTING)
            if epoch.phase == PREPARING:
                return cls(epoch.txid, PREPARING)
            return cls(epoch.committed, COMMITTED)
        phase = record.get("state")
        if phase not in (COMMITTED, PREPARING, COMMITTING) or not isinstance(record.get("txid"), int):
            raise ValueError(f"checkpoint state record is malformed: {record!r}")
        return cls(record["txid"], phase)

    def next_state(self, recovering: bool) -> TxState:
        if self.phase == PREPARING:
            return TxState(self.txid - 1, COMMITTED) if recovering else TxState(self.txid, COMMITTING)
        if self.phase == COMMITTING:
            return TxState(self.txid, COMMITTED)
        return self if recovering else TxState(self.txid + 1, PREPARING)

    def next_action(self, recovering: bool) -> str:
        if self.phase == PREPARING:
            return ROLLBACK if recovering else PREPARE
        if self.phase == COMMITTING:
            return COMMIT
        return INITSTATE if recovering else PREPARE


@dataclass(frozen=True)
class Save:
    state: TxState


@dataclass(frozen=True)
class Emit:
    txid: int
    action: str


@dataclass(frozen=True)
class Committed:
    """Checkpoint ``txid`` committed (for metrics: ``duration`` from PREPARE to commit)."""

    txid: int
    duration: float


Action = Save | Emit | Committed


class Coordinator:
    """One checkpoint in flight at a time; ``interval`` seconds between the starts of checkpoints."""

    def __init__(self, interval: float, retry_secs: float | None = None):
        self.interval = interval
        self.retry_secs = interval if retry_secs is None else retry_secs
        self.state = TxState(0, COMMITTED)
        self.recovering = True
        self.in_flight: tuple[int, str] | None = None
        self.started = False
        self.last_checkpoint = float("-inf")  # when the last PREPARE went out
        self.not_before = float("-inf")  # after a failure: wait before the next recovery step
        self.failures = 0  # consecutive failed checkpoint tuples
        self.recorded = self.state  # the last state a Save was asked for
        self._before_save = self.state

    def start(self, saved: TxState, now: float) -> list[Action]:
        """The recorded state was read; recovery starts (its first step goes out on the next tick)."""
        self.state = self.recorded = self._before_save = saved
        self.recovering = True
        self.in_flight = None
        self.started = True
        return self.tick(now)

    def tick(self, now: float) -> list[Action]:
        if not self.started or self.in_flight is not None or now < self.not_before:
            return []
        if self.recovering:
            return self._emit(self.state.txid, self.state.next_action(True))
        if self.state.phase != COMMITTED:
            # PREPARING after a restart without recovery cannot happen; COMMITTING: send COMMIT now
            return self._emit(self.state.txid, self.state.next_action(False))
        if now - self.last_checkpoint < self.interval:
            return []
        nxt = self.state.next_state(False)
        self.last_checkpoint = now
        return [self._save(nxt), *self._emit(nxt.txid, nxt.next_action(False))]

    def _save(self, state: TxState) -> Save:
        self.state = state
        self._before_save, self.recorded = self.recorded, state
        return Save(state)

    def _emit(self, txid: int, action: str) -> list[Action]:
        self.in_flight = (txid, action)
        return [Emit(txid, action)]

    def acked(self, txid: int, action: str, now: float) -> list[Action]:
        if self.in_flight != (txid, action):
            return []  # a stale ack (of a step already given up on)
        self.in_flight = None
        self.failures = 0
        out: list[Action] = []
        nxt = self.state.next_state(self.recovering)
        if self.recovering and nxt == self.state:
            self.recovering = False  # INITSTATE acked: every task is initialized
        elif nxt != self.state:
            out.append(self._save(nxt))
            if action == COMMIT and not self.recovering:
                out.append(Committed(txid, now - self.last_checkpoint))
        return out + self.tick(now)

    def failed(self, txid: int, action: str, now: float) -> list[Action]:
        if self.in_flight != (txid, action):
            return []
        return self._failure(now)

    def restarted(self, now: float) -> list[Action]:
        """A task was restarted (``gale.worker.state.liveness``): the checkpoint tuple in flight (if
        any) was lost with it and would only fail at the message timeout. Give it up and recover now
        (the restarted task gets its state on the way); its late ack, if any, is ignored."""
        if not self.started:
            return []
        self.in_flight = None
        self.recovering = True
        self.not_before = now
        return self.tick(now)

    def save_failed(self, now: float) -> list[Action]:
        """The last :class:`Save` could not be written (the actions after it were not performed):
        the recorded state is still the one before it; recover from that."""
        self.state = self.recorded = self._before_save
        return self._failure(now)

    def _failure(self, now: float) -> list[Action]:
        self.in_flight = None
        self.failures += 1
        self.recovering = True
        self.not_before = now + self.retry_secs if self.failures > 1 else now
        return self.tick(now)
