"""Exactly-once checkpoints (``topology.state.guarantee: exactly-once``), pure: the coordinator's
and a source task's state machines, and the generation carried in root ids. No I/O, no clock of
their own; the shells (the checkpoint spout, the spout executor, the stateful bolt executor) feed
them what they read and perform what they return. docs/state.md "Exactly-once" tells the why.

**The cut is quiescent.** Storm's checkpoints are not aligned with the data: one spout tuple's effects
can land in different checkpoints on different tasks, so a replay re-applies what is committed. Here
a checkpoint ``m`` first *pauses the sources*: every source task stops emitting and waits until each
of its tuple trees is complete (acked: every bolt has processed every tuple of it), then stages its
source position (Kafka: offset per partition) as part of ``m`` and reports "paused at ``m``". When
every source task has, no data tuple is anywhere in the topology: the stateful tasks stage their
state as ``m`` on PREPARE(``m``), and states and positions of ``m`` are one consistent cut. Flink gets
the same cut without a pause by aligning barriers in-band; the pause here costs one complete latency
per checkpoint (milliseconds) and needs neither alignment buffers nor in-band barriers from spouts,
which Storm's wire model (a spout never receives tuples) does not have.

**A failure rolls back instead of replaying.** Any failed or timed-out tree of a source task, a
source task or a bolt task that restarted (``gale.worker.state.liveness``), a checkpoint tuple that failed or a pause that cannot drain, starts a
new *generation* ``g + 1``: the record says ROLLING_BACK(``c``, ``g + 1``) with ``c`` the last
committed checkpoint; every source task drops its pending trees and rewinds to its position of
``c``; every stateful task reloads its state of ``c`` (ROLLBACK(``c``) on ``$checkpoint``) and from
then on ignores data tuples of older generations, which it recognises by their roots
(:func:`generation_of`: the generation is in the root id's top byte, so no wire change is needed).
When the ROLLBACK tree is acked and every source task has rewound, the record becomes
COMMITTED(``c``, ``g + 1``) and the sources emit again.

The record (the provider's meta ``<topology>/__state``)::

    COMMITTED(n, g)     checkpoint n is committed; sources run (generation g)
    PAUSING(m, g)       m = n + 1: sources stop and drain, then stage their positions as m
    PREPARING(m, g)     all sources paused: PREPARE(m) went to the stateful tasks
    COMMITTING(m, g)    PREPARE(m) acked: m *will* commit (the commit point); sources run again
    ROLLING_BACK(c, g)  generation g restores checkpoint c

**Control in band.** The record is the only thing kept: the coordinator sends each epoch to every
source task as a control message (:func:`epoch_message`, on the path of the acker's verdicts:
``gale.worker.runtime.executor``, ``CONTROL``), at each change and again every second (a message
lost with a dead worker, a source task that restarted); each source task answers with its
:class:`Report` (:func:`report_message`) whenever it changes and to every epoch message it gets.
A source task that (re)starts says hello (a report of no generation) and is sent the epoch at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# the generation a root id carries in its top byte: the collectors stamp it, so the arithmetic is
# the core's (re-exported here, where the protocol uses it)
from gale.worker.runtime.anchoring import (  # noqa: F401
    GENERATION_BITS,
    generation_of,
    generation_range,
    is_current,
    with_generation,
)

COMMITTED = "COMMITTED"
PAUSING = "PAUSING"
PREPARING = "PREPARING"
COMMITTING = "COMMITTING"
ROLLING_BACK = "ROLLING_BACK"
PHASES = (COMMITTED, PAUSING, PREPARING, COMMITTING, ROLLING_BACK)

PREPARE = "PREPARE"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"

@dataclass(frozen=True)
class Epoch:
    """The coordinator's durable record."""

    txid: int
    phase: str
    generation: int

    def to_record(self) -> dict:
        return {"version": 1, "guarantee": "exactly-once", "txid": self.txid, "state": self.phase,
                "generation": self.generation}

    @classmethod
    def from_record(cls, record: dict | None) -> Epoch:
        if not record:
            return cls(0, COMMITTED, 0)
        phase, txid, gen = record.get("state"), record.get("txid"), record.get("generation", 0)
        if phase not in PHASES or not isinstance(txid, int) or not isinstance(gen, int) or txid < 0:
            raise ValueError(f"exactly-once checkpoint record is malformed: {record!r}")
        return cls(txid, phase, gen)

    @property
    def committed(self) -> int:
        """The last committed checkpoint this record implies."""
        return self.txid if self.phase in (COMMITTED, ROLLING_BACK) else self.txid - 1 \
            if self.phase in (PAUSING, PREPARING) else self.txid  # COMMITTING: m will commit


