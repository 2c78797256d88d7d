"""The spout executor: acker verdicts and control messages in, ``next_tuple`` calls out
(:mod:`gale.worker.runtime.executor` has what every executor shares and the hooks)."""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cython

from gale.worker.runtime.acker import ACKED, CONTROL, FAILED, RESET_TIMEOUT
from gale.worker.runtime.collector import SpoutOutputCollector
from gale.worker.runtime.executor import Executor, format_error
from gale.worker.runtime.rotating import RotatingMap

#: no limit on pending trees (``topology.max.spout.pending`` unset)
PY_SSIZE_T_MAX = cython.declare(cython.Py_ssize_t, sys.maxsize)
#: empty asks in a row (every task gave nothing, each after the spout wait: ~0.1 s at 1 ms) after
#: which the wait grows, by one spout wait per further empty ask, up to
#: ``topology.spout.wait.idle.max.sleep.millis`` (:meth:`SpoutExecutor.idle_pause`)
IDLE_ASKS = 100

if TYPE_CHECKING:  # pragma: no cover
    from gale.worker.runtime.runtime import WorkerRuntime


def _add_acked(stats: Any, stream: str, n: int, ms: float) -> None:
    """Count ``n`` acked trees of ``stream`` whose complete latencies add up to ``ms``."""
    stats.acked[stream] += n
    stats.complete_ms[stream] += ms
    stats.complete_n[stream] += n


