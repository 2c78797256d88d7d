"""Load reports between workers (pure: clocks in, numbers out; no sockets).

Storm 2's workers tell their peers how full their tasks' receive queues are (``LoadMetrics``), so a
load-aware shuffle can see a remote task back up before the way to it does. Gale's workers report
that and one more figure: how busy the worker was over the last report period — the share of that
time its executor threads were not waiting for work (summed over threads, at most 1: they share
one interpreter lock). That is what a shuffle needs when the bottleneck is one worker's executor
thread rather than a queue — a worker running the only spout task of a topology, say, whose own
bolts keep up while it never rests and its peer waits for work (see
:meth:`LoadAwareShuffleGrouper.refresh`). The process's CPU time would not show the peer's spare
capacity: a worker fed in batches goes round its loop and polls its socket between them, and
that counts as CPU.

The report is a ``LOADS`` wire message (:mod:`gale.worker.wire`), sent once every
:data:`REPORT_SECS` by each worker's transfer to every worker it has a route to:
``[6, busy_permille, [task, load_permille, ...]]``. A receiver keeps each task's last report for
:data:`FRESH_SECS`; an older one, or none, is unknown (the shuffle then judges by what it sees
locally, as before).

**Backpressure between workers.** A task whose receive queue is full (its load reported as 1000
per mille: ``topology.executor.receive.buffer.size`` tuples waiting) is *full*. A worker sends a
report at once, not at the next second, when it gets a full queue or its last full queue drains
(:attr:`gale.worker.transfer.Transfer.local_full`), and a receiver's :meth:`PeerLoads.full` is
true while any fresh report says a task is full: the receiving worker's spouts then pause, as they
do for a full queue of their own. Storm 2 does the same in-band (``BackPressureTracker``: a worker
tells its peers which of its tasks are full, and their emits to those tasks wait). A peer that stops
reporting holds back no one once its reports are stale.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from gale.worker.wire_kinds import LOAD_SCALE as SCALE
from gale.worker.wire_kinds import LOADS

#: how often a worker reports its loads to each peer
REPORT_SECS = 1.0
#: a report older than this is ignored (a peer that stopped reporting is unknown, not idle)
FRESH_SECS = 3.5 * REPORT_SECS


class BusyMeter:
    """How far a clock of busy seconds advanced against wall time between two samples (0..1, capped
    at 1: a Python worker's executor threads share one interpreter lock). ``busy_time``: a worker's
    :meth:`~gale.worker.runtime.runtime.WorkerRuntime.busy_time`, or this process's CPU time."""

    def __init__(self, busy_time: Callable[[], float] = time.process_time,
                 monotonic: Callable[[], float] = time.monotonic):
        self._busy_time = busy_time
        self._monotonic = monotonic
        self._last = (busy_time(), monotonic())
        #: the share measured at the last sample (None before the first)
        self.share: float | None = None

    def sample(self) -> float | None:
        busy, now = self._busy_time(), self._monotonic()
        last_busy, last_now = self._last
        if now - last_now > 0:
            self.share = min(max((busy - last_busy) / (now - last_now), 0.0), 1.0)
            self._last = (busy, now)
        return self.share


def encode_report(busy: float | None, task_loads: Iterable[tuple[int, float]]) -> list:
    """The ``LOADS`` message of a worker whose busy share is ``busy`` (None: not measured yet, sent
    as −1) and whose tasks have these loads (0..1)."""
    flat: list[int] = []
    for task, load in task_loads:
        flat.append(task)
        flat.append(_permille(load))
    return [LOADS, -1 if busy is None else _permille(busy), flat]


def _permille(x: float) -> int:
    return int(round(min(max(x, 0.0), 1.0) * SCALE))


class PeerLoads:
    """What peers last reported: task → (queue load, its worker's busy share, when it arrived).
    Written by the thread that takes the transfer's batches, read by executor threads (one dict assignment per
    task: a reader sees the old entry or the new one)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic):
        self._monotonic = monotonic
        self._tasks: dict[int, tuple[float, float | None, float]] = {}
        #: full task → when a report last said so. Replaced, never changed, by :meth:`take`, so an
        #: executor thread reading it in :meth:`full` sees one report's result or the next's
        self.full_tasks: dict[int, float] = {}

    def take(self, busy_permille: int, flat: list[int]) -> None:
        """A checked report (see :func:`gale.worker.wire.BatchDecoder`): busy share −1 (unknown) or
        0..1000; tasks and loads in pairs, loads 0..1000."""
        now = self._monotonic()
        busy = None if busy_permille < 0 else busy_permille / SCALE
        tasks = self._tasks
        full = self.full_tasks
        changed = None
        for i in range(0, len(flat) - 1, 2):
            task, load = flat[i], flat[i + 1]
            tasks[task] = (load / SCALE, busy, now)
            if load >= SCALE or task in full:
                if changed is None:
                    changed = dict(full)
                if load >= SCALE:
                    changed[task] = now
                else:
                    del changed[task]
        if changed is not None:
            self.full_tasks = changed

    def full(self) -> bool:
        """Whether a fresh report says a peer's task has a full receive queue (backpressure)."""
        full = self.full_tasks
        if not full:
            return False
        oldest = self._monotonic() - FRESH_SECS
        return any(at >= oldest for at in full.values())

    def _fresh(self, task: int) -> tuple[float, float | None, float] | None:
        entry = self._tasks.get(task)
        if entry is None or self._monotonic() - entry[2] > FRESH_SECS:
            return None
        return entry

    def load(self, task: int) -> float | None:
        """The task's last reported queue load, or None (no fresh report)."""
        entry = self._fresh(task)
        return None if entry is None else entry[0]

    def busy(self, task: int) -> float | None:
        """The busy share of the worker hosting ``task`` at its last report, or None."""
        entry = self._fresh(task)
        return None if entry is None else entry[1]
