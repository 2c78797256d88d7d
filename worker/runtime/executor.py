"""Executors: the one task loop of a worker — each runs a contiguous task range of a component.

An executor owns one input queue per task (a deque of payloads: tuples for bolts, acker messages for
ackers, acker verdicts and control messages for spouts), its statistics and its error throttle. An
executor thread (:class:`gale.worker.runtime.runtime.ExecutorThread`) calls :meth:`Executor.run_batch`
in rounds; nothing here sleeps or blocks except user code.

What a task *does* with its input is its **body**, and what the topology needs around the body are
**layers** (``docs/architecture.md``, "The executor: core, body, layers"). This module is the core:
it knows tuples, queues, collectors, the acker and the clock, and nothing of state, windows,
subprocesses or Spark. A body or layer plugs into an executor through a few hook lists, filled by
``gale.worker.assembly`` before :meth:`Executor.prepare`:

* ``preparers`` — set-up steps, in order (the body's first: it makes each task's instance and
  collector; a layer after it may wrap the task's intake or hold its acks);
* ``polls`` — ``poll(now) -> work`` at the start of every round (a subprocess's output, a Spark
  job's results, acks released by a commit);
* ``timers`` — ``timer(now)`` on the executor's timer (windows, tick tuples, hung batches);
* ``pendings`` — ``pending() -> n``: tuples a body or layer holds (the executor's *pending*);
* ``work_checks`` — ``check() -> bool``: work besides the input queues (wakes the thread);
* ``closers`` — shutdown steps, in order.

A bolt task's input goes through its **intake** (``intake[task](task, queue, budget) -> taken``):
by default the hot loop :meth:`BoltExecutor.run_task`, which hands each tuple to ``execute[task]``
(the bolt's ``execute``, a BasicBolt's wrapper, a window's runner); a body that takes tuples its own
way (a subprocess, a Spark micro-batch) sets its own intake, and a layer (the checkpoint barrier)
may wrap whichever is there. A spout task's queue carries the acker's verdicts and control messages
(:data:`CONTROL`, e.g. exactly-once epochs): a task's control handler is ``control[task]``; a layer
may take over ``fail`` (``on_fail``) and choose which tasks are asked for tuples (``next_tuple``).

User code errors never lose a tuple silently: an exception from ``execute`` is reported (throttled
to ``topology.max.error.report.per.interval`` per ``topology.error.throttle.interval.secs`` per
executor) and the input tuple is failed so its spout tuple replays. The executor keeps running
(Storm instead kills the worker and lets the supervisor restart it; in Gale a worker restart would
fail every in-flight tuple of every executor in the worker, so only the faulty input is failed).
"""

from __future__ import annotations

import traceback
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gale.log import get_logger
from gale.topology.components import BasicBolt, FailedException, ReportedFailedException, TopologyContext
from gale.topology.tuple import SYSTEM_COMPONENT, TICK_FIELDS, TICK_STREAM, Tuple
from gale.worker.runtime.acker import ACKED, CONTROL, FAILED, RESET_TIMEOUT, AckerTable
from gale.worker.runtime.collector import BoltOutputCollector, SpoutOutputCollector
from gale.worker.runtime.rotating import RotatingMap
from gale.worker.runtime.stats import ExecutorStatsCollector

if TYPE_CHECKING:  # pragma: no cover
    from gale.worker.runtime.runtime import WorkerRuntime

log = get_logger("executor")


