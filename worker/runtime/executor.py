"""Executors: one per contiguous task range of a component, each with its own input queue.

An executor owns the instances of its tasks (one spout or bolt object per task), one input queue
per task (a deque of payloads: tuples for bolts, acker messages for ackers, ack results for
spouts) and its statistics. An executor thread (``gale.worker.runtime.threads``)
calls :meth:`Executor.run_batch` in rounds; nothing here sleeps or blocks except user code.

User code errors never lose a tuple silently: an exception from ``execute`` is reported (throttled
to ``topology.max.error.report.per.interval`` per ``topology.error.throttle.interval.secs`` per
executor) and the input tuple is failed so its spout tuple replays. The executor keeps running
(Storm instead kills the worker and lets the supervisor restart it; in Gale a worker restart would
fail every in-flight tuple of every executor in the worker, so only the faulty input is failed).
"""

from __future__ import annotations

import traceback
from collections import deque
from typing import TYPE_CHECKING, Any

from gale.log import get_logger
from gale.topology.components import BasicBolt, FailedException, ReportedFailedException, TopologyContext
from gale.topology.tuple import SYSTEM_COMPONENT, TICK_FIELDS, TICK_STREAM, Tuple
from gale.worker.runtime.acker import ACKED, FAILED, RESET_TIMEOUT, AckerTable
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

    def __init__(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str):
        self.runtime = runtime
        self.executor_id = executor_id
        self.component = component
        self.tasks = list(range(executor_id[0], executor_id[1] + 1))
        self.conf = runtime.component_conf(component)
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
            self.conf["topology.max.error.report.per.interval"],
            self.conf["topology.error.throttle.interval.secs"],
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

    # --- lifecycle
    def prepare(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def safe_prepare(self) -> None:
        """``prepare``; a user exception in open/prepare is reported against the component, then
        re-raised (the worker cannot run a task that failed to start)."""
        try:
            self.prepare()
        except Exception as exc:
            self.report_error(exc)
            raise

    def shutdown(self) -> None:
        pass

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

    def queued(self) -> int:
        return sum(len(q) for q in self.queue_list)

    def run_batch(self, budget: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_timer(self, now: float) -> None:
        pass

    def has_work(self) -> bool:
        return any(self.queue_list)

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
        return 0

    def context(self, task: int) -> TopologyContext:
        return self.runtime.topology_context(self.component, task)


class SpoutExecutor(Executor):
    kind = "spout"

    def __init__(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str):
        super().__init__(runtime, executor_id, component)
        self.pending = RotatingMap(2)
        self.spouts: dict[int, Any] = {}
        self.collectors: dict[int, SpoutOutputCollector] = {}
        self._next_tuple: dict[int, Any] = {}
        max_pending = self.conf.get("topology.max.spout.pending")
        self.max_pending = max_pending * len(self.tasks) if max_pending else None
        self.timeout = self.conf["topology.message.timeout.secs"]
        self.timeouts_enabled = self.conf["topology.enable.message.timeouts"]
        self.next_rotation = self.clock.monotonic() + self.timeout
        self.active = False
        self.emitted_this_round = 0
        self._task_cycle = 0

    def prepare(self) -> None:
        routes = self.runtime.routes_for(self.component)
        for task in self.tasks:
            spout = self.runtime.instantiate(self.component)
            collector = SpoutOutputCollector(self, task, routes)
            self.spouts[task] = spout
            self.collectors[task] = collector
            spout.open(self.runtime.task_conf(self.component), self.context(task), collector)
            self._next_tuple[task] = spout.next_tuple

    def _call(self, method: str, task: int, *args: Any) -> None:
        self.calls += 1
        self.in_call = True
        try:
            getattr(self.spouts[task], method)(*args)
        except Exception as exc:  # noqa: BLE001 - user code
            self.report_error(exc)
        finally:
            self.in_call = False

    def set_active(self, active: bool) -> None:
        if active == self.active:
            return
        self.active = active
        for task in self.tasks:
            self._call("activate" if active else "deactivate", task)

    def rewind_needed(self, task: int) -> None:
        """A spout's source moved away from the last checkpoint (exactly-once only; see
        ``gale.worker.state.exactly_once``)."""

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

    def pending_count(self) -> int:
        return len(self.pending)

    def run_batch(self, budget: int) -> int:
        work = 0
        for queue in self.queue_list:
            if queue:
                n = len(queue)
                work += n
                self._ack_results(queue, n)
        if self.runtime.active != self.active:
            self.set_active(self.runtime.active)
        if not self.active or self.runtime.congested:
            return work
        max_pending = self.max_pending
        emitted = 0
        calls = 0
        tasks = self.tasks
        while calls < budget:
            if max_pending is not None and len(self.pending) >= max_pending:
                break
            task = tasks[self._task_cycle % len(tasks)]
            self._task_cycle += 1
            self.emitted_this_round = 0
            self.calls += 1
            self.in_call = True
            try:
                self._next_tuple[task]()
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
        return work + emitted

    def _ack_results(self, queue: deque, n: int) -> None:
        """Apply the first ``n`` acker outcomes of ``queue``: the spout is told ack or fail."""
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
                continue  # timed out already (the spout was told fail then)
            task, msg_id, stream, t_emit = info
            if outcome == ACKED:
                acked[stream] += 1
                complete_ms[stream] += (now - t_emit) * 1000.0
                complete_n[stream] += 1
                self.calls += 1
                self.in_call = True
                try:
                    spouts[task].ack(msg_id)
                except Exception as exc:  # noqa: BLE001 - user code
                    self.report_error(exc)
                finally:
                    self.in_call = False
            elif outcome == FAILED:
                stats.failed[stream] += 1
                self._call("fail", task, msg_id)

    def on_timer(self, now: float) -> None:
        while self.timeouts_enabled and now >= self.next_rotation:
            self.next_rotation += self.timeout
            for _root, (task, msg_id, stream, _t) in self.pending.rotate().items():
                self.stats.failed[stream] += 1
                self.stats.timed_out[stream] += 1
                self._call("fail", task, msg_id)

    def shutdown(self) -> None:
        for task in self.tasks:
            if task in self.spouts:
                if self.active:
                    self._call("deactivate", task)
                self._call("close", task)
        self.active = False


class BoltExecutor(Executor):
    kind = "bolt"

    def __init__(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str):
        super().__init__(runtime, executor_id, component)
        self.bolts: dict[int, Any] = {}
        self.collectors: dict[int, BoltOutputCollector] = {}
        self.basic: dict[int, bool] = {}
        tick = self.conf.get("topology.tick.tuple.freq.secs")
        self.tick_secs = float(tick) if tick else None
        self.next_tick = self.clock.monotonic() + self.tick_secs if self.tick_secs else None
        rate = float(self.conf.get("topology.stats.sample.rate", 0.05) or 0)
        self.sample_every = max(1, int(round(1 / rate))) if rate > 0 else 0
        self._sample_n = 0

    def prepare(self) -> None:
        routes = self.runtime.routes_for(self.component)
        for task in self.tasks:
            bolt = self.runtime.instantiate(self.component)
            collector = BoltOutputCollector(self, task, routes)
            self.bolts[task] = bolt
            self.collectors[task] = collector
            self.basic[task] = isinstance(bolt, BasicBolt)
            bolt.prepare(self.runtime.task_conf(self.component), self.context(task), collector)

    def run_batch(self, budget: int) -> int:
        done = 0
        for task, queue in self.queues.items():
            if queue:
                done += self._run_task(task, queue, budget - done)
                if done >= budget:
                    break
        return done

    def count_acked(self) -> None:
        for collector in self.collectors.values():
            collector._count_acked()

    def _run_task(self, task: int, queue: deque, budget: int) -> int:
        n = min(len(queue), budget)
        pop = queue.popleft
        execute = self.bolts[task].execute
        collector = self.collectors[task]
        if self.basic[task]:
            execute = self._basic_execute(collector, execute)
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

    def on_timer(self, now: float) -> None:
        if self.next_tick is not None and now >= self.next_tick:
            self.next_tick = now + self.tick_secs
            for task in self.tasks:
                self.queues[task].append(Tuple([self.tick_secs], TICK_FIELDS, SYSTEM_COMPONENT, TICK_STREAM, -1))

    def shutdown(self) -> None:
        for task, bolt in self.bolts.items():
            try:
                bolt.cleanup()
            except Exception as exc:  # noqa: BLE001
                self.report_error(exc)
        self.count_acked()


class AckerExecutor(Executor):
    """The ``__acker`` system bolt: one :class:`AckerTable` per task, messages applied in batches."""

    kind = "bolt"

    def __init__(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str):
        super().__init__(runtime, executor_id, component)
        self.tables = {task: AckerTable() for task in self.tasks}
        self.timeout = self.conf["topology.message.timeout.secs"]
        self.timeouts_enabled = self.conf["topology.enable.message.timeouts"]
        self.next_rotation = self.clock.monotonic() + self.timeout

    def prepare(self) -> None:
        pass

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
