"""SparkStage: the body that runs Spark bolts and sinks in micro-batches, keeping the acker's guarantee.

Threads. Everything that touches a collector (emit, ack, fail, reset_timeout) happens on the
executor thread, in the body's intake and poll (and its periodic part). A batch's Spark work runs on a job
thread (one per task at most); its outcome is queued and applied by the executor thread.

Flow per task: tuples move from the input deque into a :class:`~gale.worker.spark.batching.Batcher`
(at most ``topology.spark.batch.size``); a due batch (full, or its oldest tuple waited
``topology.spark.batch.millis``) starts a job when Spark is ready and no other batch of the task
is running. Meanwhile the next batch fills; when it is full the executor stops draining, the
input deque grows, and the runtime's backpressure pauses the spouts. So a task holds at most two
batches (one running, one filling) plus one being emitted.

Reliability. A batch's outputs are emitted anchored to their inputs (lineage), then every input
is acked; if the job raises, every input fails and the error is reported. If Spark failed to
start, or has not started within ``topology.spark.start.timeout.secs`` (default 300), due batches
fail with that error, at the batch pace (so a replaying spout does not spin). A batch running
longer than ``topology.spark.batch.timeout.secs`` (default max(120, 4 × message timeout)) is
interrupted and its tuples fail. While tuples are held, their tuple trees' timeouts are reset
every half ``topology.message.timeout.secs`` so a slow Spark start does not replay them.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gale.errors import TopologyError
from gale.topology.checkpointing import data_inputs
from gale.topology.tuple import SYSTEM_COMPONENT, TICK_STREAM
from gale.worker.runtime.collector import BoltOutputCollector
from gale.worker.runtime.bolt import BoltExecutor
from gale.worker.runtime.executor import format_error
from gale.worker.spark.arrow_batches import is_batch_stream, rows_in
from gale.worker.spark.batching import Batcher, BatchPolicy

MAX_ERROR_CHARS = 4000
PERIOD_SECS = 0.05


def _rendered(error: BaseException) -> str:
    try:
        return format_error(error)
    except Exception:  # noqa: BLE001 - e.g. a py4j error whose JVM is gone
        return f"{type(error).__name__} (its message could not be read)"


@dataclass
class BatchResult:
    """What a Spark job returns for one batch."""

    #: output rows (Spark bolts) and, per row, its anchors (``gale.worker.spark.lineage.Anchoring``)
    values: list[list[Any]] = field(default_factory=list)
    anchoring: Any = None
    lineage: Any = None
    #: rows out when it is not ``len(values)`` (a batch output: one value per table of rows)
    rows_out: int | None = None
    #: sinks: rows written, rows skipped as already committed, batches committed
    written: int = 0
    deduped: int = 0
    committed: int = 0


class _Task:
    """Batching state of one task."""

    __slots__ = ("task", "bolt", "collector", "batcher", "running", "running_rows", "generation", "started_at", "tag")

    def __init__(self, task: int, bolt: Any, collector: BoltOutputCollector, policy: BatchPolicy):
        self.task = task
        self.bolt = bolt
        self.collector = collector
        self.batcher = Batcher(policy)
        self.running: list | None = None  # the batch whose job is running
        self.running_rows = 0  # its rows (its tuples, unless they are batch tuples)
        self.generation = 0
        self.started_at = 0.0
        self.tag = ""


class _Emitting:
    """A successful batch whose output rows are being emitted (across rounds when large)."""

    __slots__ = ("st", "batch", "result", "cursor")

    def __init__(self, st: _Task, batch: list, result: BatchResult):
        self.st = st
        self.batch = batch
        self.result = result
        self.cursor = 0


STAT_KEYS = (
    "spark_ready", "spark_start_secs", "spark_batches", "spark_batches_failed", "spark_batch_rows_in",
    "spark_batch_rows_out", "spark_batch_size_avg", "spark_batch_latency_ms_sum", "spark_batch_latency_ms_avg",
    "spark_batch_latency_ms_max", "spark_held_tuples", "spark_lineage_fallback_batches",
    "spark_lineage_fallback_rows", "spark_sink_rows_written", "spark_sink_rows_deduped",
    "spark_sink_batches_committed", "spark_start_attempts",
)


class SparkStage:
    """The body of a Spark component's executor (a Spark bolt or sink: its class's ``body_kind``)."""

    name = "spark"

    def __init__(self, executor: BoltExecutor):
        self.executor = executor
        config = executor.config
        self.policy = BatchPolicy.from_conf(config)
        self.timeout = float(config.topology_message_timeout_secs)
        self.timeouts_enabled = bool(config.topology_enable_message_timeouts)
        self.start_timeout = float(config.topology_spark_start_timeout_secs)
        self.start_retry = float(config.topology_spark_start_retry_secs)
        self._attempt: Any = None  # the Spark start attempt (its Future) this executor last saw
        self.batch_timeout = float(config.topology_spark_batch_timeout_secs or max(120.0, 4 * self.timeout))
        self.spark: Any = None
        self.states: dict[int, _Task] = {}
        self.outcomes: deque = deque()  # appended by job threads, popped by the executor thread
        self.emitting: _Emitting | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.closing = False
        self.prepared_at = 0.0
        self.next_reset = 0.0
        self.next_periodic = 0.0
        self.warned: set[str] = set()
        self.batch_input = False  # the subscribed stream is a batch stream (set in prepare)
        self.polled = 0  # work done by this round's poll
        executor.stats.extra.update({k: 0.0 for k in STAT_KEYS})

    def attach(self) -> None:
        ex = self.executor
        ex.use_body(self, prepare=self.prepare, close=[self.shutdown, ex.cleanup_tasks], poll=self.poll,
                    pending=self.pending, news=self.has_news, input_ready=self.input_ready)

    # ------------------------------------------------------------------ lifecycle
    def input_fields(self) -> list[str]:
        """The fields of the subscribed stream(s) — the data ones: a topology's ``$checkpoint``
        tuples never reach the body; a Spark component takes one schema."""
        ex = self.executor
        defn = ex.runtime.defn
        found: dict[tuple[str, ...], str] = {}
        for inp in data_inputs(defn, ex.component):
            fields = tuple(defn.components[inp.component].streams[inp.stream].fields)
            found.setdefault(fields, f"{inp.component}:{inp.stream}")
        if len(found) != 1:
            shown = "; ".join(f"{src} has {list(f)}" for f, src in found.items())
            raise TopologyError(
                f"Spark component {ex.component!r} subscribes to streams with different fields ({shown}); "
                "a micro-batch is one DataFrame with one schema"
            )
        return list(next(iter(found)))

    def prepare(self) -> None:
        ex = self.executor
        runtime = ex.runtime
        fields = self.input_fields()
        self.batch_input = is_batch_stream(fields)

        def check(task: int, bolt: Any, collector: BoltOutputCollector, given: Any) -> Any:
            if not callable(getattr(bolt, "spark_job", None)):
                raise TopologyError(f"component {ex.component!r}: {type(bolt).__name__} is not a Spark component")
            bolt.input_fields = list(fields)
            bolt.batch_input = self.batch_input
            self.states[task] = _Task(task, bolt, collector, self.policy)
            return bolt

        ex.prepare_tasks(make=check)
        for task in ex.tasks:
            ex.intake[task] = self.intake
        self.spark = runtime.resources.get("spark")
        if self.spark is None:  # a definition that did not flag the component as Spark
            from gale.worker.spark.session import start_spark_for

            self.spark = runtime.resources["spark"] = start_spark_for(runtime)
        self.pool = ThreadPoolExecutor(max_workers=len(ex.tasks), thread_name_prefix=f"spark-{ex.component}")
        self.next_reset = ex.clock.monotonic() + self.timeout / 2
        self._follow_attempt(ex.clock.monotonic())

    def _follow_attempt(self, now: float) -> None:
        """Track the handle's current start attempt: the start timeout counts from when this
        executor first saw it, and its completion wakes the executor thread."""
        future = self.spark.future
        if future is not self._attempt:
            self._attempt = future
            self.prepared_at = now
            future.add_done_callback(lambda _f: self.executor.wake())

    def shutdown(self) -> None:
        self.closing = True
        for st in self.states.values():
            if st.running is not None and st.tag:
                self._interrupt(st.tag)
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ executor thread
    def poll(self, now: float) -> int:
        """Each round: the periodic checks, the finished jobs' results, due batches launched."""
        if now >= self.next_periodic and self.spark is not None:
            self._periodic(now)
        work = self._apply_outcomes(self.executor.budget)
        for st in self.states.values():
            if st.running is None and st.batcher.due(now):
                work += self._launch(st, now)
        self.polled = work
        return work

    def intake(self, task: int, queue: deque, budget: int) -> int:
        """Move the task's input tuples into its batch (as many as it has room for)."""
        ex = self.executor
        now = ex.clock.monotonic()
        st = self.states[task]
        batcher = st.batcher
        executed = ex.stats.executed
        if self.batch_input:
            work = self._take_batch_tuples(queue, batcher, budget, now)
        else:
            work = n = min(len(queue), batcher.room(), budget)
            if n > 0:
                pop = queue.popleft
                items = [pop() for _ in range(n)]
                fields = items[0].fields
                if all(t.fields is fields for t in items):  # the common case: one source stream
                    if fields.stream == TICK_STREAM and fields.component == SYSTEM_COMPONENT:
                        items = []
                    else:
                        executed[fields.source_key] += n
                else:
                    items = [t for t in items if not (t.stream == TICK_STREAM and t.is_tick())]
                    for t in items:
                        executed[t.fields.source_key] += 1
                batcher.extend(items, now)
        if st.running is None and batcher.due(now):
            self._launch(st, now)
        if not work and not self.polled:
            self._idle_while_holding()
        return work

    def _take_batch_tuples(self, queue: deque, batcher: Batcher, budget: int, now: float) -> int:
        """Batch streams: move batch tuples into the batch until it holds ``batch.size`` rows."""
        executed = self.executor.stats.executed
        taken = 0
        while queue and taken < budget and batcher.room() > 0:
            tup = queue.popleft()
            taken += 1
            if tup.fields.stream == TICK_STREAM and tup.fields.component == SYSTEM_COMPONENT:
                continue
            executed[tup.fields.source_key] += 1
            batcher.add(tup, now, rows_in(tup.values[0]) if tup.values else 1)
        return taken

    def drop_stale(self, task: int, lo: int, hi: int) -> int:
        """At a ROLLBACK (exactly-once, the checkpoint layer asks): ack and drop the tuples of the
        batch being filled whose roots are not all of the new generation (``lo <= root < hi``), so
        a batch never mixes generations. The batch running on Spark is all older generations (the
        sources re-emit only once every bolt has rolled back): its rows are dropped downstream."""
        st = self.states[task]

        def stale(tup: Any) -> bool:
            return any(not lo <= root < hi for root in tup.message_id or ())

        weight = (lambda t: rows_in(t.values[0]) if t.values else 1) if self.batch_input else (lambda t: 1)
        dropped = st.batcher.discard(stale, weight)
        ack = st.collector.ack
        for tup in dropped:
            ack(tup)
        return len(dropped)

    def input_ready(self) -> bool:
        """Input this executor can take now (not tuples it leaves queued for backpressure)."""
        return any(q and self.states[t].batcher.room() > 0 for t, q in self.executor.queues.items())

    def has_news(self) -> bool:
        return bool(self.outcomes) or self.emitting is not None

    def _idle_while_holding(self) -> None:
        # Tuples left in the input deque (backpressure) make the executor thread think there is
        # work and skip its idle wait; when no other executor of the thread has input either,
        # wait here as the thread would, instead of spinning a core while Spark starts or runs.
        # (A spout of the same thread emits at most one budget per wait meanwhile.)
        me = self.executor
        thread = me.thread
        if thread is None or any(ex.has_work() for ex in thread.executors if ex is not me):
            return
        time.sleep(me.runtime.idle_wait)

    def _periodic(self, now: float) -> None:
        """Every ``PERIOD_SECS`` on the executor thread: time-based launches, hung batches,
        timeout resets of held tuples, Spark status in the stats."""
        self.next_periodic = now + PERIOD_SECS
        extra = self.executor.stats.extra
        spark = self.spark
        if spark.failed() and spark.restart_if_due(self.start_retry):
            self.executor.log.warning("spark-restarting", attempt=spark.attempts)
        self._follow_attempt(now)
        if spark.future.done():
            extra["spark_ready"] = 1.0 if spark.ready() else 0.0
            extra["spark_start_secs"] = round(spark.start_secs or 0.0, 3)
        extra["spark_start_attempts"] = float(spark.attempts)
        for st in self.states.values():
            if st.running is None:
                if st.batcher.due(now):
                    self._launch(st, now)
            elif now - st.started_at > self.batch_timeout:
                self._abandon(st, now)
        extra["spark_held_tuples"] = float(self.pending())
        if self.timeouts_enabled and now >= self.next_reset:
            self.next_reset = now + self.timeout / 2
            if self.pending():
                self._reset_timeouts()

    def pending(self) -> int:
        held = sum(len(st.batcher) + len(st.running or ()) for st in self.states.values())
        if self.emitting is not None:
            held += len(self.emitting.batch)
        return held

    def _reset_timeouts(self) -> None:
        for st in self.states.values():
            for batch in (st.batcher.items, st.running or ()):
                for tup in batch:
                    st.collector.reset_timeout(tup)
        if self.emitting is not None:
            reset = self.emitting.st.collector.reset_timeout
            for tup in self.emitting.batch:
                reset(tup)

    def _launch(self, st: _Task, now: float) -> int:
        """Start the task's due batch on Spark; or fail it if Spark cannot run it."""
        spark = self.spark
        self._follow_attempt(now)
        if not spark.future.done():
            if now - self.prepared_at < self.start_timeout:
                return 0  # Spark is starting: hold the batch (and, once full, stop draining)
            error: BaseException = TimeoutError(
                f"Spark did not start within {self.start_timeout:.0f} s (topology.spark.start.timeout.secs)"
            )
        elif spark.failed():
            error = spark.error
        else:
            st.running_rows = st.batcher.rows
            batch = st.batcher.take()
            st.running = batch
            st.generation += 1
            st.started_at = now
            st.tag = f"gale-{self.executor.component}-{st.task}-{uuid.uuid4().hex[:12]}"
            self.pool.submit(self._job, st, st.generation, st.tag, batch)
            return len(batch)
        batch = st.batcher.take()
        self._fail_batch(st, batch, error, what="Spark is not available")
        return len(batch)

    def _abandon(self, st: _Task, now: float) -> None:
        batch, st.running = st.running, None
        st.generation += 1  # its outcome, if it ever comes, is ignored
        self._interrupt(st.tag)
        self._fail_batch(st, batch, TimeoutError(
            f"batch ran longer than {self.batch_timeout:.0f} s (topology.spark.batch.timeout.secs); interrupted"
        ))

    def _interrupt(self, tag: str) -> None:
        try:
            if self.spark is not None and self.spark.ready():
                self.spark.session.interruptTag(tag)
        except Exception:  # noqa: BLE001 - best effort
            self.executor.log.debug("spark-interrupt-failed", tag=tag)

    # ------------------------------------------------------------------ job thread
    def _job(self, st: _Task, generation: int, tag: str, batch: list) -> None:
        t0 = time.perf_counter()
        result: BatchResult | None = None
        error: str | None = None
        try:
            spark = self.spark.session
            spark.addTag(tag)
            try:
                result = st.bolt.spark_job(spark, batch)
            finally:
                spark.removeTag(tag)
        except BaseException as exc:  # noqa: BLE001 - the batch's outcome
            error = _rendered(exc)  # py4j errors render by asking the JVM: do it while it is up
        self.outcomes.append((st, generation, batch, result, error, (time.perf_counter() - t0) * 1000.0))
        self.executor.wake()

    # ------------------------------------------------------------------ outcomes (executor thread)
    def _apply_outcomes(self, budget: int) -> int:
        work = 0
        edge_budget = max(1024, budget * 8)
        while True:
            if self.emitting is None:
                if not self.outcomes:
                    return work
                st, generation, batch, result, error, latency_ms = self.outcomes.popleft()
                if generation != st.generation or st.running is not batch or self.closing:
                    continue  # abandoned after a timeout (its tuples already failed)
                st.running = None
                self._record_latency(st.running_rows, latency_ms)
                if error is not None:
                    self._fail_batch(st, batch, error)
                    work += len(batch)
                    continue
                self._record_result(st, result)
                self.emitting = _Emitting(st, batch, result)
            spent = self._emit_some(self.emitting, edge_budget)
            work += spent
            if self.emitting is not None:
                return work  # a large result: continue next round
            edge_budget -= spent
            if edge_budget <= 0:
                return work

    def _emit_some(self, em: _Emitting, edge_budget: int) -> int:
        """Emit rows from the cursor until ``edge_budget`` acker edges are spent; ack the batch's
        inputs after its last row. Returns the edges spent."""
        batch, values = em.batch, em.result.values
        anchors = em.result.anchoring.anchors if em.result.anchoring is not None else None
        emit = em.st.collector.emit
        n_in = len(batch)
        spent = 0
        i = em.cursor
        try:
            while i < len(values) and spent < edge_budget:
                anchor = anchors[i] if anchors is not None else None
                if anchor is None:
                    emit(values[i], anchors=batch)
                    spent += n_in
                elif anchor.__class__ is int:
                    emit(values[i], anchors=batch[anchor])
                    spent += 1
                else:
                    emit(values[i], anchors=[batch[j] for j in anchor])
                    spent += len(anchor)
                i += 1
        except Exception as exc:  # noqa: BLE001 - e.g. a value the grouping cannot hash
            self.emitting = None
            self._fail_batch(em.st, batch, exc, what="emitting the batch's output failed")
            return spent + 1
        em.cursor = i
        if i < len(values):
            return spent
        ack = em.st.collector.ack
        for tup in batch:
            ack(tup)
        self.emitting = None
        return spent + n_in

    def _fail_batch(self, st: _Task, batch: list, error: BaseException | str, what: str = "") -> None:
        fail = st.collector.fail
        for tup in batch:
            fail(tup)
        self.executor.stats.extra["spark_batches_failed"] += 1
        what = what or "the Spark batch failed"
        text = error if isinstance(error, str) else _rendered(error)
        if len(text) > MAX_ERROR_CHARS:
            text = text[:MAX_ERROR_CHARS // 2] + "\n...\n" + text[-MAX_ERROR_CHARS // 2:]
        self.executor.report_error(f"component {self.executor.component!r} task {st.task}: {what}; failed its "
                                   f"{len(batch)} tuple(s) (they replay from their spouts):\n{text}")

    def _record_latency(self, n_in: int, latency_ms: float) -> None:
        extra = self.executor.stats.extra
        extra["spark_batches"] += 1
        extra["spark_batch_rows_in"] += n_in
        extra["spark_batch_latency_ms_sum"] += latency_ms
        extra["spark_batch_latency_ms_max"] = max(extra["spark_batch_latency_ms_max"], round(latency_ms, 3))
        extra["spark_batch_latency_ms_avg"] = round(extra["spark_batch_latency_ms_sum"] / extra["spark_batches"], 3)
        extra["spark_batch_size_avg"] = round(extra["spark_batch_rows_in"] / extra["spark_batches"], 3)

    def _record_result(self, st: _Task, result: BatchResult) -> None:
        extra = self.executor.stats.extra
        extra["spark_batch_rows_out"] += len(result.values) if result.rows_out is None else result.rows_out
        extra["spark_sink_rows_written"] += result.written
        extra["spark_sink_rows_deduped"] += result.deduped
        extra["spark_sink_batches_committed"] += result.committed
        lineage = result.lineage
        if lineage is not None and lineage.mode == "batch" and result.values:
            extra["spark_lineage_fallback_batches"] += 1
        if result.anchoring is not None and result.anchoring.fallback_rows:
            extra["spark_lineage_fallback_rows"] += result.anchoring.fallback_rows
            if lineage is not None and lineage.mode not in self.warned:
                self.warned.add(lineage.mode)
                self.executor.log.warning(
                    "spark-lineage-lost", task=st.task, mode=lineage.mode, rows=result.anchoring.fallback_rows,
                    reason=lineage.reason or "some output rows have no resolvable row ids or keys",
                    effect="those rows are anchored to their whole batch (a failure replays the batch)",
                )
