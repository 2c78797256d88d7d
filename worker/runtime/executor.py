"""Executors: the one task loop of a worker — each runs a contiguous task range of a component.

This module holds what every executor has (:class:`Executor`) and the acker's; the spout's and the
bolt's are :mod:`gale.worker.runtime.spout` and :mod:`gale.worker.runtime.bolt`.

An executor owns one input queue per task (a deque of payloads: tuples for bolts, acker messages for
ackers, acker verdicts and control messages for spouts), its statistics and its error throttle. An
executor thread (:class:`gale.worker.runtime.threads.ExecutorThread`) calls :meth:`Executor.run_batch`
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
from gale.topology.components import TopologyContext
from gale.worker.runtime.acker import AckerTable
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
        # wedge detection: a user call in progress holds a token of its own in ``_call_token`` (a
        # fresh object in a one-item list: a list store per call, where bumping a counter attribute and
        # setting a flag attribute twice cost ~900 instructions a spout tuple); the stats thread sees
        # the same token across two observations and reports how long the call has run
        self._call_token: list = [None]
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
    def use_body(self, body: Any, *, prepare: Callable[[], None], close: list[Callable[[], None]],
                 poll: Callable[[float], int] | None = None, timer: Callable[[float], None] | None = None,
                 pending: Callable[[], int] | None = None, news: Callable[[], bool] | None = None,
                 input_ready: Callable[[], bool] | None = None) -> None:
        """Put ``body`` (its ``name``) in this executor: its set-up first, its shutdown steps in order,
        and what it does each round, on the timer, holds, has news of, or takes as input."""
        self.body, self.body_name = body, body.name
        self.preparers.append(prepare)
        self.closers.extend(close)
        for hooks, hook in ((self.polls, poll), (self.timers, timer), (self.pendings, pending),
                            (self.work_checks, news)):
            if hook is not None:
                hooks.append(hook)
        if input_ready is not None:
            self.input_ready = input_ready

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
        self._current[0] = None
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
        token = current if current is not None else self._call_token[0]
        if token is None:
            self._seen_calls = None
            return 0.0
        if token is not self._seen_calls:  # held there, a token's identity is no other call's
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

    @property
    def in_call(self) -> bool:
        """Whether a user call is running (:meth:`enter_call` without its :meth:`leave_call` yet)."""
        return self._call_token[0] is not None

    def enter_call(self) -> None:
        """A user call begins: wedge detection (:meth:`busy_secs`) times it until :meth:`leave_call`."""
        self._call_token[0] = []  # a new object: the token of this call

    def leave_call(self) -> None:
        self._call_token[0] = None

    def call_user(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call user code for a task (wedge detection sees it); an exception is reported, not raised."""
        self.enter_call()
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - user code
            self.report_error(exc)
            return None
        finally:
            self.leave_call()


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
        spouts = self.runtime.spout_tasks
        for task, queue in self.queues.items():
            if not queue:
                continue
            n = len(queue)
            if n > budget:
                n = budget
            pop = queue.popleft
            batch = [pop() for _ in range(n)]
            try:
                verdicts = self.tables[task].apply(batch)
            except Exception as exc:  # noqa: BLE001 - a message no check caught: never the worker's end
                self.dropped("acker_batch_dropped", n, f"acker task {task} dropped a batch of {n} messages it "
                                                        f"could not apply: {format_error(exc)}")
                verdicts = ()
            for spout_task, outcome, root in verdicts:
                if spout_task in spouts:
                    send(spout_task, (outcome, root))
                else:  # an INIT named a task that is no spout (a forged or buggy message): its verdict goes nowhere
                    self.dropped("acker_verdicts_dropped", 1, f"acker task {task}: tree {root} names task "
                                                              f"{spout_task} as its spout, which is no spout task")
            done += n
        self.stats.executed["__acker:messages"] += done
        return done

    def dropped(self, counter: str, n: int, why: str) -> None:
        extra = self.stats.extra
        extra[counter] = extra.get(counter, 0) + n
        self.report_error(why)

    def on_timer(self, now: float) -> None:
        while self.timeouts_enabled and now >= self.next_rotation:
            self.next_rotation += self.timeout
            for table in self.tables.values():
                table.rotate()
        Executor.on_timer(self, now)  # its layers' (a hello to the spouts)

    def pending_count(self) -> int:
        return sum(len(t) for t in self.tables.values())