@dataclass(frozen=True)
class Report:
    """What a source task says to the coordinator, for its generation."""

    generation: int
    paused: int | None = None  # the checkpoint it drained and staged its position for
    rewound: bool = False  # it rewound to the committed position (the rollback of this generation)
    failed: bool = False  # a tree of this generation failed or timed out, or the task restarted

    def to_record(self) -> dict:
        return {"generation": self.generation, "paused": self.paused, "rewound": self.rewound, "failed": self.failed}

    @classmethod
    def from_record(cls, record: dict | None) -> Report | None:
        if not record:
            return None
        try:
            return cls(int(record["generation"]), record.get("paused"), bool(record.get("rewound")),
                       bool(record.get("failed")))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"source report is malformed: {record!r}") from None


# ------------------------------------------------------------------------------ control messages
# Four unsigned 64-bit integers each: (kind, a, b, c).

EPOCH_MESSAGE = 1  # coordinator → source task: (EPOCH_MESSAGE, txid, phase index, generation)
REPORT_MESSAGE = 2  # source task → coordinator: (REPORT_MESSAGE, source task, generation, status)
_NO_GENERATION = (1 << 64) - 1  # a hello: the task has no generation yet
_FAILED, _REWOUND, _PAUSED_SHIFT = 1, 2, 2


#: a phase's place within one (generation, txid): the epochs the coordinator records only move forward
#: in (generation, txid, rank), so a copy of an older one that arrives late can be told apart
_RANK = {ROLLING_BACK: 0, PAUSING: 1, PREPARING: 2, COMMITTING: 3, COMMITTED: 4}


def epoch_order(epoch: Epoch) -> tuple[int, int, int]:
    return (epoch.generation, epoch.txid, _RANK[epoch.phase])


def report_order(report: Report) -> tuple[int, int, int]:
    """A source task's reports only move forward in this order within one run of the task: a
    generation's "rewound", then "paused at" each checkpoint, or "failed" for good."""
    return (report.generation, int(report.failed), -1 if report.paused is None else report.paused)


def newer_report(new: Report | None, old: Report | None) -> bool:
    """Whether ``new`` supersedes ``old`` (a hello — None — always does: the task restarted)."""
    return new is None or old is None or report_order(new) >= report_order(old)


def epoch_message(epoch: Epoch) -> tuple[int, int, int, int]:
    return (EPOCH_MESSAGE, epoch.txid, PHASES.index(epoch.phase), epoch.generation)


def report_message(task: int, report: Report | None) -> tuple[int, int, int, int]:
    """A source task's report (None: a hello — it has none yet)."""
    if report is None:
        return (REPORT_MESSAGE, task, _NO_GENERATION, 0)
    status = (report.failed and _FAILED) | (report.rewound and _REWOUND)
    if report.paused is not None:
        status |= (report.paused + 1) << _PAUSED_SHIFT
    return (REPORT_MESSAGE, task, report.generation, status)


def read_control(payload: tuple) -> Epoch | tuple[int, Report | None]:
    """The epoch, or the ``(source task, report)``, a control message carries; ValueError names
    what is wrong with one that is not either."""
    if not isinstance(payload, tuple) or len(payload) != 4 or not all(type(x) is int and x >= 0 for x in payload):
        raise ValueError(f"not a control message of exactly-once checkpoints: {payload!r}")
    kind, a, b, c = payload
    if kind == EPOCH_MESSAGE:
        if b >= len(PHASES):
            raise ValueError(f"epoch message with an unknown phase {b}: {payload!r}")
        return Epoch(a, PHASES[b], c)
    if kind == REPORT_MESSAGE:
        if b == _NO_GENERATION:
            return a, None
        paused = (c >> _PAUSED_SHIFT) - 1 if c >> _PAUSED_SHIFT else None
        return a, Report(b, paused, bool(c & _REWOUND), bool(c & _FAILED))
    raise ValueError(f"unknown kind {kind} of control message: {payload!r}")


# ------------------------------------------------------------------------------ coordinator actions


@dataclass(frozen=True)
class Save:
    """Write the record (before performing the actions after it)."""

    epoch: Epoch


@dataclass(frozen=True)
class Emit:
    """Send ``(txid, action)`` on ``$checkpoint`` as one tracked tuple."""

    txid: int
    action: str


@dataclass(frozen=True)
class CommitSources:
    """Commit the source positions staged for ``txid`` (idempotent)."""

    txid: int


@dataclass(frozen=True)
class Committed:
    txid: int
    duration: float  # from the start of the pause to the commit


@dataclass(frozen=True)
class RolledBack:
    """A rollback began (for metrics and the log): ``reason`` says why."""

    to_txid: int
    generation: int
    reason: str


