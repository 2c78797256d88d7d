"""Executor threads: each runs a set of a worker's executors in rounds (``WorkerRuntime.start``
makes them; ``topology.worker.executor.threads``, default one)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Protocol

from gale.log import get_logger
from gale.worker.runtime.executor import Executor
from gale.worker.runtime.spout import SpoutExecutor

if TYPE_CHECKING:  # pragma: no cover
    from gale.worker.runtime.runtime import WorkerRuntime

log = get_logger("runtime")

#: the longest an idle thread sleeps when nothing here polls: no active spout (a deactivated
#: topology: Storm's inactive spout sleeps 100 ms) and no body or layer that polls. Input from other
#: threads and workers, activation and stop wake it at once; its timers bound the sleep too.
QUIET_WAIT_SECS = 0.1


class TransferIO(Protocol):
    """What an executor thread that owns the transfer drives (``gale.worker.transfer.Transfer``)."""

    def pump(self) -> None: ...
    def idle(self, timeout: float) -> None: ...
    def wake(self) -> None: ...


class ExecutorThread(threading.Thread):
    """Runs a set of executors in rounds; sleeps when there is nothing to do — on an event, or,
    for the thread that owns the transfer (``io``), in the transfer's :meth:`~TransferIO.idle`,
    which also wakes for batches from other workers — for the spout wait while a spout here may
    emit, else until its next timer (:meth:`idle_timeout`). The owner pumps the transfer before
    every round and after each executor that did work (:meth:`TransferIO.pump` returns at once
    until it is due)."""

    def __init__(self, runtime: WorkerRuntime, executors: list[Executor], name: str, io: TransferIO | None = None):
        super().__init__(name=name, daemon=True)
        self.runtime = runtime
        self.executors = executors
        self.io = io
        #: the transfer's pump (the owner calls it between executors; it returns at once unless due)
        self.pump = io.pump if io is not None else None
        self.sleeping = False
        self._event = threading.Event()
        self.rounds = 0
        #: seconds this thread spent waiting for work since it was made (the load reports' busy
        #: share is the rest)
        self.made = time.monotonic()
        self.idle_secs = 0.0
        self.next_timer = 0.0
        self.all_queues = [q for ex in executors for q in ex.queue_list]
        #: the spout executors here, and whether a body or layer here polls (set by :meth:`run`, once
        #: the executors are prepared)
        self.spouts = [ex for ex in executors if isinstance(ex, SpoutExecutor)]
        self.polls = True
        #: acks made during a round by any executor of this thread, root → XOR of their values;
        #: handed to the ackers at the end of the round (and after timers). A tree whose tuples are
        #: executed in one round — a sentence split and its words counted — gives one acker message
        #: instead of one per executor. Set before the executors are prepared: collectors keep it.
        self.ack_buf: dict[int, int] = {}
        for ex in executors:
            ex.thread = self
            ex.ack_buf = self.ack_buf

    def wake(self) -> None:
        if self.io is not None:
            self.io.wake()
        else:
            self._event.set()

    def fire_timers(self, now: float) -> None:
        """Timers of this thread's own executors (spout fail callbacks stay on their thread)."""
        runtime = self.runtime
        self.next_timer = now + runtime.timer_period
        if runtime.load_aware and now >= runtime.next_load_refresh:
            runtime.refresh_loads(now)
        for ex in self.executors:
            ex.on_timer(now)
            ex.count_acked()
        if self.ack_buf:
            runtime.flush_acks(self.ack_buf)

    def run_round(self) -> int:
        runtime = self.runtime
        now = runtime.clock.monotonic()
        if now >= self.next_timer:
            self.fire_timers(now)
        runtime.update_congestion()
        worked = 0
        pump = self.pump
        for ex in self.executors:
            n = ex.run_batch(ex.budget)
            if n:  # nothing taken, nothing acked (the timer counts what a background thread acked)
                worked += n
                ex.count_acked()
                if pump is not None:
                    pump()  # between executors too: a round of full batches can take milliseconds
        if self.ack_buf:
            runtime.flush_acks(self.ack_buf)
        self.rounds += 1
        if worked:
            for peer in runtime.threads:
                if peer.sleeping and peer is not self and any(peer.all_queues):
                    peer.wake()
        return worked

    def idle_timeout(self, now: float) -> float:
        """How long an idle round may sleep: until the first spout that came up empty is to be asked
        again (:attr:`SpoutExecutor.ask_after`: Storm's spout wait, ``topology.spout.wait.sleep.millis``,
        longer for a long-idle spout); the spout wait while a body or layer polls, the topology is
        congested, or an active spout here may emit and has no pause; otherwise until the next timer
        (at most :data:`QUIET_WAIT_SECS`) — a spout at ``topology.max.spout.pending`` included: the
        verdicts that free it, like whatever else brings work, wake the thread."""
        runtime = self.runtime
        if self.polls:
            return runtime.idle_wait
        wait = min(QUIET_WAIT_SECS, max(runtime.idle_wait, self.next_timer - now))
        if not (self.spouts and runtime.active):
            return wait
        if runtime.congested:
            return runtime.idle_wait
        mono = time.monotonic()
        for ex in self.spouts:
            if ex.ask_after:
                wait = min(wait, max(0.0, ex.ask_after - mono))
            elif not ex.pending_full():
                return runtime.idle_wait
        return wait

    def run(self) -> None:
        runtime = self.runtime
        io = self.io
        pump = self.pump
        wait = io.idle if io is not None else self._event.wait
        monotonic = time.monotonic
        # what needs the thread awake without being woken (known once the executors are prepared)
        self.polls = any(ex.polls or ex.work_checks for ex in self.executors)
        for ex in self.spouts:  # this thread sleeps between rounds: a spout that came up empty waits
            ex.spout_wait = runtime.idle_wait
        try:
            while not runtime.stopping:
                if pump is not None:
                    pump()
                if self.run_round():
                    continue
                self.sleeping = True
                if not any(ex.has_work() for ex in self.executors):
                    t0 = monotonic()
                    wait(self.idle_timeout(runtime.clock.monotonic()))
                    self.idle_secs += monotonic() - t0
                self.sleeping = False
                self._event.clear()
        except BaseException as exc:  # pragma: no cover - a bug in Gale itself: fail fast
            log.exception("executor-thread-crashed", thread=self.name)
            runtime.crashed(exc)