class SpoutExecutor(Executor):
    """A spout component's tasks: each round applies the acker's verdicts (the spout is told
    ``ack``/``fail``) and control messages, then asks the tasks for tuples (``next_tuple``) while
    the topology is active, not congested and under ``topology.max.spout.pending``.

    Once a round's ``next_tuple`` calls end empty (every task asked gave nothing), the tasks are
    not asked again for the spout wait (``topology.spout.wait.sleep.millis``, :attr:`ask_after`):
    Storm's spout executor sleeps that long after an empty ``nextTuple``; here the thread goes on
    with the other executors it runs, or sleeps until then if it has nothing else to do. Without the
    pause, a thread kept busy by bolts asked a spout with nothing new every round — at high load an
    empty call for every few tuples, CPU taken from the tuples in flight. A body or layer that
    polls (a subprocess's spout answers ``next`` later) is asked every round as before."""

    kind = "spout"
    budget = 100

    def __init__(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str):
        super().__init__(runtime, executor_id, component)
        self.pending = RotatingMap(2)
        self.spouts: dict[int, Any] = {}
        self.collectors: dict[int, SpoutOutputCollector] = {}
        #: task → what a round calls to ask it for tuples (the spout's ``next_tuple``; a layer may
        #: put something else there while the task must not emit)
        self.next_tuple: dict[int, Callable[[], Any]] = {}
        #: task → the handler of its control messages (``handler(payload)``)
        self.control: dict[int, Callable[[tuple], None]] = {}
        #: a layer that takes over a failed or timed-out tree (``on_fail(task, msg_id)``), or None:
        #: the spout is told ``fail``
        self.on_fail: Callable[[int, Any], None] | None = None
        #: a layer told when a task's source moved away from the last checkpoint (``on_rewind(task)``)
        self.on_rewind: Callable[[int], None] | None = None
        #: steps after each round's ``next_tuple`` calls (a subprocess's writes, a drained pause)
        self.afters: list[Callable[[], None]] = []
        max_pending = self.config.topology_max_spout_pending
        self.max_pending = max_pending * len(self.tasks) if max_pending else None
        self.timeout = self.config.topology_message_timeout_secs
        self.timeouts_enabled = self.config.topology_enable_message_timeouts
        self.next_rotation = self.clock.monotonic() + self.timeout
        self.active = False
        self._task_cycle = 0
        self.pendings.append(self.pending.__len__)
        #: ``time.monotonic()`` before which the tasks are not asked for tuples (0: ask at once)
        self.ask_after = 0.0
        #: seconds not to ask after the tasks came up empty: the spout wait, set by the executor thread
        #: that runs this executor (``ExecutorThread.run``); 0 while rounds are driven by hand
        #: (``WorkerRuntime.run_until_idle`` with a simulated clock): every such round asks
        self.spout_wait = 0.0
        #: the longest wait a long-idle spout grows to (:meth:`idle_pause`), seconds
        self.idle_wait_max = float(self.config.topology_spout_wait_idle_max_sleep_millis) / 1000.0
        #: asks in a row that every task answered with nothing (0 once one emits)
        self.empty_asks = 0

    def python_body(self) -> SpoutExecutor:
        """Run the component's own spout instances (the core's body): opened at prepare, closed at shutdown."""
        self.preparers.append(self.open_tasks)
        self.closers.append(self.close_tasks)
        return self

    def open_tasks(self, make: Callable[[], Any] | None = None) -> None:
        """The body of a Python spout: an instance and a collector per task, opened."""
        runtime = self.runtime
        routes = runtime.routes_for(self.component)
        for task in self.tasks:
            spout = (make or (lambda: runtime.instantiate(self.component)))()
            collector = SpoutOutputCollector(self, task, routes)
            self.spouts[task] = spout
            self.collectors[task] = collector
            spout.open(runtime.task_conf(self.component), self.context(task), collector)
            self.next_tuple[task] = spout.next_tuple
            handler = getattr(spout, "on_control", None)  # Gale's own spouts (the checkpoint coordinator)
            if handler is not None:
                self.control[task] = handler

    def _call(self, method: str, task: int, *args: Any) -> None:
        self.call_user(getattr(self.spouts[task], method), *args)

    def fail_tree(self, task: int, msg_id: Any) -> None:
        """A tree of ``task`` failed or timed out: the spout is told ``fail`` (or a layer decides)."""
        if self.on_fail is not None:
            self.on_fail(task, msg_id)
        else:
            self._call("fail", task, msg_id)

    def set_active(self, active: bool) -> None:
        if active == self.active:
            return
        self.active = active
        for task in self.tasks:
            self._call("activate" if active else "deactivate", task)

    def rewind_needed(self, task: int) -> None:
        """A spout's source moved away from the last checkpoint (``collector.rewind_needed()``):
        the exactly-once layer handles it (``on_rewind``); nothing to do otherwise."""
        if self.on_rewind is not None:
            self.on_rewind(task)

    def ack_now(self, task: int, msg_id: Any, stream: str) -> None:
        """Acking disabled: the spout is told ``ack`` right after the emit."""
        self.stats.acked[stream] += 1
        call: list = self._call_token
        call[0] = []  # wedge detection: this call's token (Executor.enter_call)
        try:
            self.spouts[task].ack(msg_id)
        except Exception as exc:  # noqa: BLE001 - user code
            self.report_error(exc)
        finally:
            call[0] = None

    def run_batch(self, budget: int) -> int:
        work = 0
        for poll in self.polls:
            try:
                work += poll(self.clock.monotonic())
            except Exception as exc:  # noqa: BLE001 - a layer's bug: reported, the worker goes on
                self.hook_failed(poll, exc)
        for task, queue in self.queues.items():
            if queue:
                n = len(queue)
                work += n
                try:
                    self._ack_results(task, queue, n)
                except Exception as exc:  # noqa: BLE001 - a message that is no verdict: dropped, never fatal
                    self.hook_failed(self._ack_results, exc)
        if self.runtime.active != self.active:
            self.set_active(self.runtime.active)
        emitted = 0
        if self.active and not self.runtime.congested:
            ask_after = self.ask_after
            if not ask_after or time.monotonic() >= ask_after:
                self.ask_after = 0.0
                emitted = self._ask_for_tuples(budget)
        for after in self.afters:
            try:
                after()
            except Exception as exc:  # noqa: BLE001 - a layer's bug: reported, the worker goes on
                self.hook_failed(after, exc)
        return work + emitted

    def _ask_for_tuples(self, budget: cython.Py_ssize_t) -> int:
        max_pending = self.max_pending
        limit: cython.Py_ssize_t = max_pending if max_pending is not None else PY_SSIZE_T_MAX
        emitted: cython.Py_ssize_t = 0
        calls: cython.Py_ssize_t = 0
        made: cython.Py_ssize_t
        tasks = self.tasks
        n_tasks: cython.Py_ssize_t = len(tasks)
        cycle: cython.Py_ssize_t = self._task_cycle
        pending = self.pending
        next_tuple = self.next_tuple
        collectors = self.collectors
        collector: SpoutOutputCollector
        call: list = self._call_token
        while calls < budget:
            if len(pending) >= limit:
                break
            task = tasks[cycle % n_tasks]
            cycle += 1
            collector = collectors[task]
            made = collector._emitted
            call[0] = []  # wedge detection: this call's token (Executor.enter_call)
            try:
                next_tuple[task]()
            except Exception as exc:  # noqa: BLE001 - user code
                self.report_error(exc)
            finally:
                call[0] = None
            calls += 1
            made = collector._emitted - made
            if made == 0:
                if n_tasks == 1 or calls >= n_tasks:
                    if self.spout_wait and not self.polls and not self.work_checks:
                        self.empty_asks += 1
                        self.ask_after = time.monotonic() + self.idle_pause()
                    break
                continue
            emitted += made
        if emitted:
            self.empty_asks = 0
        self._task_cycle = cycle
        return emitted

    def idle_pause(self) -> float:
        """How long not to ask after an empty ask: Storm's spout wait, and once the spout has been
        empty :data:`IDLE_ASKS` times in a row, one spout wait more per further empty ask, up to
        ``topology.spout.wait.idle.max.sleep.millis`` (10 ms). A spout idle for long (a drained
        queue, a quiet topic) costs its worker ~100 wake-ups a second instead of 1,000 (a Python
        round costs 50–100 µs: 5–10% of a core); its first tuple after the quiet waits up to that
        long; a spout that emits again is asked at Storm's pace at once."""
        wait = self.spout_wait
        extra = self.empty_asks - IDLE_ASKS
        if extra > 0:  # a maximum under the spout wait: no growth
            wait = max(wait, min(wait * (extra + 1), self.idle_wait_max))
        return wait

    def pending_full(self) -> bool:
        """``topology.max.spout.pending`` reached: the tasks are not asked until a tree completes."""
        max_pending = self.max_pending
        return max_pending is not None and len(self.pending) >= max_pending

    def _ack_results(self, task: int, queue: deque, n: cython.Py_ssize_t) -> None:
        """Apply the first ``n`` messages of ``task``'s queue: the acker's outcomes (the spout is
        told ack or fail) and control messages (to the task's control handler)."""
        pop = queue.popleft
        pending_pop = self.pending.pop
        stats = self.stats
        spouts = self.spouts
        call: list = self._call_token
        now: cython.double = self.clock.monotonic()
        i: cython.Py_ssize_t
        # acks of one stream in a row are added to the statistics together
        run_stream = None
        run_n: cython.Py_ssize_t = 0
        run_ms: cython.double = 0.0
        try:
            for i in range(n):
                outcome, root = pop()
                if outcome == RESET_TIMEOUT:
                    self.pending.touch(root)
                    continue
                info = pending_pop(root)
                if info is None:
                    if outcome == CONTROL:  # its payload is no root: checked here, off the path of acks
                        self._control(task, root)
                    continue  # or timed out already (the spout was told fail then)
                spout_task, msg_id, stream, t_emit = info
                if outcome == ACKED:
                    if stream is not run_stream:
                        if run_n:
                            _add_acked(stats, run_stream, run_n, run_ms)
                        run_stream, run_n, run_ms = stream, 0, 0.0
                    run_n += 1
                    run_ms += (now - t_emit) * 1000.0
                    call[0] = []  # wedge detection: this call's token (Executor.enter_call)
                    try:
                        spouts[spout_task].ack(msg_id)
                    except Exception as exc:  # noqa: BLE001 - user code
                        self.report_error(exc)
                    finally:
                        call[0] = None
                elif outcome == FAILED:
                    stats.failed[stream] += 1
                    self.fail_tree(spout_task, msg_id)
        finally:
            if run_n:
                _add_acked(stats, run_stream, run_n, run_ms)

    def _control(self, task: int, payload: Any) -> None:
        handler = self.control.get(task)
        if handler is None:
            self.stats.extra["control_refused"] = self.stats.extra.get("control_refused", 0) + 1
            return
        try:
            handler(payload)
        except Exception as exc:  # noqa: BLE001 - a handler must not stop the executor thread
            self.report_error(f"control message {payload!r} to task {task} failed: {format_error(exc)}")

    def on_timer(self, now: float) -> None:
        while self.timeouts_enabled and now >= self.next_rotation:
            self.next_rotation += self.timeout
            for _root, (task, msg_id, stream, _t) in self.pending.rotate().items():
                self.stats.failed[stream] += 1
                self.stats.timed_out[stream] += 1
                self.fail_tree(task, msg_id)
        super().on_timer(now)

    def close_tasks(self) -> None:
        for task in self.tasks:
            if task in self.spouts:
                if self.active:
                    self._call("deactivate", task)
                self._call("close", task)
        self.active = False