Action = Save | Emit | CommitSources | Committed | RolledBack


class EpochCoordinator:
    """One checkpoint (or rollback) at a time. ``interval``: seconds between checkpoint starts;
    ``pause_timeout``: how long the sources may take to drain (then: rollback); ``retry_secs``: the
    delay before re-sending a failed COMMIT or ROLLBACK, or retrying after a failed save.

    The shell calls :meth:`start` once it has read the record, :meth:`tick` on every turn with the
    sources' reports, :meth:`acked` / :meth:`failed` for its checkpoint tuples, and
    :meth:`save_failed` when a :class:`Save` could not be written (it then skips the actions after
    it) or :meth:`action_failed` when another action could not be performed. Actions are performed
    in order."""

    def __init__(self, interval: float, pause_timeout: float, retry_secs: float | None = None):
        self.interval = interval
        self.pause_timeout = pause_timeout
        self.retry_secs = interval if retry_secs is None else retry_secs
        self.epoch = Epoch(0, COMMITTED, 0)
        self._before_save = self.epoch
        self.started = False
        self.in_flight: tuple[int, str] | None = None
        self.not_before = float("-inf")
        self.pause_started = float("-inf")
        self.last_checkpoint = float("-inf")
        self.rollback_acked = False
        self.rollback_wanted: str | None = None  # a rollback to start once nothing is in flight

    def start(self, saved: Epoch, now: float) -> list[Action]:
        """The record was read (the coordinator started or restarted). Whatever ran before, the
        topology rolls back to the last committed checkpoint under a new generation — after
        finishing a commit that had passed its commit point (COMMITTING)."""
        self.epoch = self._before_save = saved
        self.started = True
        self.in_flight = None
        self.rollback_wanted = "the checkpoint coordinator (re)started"
        return self.tick(now, {})

    def tick(self, now: float, reports: Mapping[int, Report | None]) -> list[Action]:
        """The clock and every source task's report (None: none written yet)."""
        if not self.started or self.in_flight is not None or now < self.not_before:
            return []
        e = self.epoch
        g = e.generation
        if e.phase == COMMITTING:  # past the commit point: COMMIT until it is acked
            return [CommitSources(e.txid), *self._emit(e.txid, COMMIT)]
        if e.phase == PREPARING:  # PREPARE was lost with a restart or a failed save
            self.rollback_wanted = self.rollback_wanted or f"PREPARE({e.txid}) was interrupted"
        if self.rollback_wanted is not None:
            reason, self.rollback_wanted = self.rollback_wanted, None
            return self._rollback(now, reason)
        if e.phase == ROLLING_BACK:
            if not self.rollback_acked:
                return self._emit(e.txid + 1, ROLLBACK)
            if all(r is not None and r.generation == g and r.rewound for r in reports.values()):
                self.last_checkpoint = now
                return [self._save(Epoch(e.txid, COMMITTED, g))]
            return []
        failed = sorted(t for t, r in reports.items() if r is not None and r.generation == g and r.failed)
        if failed:
            return self._rollback(now, f"source task(s) {failed} failed a tuple tree or restarted")
        strangers = sorted(t for t, r in reports.items() if r is None or r.generation != g)
        if strangers:
            return self._rollback(now, f"source task(s) {strangers} have not rewound for generation {g}")
        if e.phase == COMMITTED:
            if now - self.last_checkpoint < self.interval:
                return []
            self.last_checkpoint = self.pause_started = now
            return [self._save(Epoch(e.txid + 1, PAUSING, g))]
        # PAUSING
        if all(r is not None and r.paused == e.txid for r in reports.values()):
            return [self._save(Epoch(e.txid, PREPARING, g)), *self._emit(e.txid, PREPARE)]
        if now - self.pause_started > self.pause_timeout:
            return self._rollback(now, f"the sources did not drain within {self.pause_timeout:g}s")
        return []

    def acked(self, txid: int, action: str, now: float) -> list[Action]:
        if self.in_flight != (txid, action):
            return []  # stale: a step given up on
        self.in_flight = None
        e = self.epoch
        if action == PREPARE:
            return [self._save(Epoch(txid, COMMITTING, e.generation)), CommitSources(txid), *self._emit(txid, COMMIT)]
        if action == COMMIT:
            return [self._save(Epoch(txid, COMMITTED, e.generation)), Committed(txid, now - self.pause_started)]
        self.rollback_acked = True  # ROLLBACK: the sources' reports finish it (tick)
        return []

    def failed(self, txid: int, action: str, now: float) -> list[Action]:
        """A checkpoint tuple failed or timed out (a task is dead, or could not act)."""
        if self.in_flight != (txid, action):
            return []
        self.in_flight = None
        if action == PREPARE:
            return self._rollback(now, f"PREPARE({txid}) failed")
        self.not_before = now + self.retry_secs  # COMMIT and ROLLBACK must go through: re-sent then
        return []

    def restarted(self, reason: str) -> None:
        """A task was restarted (``gale.worker.state.liveness``): what it held is lost, so the sources'
        trees through it would only fail at the message timeout, and so would a checkpoint tuple in
        flight. Roll back at the next :meth:`tick` — after finishing a commit past its commit point
        (COMMITTING: COMMIT is sent again) — instead of waiting."""
        if not self.started:
            return
        self.in_flight = None
        self.not_before = float("-inf")
        self.rollback_wanted = reason

    def save_failed(self, now: float) -> list[Action]:
        """The last :class:`Save` could not be written (the actions after it were not performed):
        the record is still the one before; roll back from it after ``retry_secs`` (or finish its
        commit first, if it is COMMITTING)."""
        self.epoch = self._before_save
        self.in_flight = None
        self.not_before = now + self.retry_secs
        self.rollback_wanted = "the checkpoint record could not be written"
        return []

    def action_failed(self, now: float) -> list[Action]:
        """An action other than a :class:`Save` could not be performed (:class:`CommitSources`: the
        provider is unreachable); the actions after it were skipped. Retried after ``retry_secs``."""
        self.in_flight = None
        self.not_before = now + self.retry_secs
        return []

    def _rollback(self, now: float, reason: str) -> list[Action]:
        e = self.epoch
        to, g = e.committed, e.generation + 1
        self.last_checkpoint = now
        self.rollback_acked = False
        # ROLLBACK carries to + 1, as Storm's ROLLBACK(n) ("n is abandoned, back to n - 1"): a task's
        # checkpoint barrier takes a txid below the last one it acted on for a stale duplicate
        return [RolledBack(to, g, reason), self._save(Epoch(to, ROLLING_BACK, g)), *self._emit(to + 1, ROLLBACK)]

    def _save(self, epoch: Epoch) -> Save:
        self._before_save, self.epoch = self.epoch, epoch
        return Save(epoch)

    def _emit(self, txid: int, action: str) -> list[Action]:
        self.in_flight = (txid, action)
        return [Emit(txid, action)]