def format_error(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        return "".join(traceback.format_exception(type(error), error, error.__traceback__)).rstrip()
    return str(error)


class ErrorThrottle:
    """At most ``limit`` reports per ``interval`` seconds (Storm's per-executor error throttle)."""

    def __init__(self, limit: int, interval: float, clock: Any):
        self.limit = limit
        self.interval = interval
        self.clock = clock
        self.window_start = clock.monotonic()
        self.count = 0
        self.suppressed = 0

    def allow(self) -> bool:
        now = self.clock.monotonic()
        if now - self.window_start >= self.interval:
            self.window_start = now
            self.count = 0
        if self.count < self.limit:
            self.count += 1
            return True
        self.suppressed += 1
        return False


class Executor:
    kind = "bolt"
    #: tuples (messages) an executor takes per round at most
    budget = 1024

    def __init__(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str):
        self.runtime = runtime
        self.executor_id = executor_id
        self.component = component
        self.tasks = list(range(executor_id[0], executor_id[1] + 1))
        self.config = runtime.component_config(component)
        self.clock = runtime.clock
        self.queues: dict[int, deque] = {task: deque() for task in self.tasks}
        self.queue_list: list[deque] = list(self.queues.values())
        #: acks made by this executor's collectors, root → XOR of their values
        #: (BoltOutputCollector.ack): replaced by its thread's buffer, shared by every executor of
        #: the thread and handed to the ackers after each round (one message per tree and round
        #: instead of one per acked tuple; ExecutorThread.ack_buf)
        self.ack_buf: dict[int, int] = {}
        self.thread: Any = None  # the ExecutorThread that runs this executor
        self.stats = ExecutorStatsCollector(component, "spout" if self.kind == "spout" else "bolt", self.clock)
        self.throttle = ErrorThrottle(
            self.config.topology_max_error_report_per_interval,
            self.config.topology_error_throttle_interval_secs,
            self.clock,
        )
        # wedge detection: user calls bump ``calls`` and set ``in_call``; the stats thread sees a
        # call that has not returned across two observations and reports how long it has run
        self.calls = 0
        self.in_call = False
        # the input tuple a bolt is executing right now, in a one-item list the executor thread sets
        # per tuple (a list store; an attribute store per tuple cost ~5% of a word count with acking off)
        self._current: list = [None]
        self._seen_calls: Any = None
        self._seen_since = 0.0
        self.log = log.bind(component=component, executor=f"{executor_id[0]}-{executor_id[1]}")
        # the hooks a body and its layers plug into (module docstring)
        self.preparers: list[Callable[[], None]] = []
        self.polls: list[Callable[[float], int]] = []
        self.timers: list[Callable[[float], None]] = []
        self.pendings: list[Callable[[], int]] = []
        self.work_checks: list[Callable[[], bool]] = []
        self.closers: list[Callable[[], None]] = []
        #: whether the input queues hold work this executor can take now (a body that stops taking
        #: input while it is full — a subprocess's backlog, a full Spark batch — replaces it)
        self.input_ready: Callable[[], bool] = self._queues_hold_work
        #: what the body is (``"python"``, ``"window"``, ``"shell"``, ``"spark"``) and the layers
        #: around it by name (``"checkpoint"``, ``"state"``, ``"held-acks"``, ``"ticks"``, ...)
        self.body_name = "python"
        #: the body object when it is not the core's own (a Python spout or bolt): None
        self.body: Any = None
        self.layers: dict[str, Any] = {}

    # --- lifecycle
    def prepare(self) -> None:
        for step in self.preparers:
            step()

    def safe_prepare(self) -> None:
        """``prepare``; a user exception in open/prepare is reported against the component, then
        re-raised (the worker cannot run a task that failed to start)."""
        try:
            self.prepare()
        except Exception as exc:
            self.report_error(exc)
            raise

    def shutdown(self) -> None:
        for step in self.closers:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - one step failing must not keep the others from running
                self.report_error(exc)

    # --- work
    def receive(self, task: int, payload: Any) -> None:
        """Enqueue from another thread (the transfer receiver) and wake the executor thread."""
        self.queues[task].append(payload)
        thread = self.thread
        if thread is not None and thread.sleeping:
            thread.wake()

    def receive_many(self, task: int, payloads: list) -> None:
        """:meth:`receive` for a list of payloads: one append and one wake for all of them."""
        self.queues[task].extend(payloads)
        thread = self.thread
        if thread is not None and thread.sleeping:
            thread.wake()

    def wake(self) -> None:
        """Wake this executor's thread (from a job or reader thread with news for it)."""
        thread = self.thread
        if thread is not None and thread.sleeping:
            thread.wake()

    def queued(self) -> int:
        return sum(len(q) for q in self.queue_list)

    def run_batch(self, budget: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_timer(self, now: float) -> None:
        for timer in self.timers:
            try:
                timer(now)
            except Exception as exc:  # noqa: BLE001 - a layer's bug: reported, the worker goes on
                self.hook_failed(timer, exc)

    def hook_failed(self, hook: Any, exc: BaseException) -> None:
        """A body's or layer's hook raised (not user code, which is caught where it is called):
        reported on the component; the executor goes on (what the hook held times out and replays)."""
        name = getattr(hook, "__qualname__", None) or repr(hook)
        self.stats.extra["layer_errors"] = self.stats.extra.get("layer_errors", 0) + 1
        self.report_error(f"{name} failed in {self.body_name} executor of {self.component!r}: {format_error(exc)}")

    def _queues_hold_work(self) -> bool:
        return any(self.queue_list)

    def has_work(self) -> bool:
        if self.input_ready():
            return True
        for check in self.work_checks:
            if check():
                return True
        return False

    def count_acked(self) -> None:
        """Add the acks the collectors counted to the statistics (called by the executor thread
        after each batch and timer round; bolts count acks in a run to keep ``ack`` cheap)."""

    # --- errors
    def report_error(self, error: BaseException | str) -> None:
        self.stats.errors += 1
        text = format_error(error)
        if self.throttle.allow():
            self.log.error("component-error", error=text.splitlines()[-1] if text else "")
            self.runtime.report_error(self.component, text)
        else:
            self.log.debug("component-error-throttled", error=text.splitlines()[-1] if text else "")

    @property
    def current(self) -> Any:
        """The input tuple a bolt is executing right now (None between batches)."""
        return self._current[0]

    def busy_secs(self) -> float:
        """How long the user call in progress has been running (0 when idle or progressing)."""
        now = self.clock.monotonic()
        current = self.current
        token = current if current is not None else (self.calls if self.in_call else None)
        if token is None:
            self._seen_calls = None
            return 0.0
        if token is not self._seen_calls and token != self._seen_calls:
            self._seen_calls = token
            self._seen_since = now
            return 0.0
        return now - self._seen_since

    def stats_record(self):
        return self.stats.to_record(
            queue_depth=self.queued(), pending=self.pending_count(), busy_secs=self.busy_secs()
        )

    def pending_count(self) -> int:
        return sum(pending() for pending in self.pendings)

    def context(self, task: int) -> TopologyContext:
        return self.runtime.topology_context(self.component, task)

    def call_user(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call user code for a task (wedge detection sees it); an exception is reported, not raised."""
        self.calls += 1
        self.in_call = True
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - user code
            self.report_error(exc)
            return None
        finally:
            self.in_call = False


class SpoutExecutor(Executor):
    """A spout component's tasks: each round applies the acker's verdicts (the spout is told
    ``ack``/``fail``) and control messages, then asks the tasks for tuples (``next_tuple``) while
    the topology is active, not congested and under ``topology.max.spout.pending``."""

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
        self.emitted_this_round = 0
        self._task_cycle = 0
        self.pendings.append(self.pending.__len__)

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
        self.calls += 1
        self.in_call = True
        try:
            self.spouts[task].ack(msg_id)
        except Exception as exc:  # noqa: BLE001 - user code
            self.report_error(exc)
        finally:
            self.in_call = False

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
                self._ack_results(task, queue, n)
        if self.runtime.active != self.active:
            self.set_active(self.runtime.active)
        emitted = 0
        if self.active and not self.runtime.congested:
            emitted = self._ask_for_tuples(budget)
        for after in self.afters:
            try:
                after()
            except Exception as exc:  # noqa: BLE001 - a layer's bug: reported, the worker goes on
                self.hook_failed(after, exc)
        return work + emitted

    def _ask_for_tuples(self, budget: int) -> int:
        max_pending = self.max_pending
        emitted = 0
        calls = 0
        tasks = self.tasks
        next_tuple = self.next_tuple
        while calls < budget:
            if max_pending is not None and len(self.pending) >= max_pending:
                break
            task = tasks[self._task_cycle % len(tasks)]
            self._task_cycle += 1
            self.emitted_this_round = 0
            self.calls += 1
            self.in_call = True
            try:
                next_tuple[task]()
            except Exception as exc:  # noqa: BLE001 - user code
                self.report_error(exc)
            finally:
                self.in_call = False
            calls += 1
            if self.emitted_this_round == 0:
                if len(tasks) == 1 or calls >= len(tasks):
                    break
                continue
            emitted += self.emitted_this_round
        return emitted

    def _ack_results(self, task: int, queue: deque, n: int) -> None:
        """Apply the first ``n`` messages of ``task``'s queue: the acker's outcomes (the spout is
        told ack or fail) and control messages (to the task's control handler)."""
        pop = queue.popleft
        pending_pop = self.pending.pop
        stats = self.stats
        acked, complete_ms, complete_n = stats.acked, stats.complete_ms, stats.complete_n
        spouts = self.spouts
        now = self.clock.monotonic()
        for _ in range(n):
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
                acked[stream] += 1
                complete_ms[stream] += (now - t_emit) * 1000.0
                complete_n[stream] += 1
                self.calls += 1
                self.in_call = True
                try:
                    spouts[spout_task].ack(msg_id)
                except Exception as exc:  # noqa: BLE001 - user code
                    self.report_error(exc)
                finally:
                    self.in_call = False
            elif outcome == FAILED:
                stats.failed[stream] += 1
                self.fail_tree(spout_task, msg_id)

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

    def run_task(self, task: int, queue: deque, budget: int) -> int:
        """Execute up to ``budget`` tuples of ``queue`` with the task's ``execute`` (the hot loop)."""
        n = min(len(queue), budget)
        pop = queue.popleft
        execute = self.execute[task]
        collector = self.collectors[task]
        stats = self.stats
        executed = stats.executed
        perf = collector._perf
        sample_every = self.sample_every
        # tuples left until the next sampled one (never reaches 0 when sampling is off)
        countdown = (self._sample_n or sample_every) if sample_every else -1
        report_error, fail = self.report_error, collector.fail
        last_fields = None
        run = 0  # tuples of the current input stream not yet added to ``executed``
        current: list = self._current
        for _ in range(n):
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


class AckerExecutor(Executor):
    """The ``__acker`` system bolt: one :class:`AckerTable` per task, messages applied in batches."""

    kind = "bolt"
    budget = 8192

    def __init__(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str):
        super().__init__(runtime, executor_id, component)
        self.tables = {task: AckerTable() for task in self.tasks}
        self.timeout = self.config.topology_message_timeout_secs
        self.timeouts_enabled = self.config.topology_enable_message_timeouts
        self.next_rotation = self.clock.monotonic() + self.timeout

    def run_batch(self, budget: int) -> int:
        done = 0
        send = self.runtime.send_result
        for task, queue in self.queues.items():
            if not queue:
                continue
            n = len(queue)
            if n > budget:
                n = budget
            pop = queue.popleft
            batch = [pop() for _ in range(n)]
            for spout_task, outcome, root in self.tables[task].apply(batch):
                send(spout_task, (outcome, root))
            done += n
        self.stats.executed["__acker:messages"] += done
        return done

    def on_timer(self, now: float) -> None:
        while self.timeouts_enabled and now >= self.next_rotation:
            self.next_rotation += self.timeout
            for table in self.tables.values():
                table.rotate()

    def pending_count(self) -> int:
        return sum(len(t) for t in self.tables.values())


def plain_executor(runtime: WorkerRuntime, executor_id: tuple[int, int], component: str) -> Executor:
    """An executor of a plain Python spout or bolt, or of the acker: the core alone, no layers
    but tick tuples (``gale.worker.assembly`` composes every other kind)."""
    if component == runtime.acker_component:
        return AckerExecutor(runtime, executor_id, component)
    if runtime.defn.components[component].kind == "spout":
        spout = SpoutExecutor(runtime, executor_id, component)
        spout.preparers.append(spout.open_tasks)
        spout.closers.append(spout.close_tasks)
        return spout
    bolt = BoltExecutor(runtime, executor_id, component)
    bolt.preparers.append(bolt.prepare_tasks)
    bolt.closers.append(bolt.cleanup_tasks)
    tick = bolt.config.topology_tick_tuple_freq_secs
    if tick:
        Ticks(bolt, float(tick)).attach()
    return bolt
