"""Load reports between workers (pure: clocks in, numbers out; no sockets).

Storm 2's workers tell their peers how full their tasks' receive queues are (``LoadMetrics``), so a
load-aware shuffle can see a remote task back up before the way to it does. Gale's workers report
that and one more figure: the share of a core their process used over the last report period.
That is what a shuffle needs when the bottleneck is the CPU of one worker rather than a queue — a
worker running the only spout task of a topology, say, whose own bolts keep up while the worker is
at 100% of a core and its peer idles (see :meth:`LoadAwareShuffleGrouper.refresh`).

The report is a ``LOADS`` wire message (:mod:`gale.worker.wire`), sent once every
:data:`REPORT_SECS` by each worker's transfer to every worker it has a route to:
``[6, cpu_permille, [task, load_permille, ...]]``. A receiver keeps each task's last report for
:data:`FRESH_SECS`; an older one, or none, is unknown (the shuffle then judges by what it sees
locally, as before).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from gale.worker.wire import LOAD_SCALE as SCALE
from gale.worker.wire import LOADS

#: how often a worker reports its loads to each peer
REPORT_SECS = 1.0
#: a report older than this is ignored (a peer that stopped reporting is unknown, not idle)
FRESH_SECS = 3.5 * REPORT_SECS


class CpuMeter:
    """The share of one core this process used between two samples (0..1; capped at 1: a Python
    worker's executor threads share one interpreter lock, so a core is what it can use)."""

    def __init__(self, process_time: Callable[[], float] = time.process_time,
                 monotonic: Callable[[], float] = time.monotonic):
        self._process_time = process_time
        self._monotonic = monotonic
        self._last = (process_time(), monotonic())
        #: the share measured at the last sample (None before the first)
        self.share: float | None = None

    def sample(self) -> float | None:
        cpu, now = self._process_time(), self._monotonic()
        last_cpu, last_now = self._last
        if now - last_now > 0:
            self.share = min(max((cpu - last_cpu) / (now - last_now), 0.0), 1.0)
            self._last = (cpu, now)
        return self.share


def encode_report(cpu: float | None, task_loads: Iterable[tuple[int, float]]) -> list:
    """The ``LOADS`` message of a worker whose CPU share is ``cpu`` (None: not measured yet, sent
    as −1) and whose tasks have these loads (0..1)."""
    flat: list[int] = []
    for task, load in task_loads:
        flat.append(task)
        flat.append(_permille(load))
    return [LOADS, -1 if cpu is None else _permille(cpu), flat]


def _permille(x: float) -> int:
    return int(round(min(max(x, 0.0), 1.0) * SCALE))


class PeerLoads:
    """What peers last reported: task → (queue load, its worker's CPU share, when it arrived).
    Written by the thread that takes the transfer's batches, read by executor threads (one dict assignment per
    task: a reader sees the old entry or the new one)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic):
        self._monotonic = monotonic
        self._tasks: dict[int, tuple[float, float | None, float]] = {}

    def take(self, cpu_permille: int, flat: list[int]) -> None:
        """A checked report (see :func:`gale.worker.wire.BatchDecoder`): CPU −1 (unknown) or
        0..1000; tasks and loads in pairs, loads 0..1000."""
        now = self._monotonic()
        cpu = None if cpu_permille < 0 else cpu_permille / SCALE
        tasks = self._tasks
        for i in range(0, len(flat) - 1, 2):
            tasks[flat[i]] = (flat[i + 1] / SCALE, cpu, now)

    def _fresh(self, task: int) -> tuple[float, float | None, float] | None:
        entry = self._tasks.get(task)
        if entry is None or self._monotonic() - entry[2] > FRESH_SECS:
            return None
        return entry

    def load(self, task: int) -> float | None:
        """The task's last reported queue load, or None (no fresh report)."""
        entry = self._fresh(task)
        return None if entry is None else entry[0]

    def cpu(self, task: int) -> float | None:
        """The CPU share of the worker hosting ``task`` at its last report, or None."""
        entry = self._fresh(task)
        return None if entry is None else entry[1]
