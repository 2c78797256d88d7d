"""The bolt executor: each task's queued tuples through its intake (by default the hot loop over its
``execute``), and tick tuples (:mod:`gale.worker.runtime.executor` has what every executor shares
and the hooks)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cython

from gale.topology.components import BasicBolt, FailedException, ReportedFailedException
from gale.topology.tuple import SYSTEM_COMPONENT, TICK_FIELDS, TICK_STREAM, Fields, Tuple
from gale.worker.runtime.collector import BoltOutputCollector
from gale.worker.runtime.executor import Executor

if TYPE_CHECKING:  # pragma: no cover
    from gale.worker.runtime.runtime import WorkerRuntime


class BoltExecutor(Executor):
    """A bolt component's tasks: each round hands every task's queued tuples to its intake."""

    kind = "bolt"

    def __init__(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str):
        super().__init__(runtime, executor_id, component)
        #: task → the component instance its body runs (the user's bolt, or a window's runner)
        self.bolts: dict[int, Any] = {}
        self.collectors: dict[int, BoltOutputCollector] = {}
        #: task → what :meth:`run_task` calls per tuple
        self.execute: dict[int, Callable[[Tuple], Any]] = {}
        #: task → ``intake(task, queue, budget) -> taken``: how its queued tuples are taken
        self.intake: dict[int, Callable[[int, deque, int], int]] = {}
        self._inlets: list[tuple[int, deque, Callable[[int, deque, int], int]]] = []
        rate = float(self.config.topology_stats_sample_rate or 0)
        self.sample_every = max(1, int(round(1 / rate))) if rate > 0 else 0
        self._sample_n = 0

    def prepare(self) -> None:
        super().prepare()
        self._inlets = [(task, self.queues[task], self.intake.get(task, self.run_task)) for task in self.tasks]

    def python_body(self) -> BoltExecutor:
        """Run the component's own bolt instances (the core's body): ``execute`` in the hot loop."""
        self.preparers.append(self.prepare_tasks)
        self.closers.append(self.cleanup_tasks)
        return self

    def prepare_tasks(self, make: Callable[[int], Any] | None = None, collector_for: Any = None) -> None:
        """The body of a Python bolt: an instance and a collector per task, prepared; ``execute``
        is the bolt's (a BasicBolt's anchors its emits to the input and acks it when it returns).
        ``make(task, bolt, collector, given)`` builds what runs the user's instance (a window's
        runner); ``collector_for(task, collector)`` gives the instance another collector than the
        task's own (``given``: one that holds outputs)."""
        runtime = self.runtime
        routes = runtime.routes_for(self.component)
        for task in self.tasks:
            bolt = runtime.instantiate(self.component)
            collector = BoltOutputCollector(self, task, routes)
            self.collectors[task] = collector
            given = collector_for(task, collector) if collector_for is not None else collector
            runner = make(task, bolt, collector, given) if make is not None else bolt
            self.bolts[task] = runner
            bolt.prepare(runtime.task_conf(self.component), self.context(task), given)
            execute = runner.execute
            if runner is bolt and isinstance(bolt, BasicBolt):
                execute = self._basic_execute(collector, execute)
            self.execute[task] = execute

    def cleanup_tasks(self) -> None:
        for bolt in self.bolts.values():
            try:
                bolt.cleanup()
            except Exception as exc:  # noqa: BLE001
                self.report_error(exc)
        self.count_acked()

    def run_batch(self, budget: int) -> int:
        done = 0
        if self.polls:
            now = self.clock.monotonic()
            for poll in self.polls:
                try:
                    done += poll(now)
                except Exception as exc:  # noqa: BLE001 - a layer's bug: reported, the worker goes on
                    self.hook_failed(poll, exc)
        for task, queue, intake in self._inlets:
            if queue:
                try:
                    done += intake(task, queue, budget - done)
                except Exception as exc:  # noqa: BLE001 - a body's or layer's bug (user code is caught inside)
                    self.hook_failed(intake, exc)
                    done += 1
                if done >= budget:
                    break
        return done

    def count_acked(self) -> None:
        for collector in self.collectors.values():
            collector._count_acked()

    def run_task(self, task: int, queue: deque, budget: cython.Py_ssize_t) -> int:
        """Execute up to ``budget`` tuples of ``queue`` with the task's ``execute`` (the hot loop)."""
        n: cython.Py_ssize_t = min(len(queue), budget)
        pop = queue.popleft
        execute = self.execute[task]
        collector = self.collectors[task]
        stats = self.stats
        executed = stats.executed
        perf = collector._perf
        sample_every: cython.Py_ssize_t = self.sample_every
        # tuples left until the next sampled one (never reaches 0 when sampling is off)
        countdown: cython.Py_ssize_t = (self._sample_n or sample_every) if sample_every else -1
        report_error, fail = self.report_error, collector.fail
        tup: Tuple
        fields: Fields
        last_fields: Fields = None
        run: cython.Py_ssize_t = 0  # tuples of the current input stream not yet added to ``executed``
        i: cython.Py_ssize_t
        current: list = self._current
        for i in range(n):
            tup = pop()
            fields = tup.fields
            if fields is not last_fields:
                if run:
                    executed[last_fields.source_key] += run
                last_fields, run = fields, 0
            run += 1
            # what the stats thread sees while user code runs (wedge detection; None after the batch)
            current[0] = tup
            countdown -= 1
            if countdown:
                try:
                    execute(tup)
                except ReportedFailedException as exc:
                    report_error(exc)
                    fail(tup)
                except FailedException:
                    fail(tup)
                except Exception as exc:  # noqa: BLE001 - user code
                    report_error(exc)
                    fail(tup)
                continue
            countdown = sample_every
            sampled = tup._st = perf()
            try:
                execute(tup)
            except ReportedFailedException as exc:
                report_error(exc)
                fail(tup)
            except FailedException:
                fail(tup)
            except Exception as exc:  # noqa: BLE001 - user code
                report_error(exc)
                fail(tup)
            key = fields.source_key
            stats.execute_ms[key] += (perf() - sampled) * 1000.0
            stats.execute_n[key] += 1
        current[0] = None
        if run:
            executed[last_fields.source_key] += run
        if sample_every:
            self._sample_n = countdown
        return n

    @staticmethod
    def _basic_execute(collector: BoltOutputCollector, execute: Any) -> Any:
        """A BasicBolt's execute: emits anchor to the input, which is acked when execute returns
        (an exception fails it, in the caller)."""
        ack = collector.ack

        def run(tup: Tuple) -> None:
            collector.auto_anchor = tup
            try:
                execute(tup)
            finally:
                collector.auto_anchor = None
            ack(tup)

        return run


class Ticks:
    """Tick tuples (``topology.tick.tuple.freq.secs``): every period, one tick tuple on each task's
    queue, executed like any input (``tup.is_tick()``)."""

    def __init__(self, executor: BoltExecutor, period: float):
        self.executor = executor
        self.period = period
        self.next_tick = executor.clock.monotonic() + period

    def attach(self) -> None:
        self.executor.timers.append(self.on_timer)
        self.executor.layers["ticks"] = self

    def on_timer(self, now: float) -> None:
        if now >= self.next_tick:
            self.next_tick = now + self.period
            for queue in self.executor.queue_list:
                queue.append(Tuple([self.period], TICK_FIELDS, SYSTEM_COMPONENT, TICK_STREAM, -1))


def attach_ticks(executor: BoltExecutor) -> None:
    """Tick tuples when the component's configuration asks for them (any body)."""
    period = executor.config.topology_tick_tuple_freq_secs
    if period:
        Ticks(executor, float(period)).attach()