# ------------------------------------------------------------------------------ a source task


@dataclass(frozen=True)
class StagePosition:
    """Stage the source's current position as part of checkpoint ``txid``."""

    txid: int


@dataclass(frozen=True)
class Rewind:
    """Drop every pending tree and reset the source to its committed position of checkpoint
    ``txid`` (the source's start when there is none)."""

    txid: int


@dataclass(frozen=True)
class WriteReport:
    report: Report


SourceAction = StagePosition | Rewind | WriteReport


class SourceTask:
    """One source (data spout) task's side. The shell calls :meth:`observe` with the record it read
    and the number of its pending trees and performs the actions in order (if one fails, it calls
    :meth:`action_failed` and skips the rest: they are asked for again); it emits only while
    :attr:`emitting`, and calls :meth:`tree_failed` when a tree fails or times out."""

    def __init__(self) -> None:
        self.generation: int | None = None  # the generation this task rewound for
        self.failed = False
        self.report: Report | None = None  # the last report written
        self.emitting = False

    def observe(self, epoch: Epoch, pending: int) -> list[SourceAction]:
        g = epoch.generation
        if epoch.phase == ROLLING_BACK:
            self.emitting = False
            want = Report(g, rewound=True)
            if self.generation == g and self.report == want:
                return []
            self.generation, self.failed = g, False
            return [Rewind(epoch.txid), self._write(want)]
        if self.generation != g or self.failed:
            # a tree failed, or the task (re)started since the last rollback: only a rollback makes
            # its position consistent with the states again
            self.emitting = False
            want = Report(g, failed=True)
            return [] if self.report == want else [self._write(want)]
        if epoch.phase in (COMMITTED, COMMITTING):
            self.emitting = True
            return []
        self.emitting = False
        want = Report(g, paused=epoch.txid)
        if epoch.phase == PAUSING and pending == 0 and self.report != want:
            return [StagePosition(epoch.txid), self._write(want)]
        return []

    def tree_failed(self) -> None:
        """A tree of this task failed or timed out: stop; the next :meth:`observe` asks for a rollback."""
        self.emitting = False
        self.failed = True

    def action_failed(self) -> None:
        """An action could not be performed (the provider is unreachable): do it again next time."""
        self.report = None

    def _write(self, report: Report) -> WriteReport:
        self.report = report
        return WriteReport(report)
