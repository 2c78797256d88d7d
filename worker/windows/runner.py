"""The body of a windowed bolt: the thin shell around a window core per task.

Storm's ``WindowedBoltExecutor`` wraps the user's bolt; here each task's bolt is wrapped by a
:class:`WindowRunner` that the executor core's hot loop (:meth:`BoltExecutor.run_task
<gale.worker.runtime.executor.BoltExecutor.run_task>`) calls like a bolt (``execute(tuple)``), so the
hot loop, stats and error handling are the core's own; :class:`WindowBody` puts the runners there.
The runner:

* gives every input tuple a timestamp (its timestamp field or extractor — event time — or the
  arrival time in epoch ms — processing time), feeds the watermark tracker and the core;
* on the executor's timer (every ``timer_period``): processing time advances the core to the clock;
  event time computes the watermark every ``topology.bolts.watermark.event.interval.ms``;
* performs the core's actions in order: ``Fire`` → ``execute(window)`` (a ``TupleWindow``
  with the bounds an update ``replaces``) with every emit anchored to
  all the window's tuples (to one tuple per spout tuple of the window: :func:`covering_anchors`; an
  exception is reported and fails those tuples, so their spout tuples replay); ``Expire`` → ack; ``Late`` → count ``late_tuples``, emit on the late-tuple stream (anchored)
  when there is one, ack.

A window whose buffer outlives the task (``with_persistence()``) is the same runner over another
store: the managed-state layer (``gale.worker.state.windows``) hands it the task's state as its
store (:meth:`WindowRunner.restore`) at every (re)initialization, holds its outputs until the next
checkpoint and its inputs' acks until their checkpoint commits. The runner itself only acks every
tuple on arrival and does not anchor outputs to them (their trees are the checkpoints' then).
"""

from __future__ import annotations

from typing import Any

from gale.errors import ConfigError
from gale.topology.checkpointing import data_inputs
from gale.topology.tuple import Tuple
from gale.topology.windowing import TupleWindow, WindowSpec, check_limits
from gale.worker.runtime.collector import BoltOutputCollector
from gale.worker.runtime.bolt import BoltExecutor
from gale.worker.windows.core import CountWindows, Expire, Fire, Late, SessionWindows, TimeWindows
from gale.worker.windows.mixed import CountEveryDuration, DurationEveryCount
from gale.worker.windows.store import Entry, InMemoryWindowStore, WindowStore
from gale.worker.windows.watermark import WatermarkTracker

#: the component counters a windowed bolt shows (stats, nimbus status, /metrics)
METRICS = ("late_tuples", "windows_fired", "window_updates", "window_timeout_resets")


def make_core(spec: WindowSpec, store: WindowStore) -> Any:
    if spec.kind == "time":
        return TimeWindows(spec.length_ms, spec.slide_ms, spec.allowed_lateness_ms, store)  # type: ignore[arg-type]
    if spec.kind == "session":
        return SessionWindows(spec.session_gap_ms, spec.allowed_lateness_ms, store)  # type: ignore[arg-type]
    if spec.kind == "count_every_duration":
        return CountEveryDuration(spec.length_count, spec.slide_ms, spec.event_time, store)  # type: ignore[arg-type]
    if spec.kind == "duration_every_count":
        return DurationEveryCount(spec.length_ms, spec.slide_count, spec.event_time, store)  # type: ignore[arg-type]
    return CountWindows(spec.length_count, spec.slide_count, spec.event_time, store)  # type: ignore[arg-type]


def covering_anchors(tuples: list[Tuple]) -> list[Tuple]:
    """The tuples to anchor a window's outputs to: the first tuple of the window carrying each spout
    tuple (root) of it. Acking and failing are per root, so an output anchored to these is in the
    tuple tree of every root of the window — exactly as if anchored to every tuple of it — at the
    cost of one edge per distinct root instead of one per tuple (the words of one sentence share a
    root). Untracked tuples add nothing."""
    covered: set[int] = set()
    out: list[Tuple] = []
    for t in tuples:
        ids = t.message_id
        if ids and not covered.issuperset(ids):
            out.append(t)
            covered.update(ids)
    return out


class WindowRunner:
    """One task's window: looks like a bolt to the executor loop."""

    def __init__(self, executor: BoltExecutor, bolt: Any, collector: BoltOutputCollector, spec: WindowSpec,
                 input_tasks: list[int], store: WindowStore | None = None, holder: Any = None):
        self.executor = executor
        self.bolt = bolt
        self.collector = collector
        #: what holds the outputs of a firing until the next checkpoint (a persistent window's), or None
        self.holder = holder
        self.spec = spec
        self.clock = executor.clock
        self.core = make_core(spec, store if store is not None else InMemoryWindowStore())
        self.seq = 0
        if len(self.core.store) or self.core.store.meta():  # a store that outlived the last task (managed state)
            self.core.restore()
            self.seq = self.core.next_seq()
        self.restores = 0  # times restore() continued the window from a store
        self.component = executor.component
        self.event_time = spec.event_time
        self.extractor = getattr(bolt, "timestamp_extractor", None) if spec.timestamp_extractor else None
        if spec.timestamp_extractor and self.extractor is None:
            raise ConfigError(f"windowed bolt {self.component!r}: with_timestamp_extractor was configured but the "
                              "bolt has no timestamp_extractor (call it in __init__)")
        self.field = spec.timestamp_field
        self.key_field = spec.session_key_field
        self.late_stream = spec.late_stream
        self.tracker = WatermarkTracker(input_tasks, spec.lag_ms, spec.idle_timeout_ms, self._mono_ms()) \
            if self.event_time else None
        self.next_watermark = self._mono_ms() + spec.watermark_interval_ms
        # every quarter of the message timeout, the tuples buffered since before the previous round
        # (so at most half the timeout old) get their timeout reset
        config = executor.config
        #: with_persistence(): the store is the task's managed state; a tuple is acked on arrival,
        #: which the executor's collector holds until the checkpoint holding the tuple commits;
        #: outputs are not anchored to the window's tuples (their acks are already on their way)
        self.persistent = bool(config.topology_bolts_window_persistent)
        timeouts = config.topology_enable_message_timeouts and executor.runtime.acking and not self.persistent
        self.reset_every_ms = config.topology_message_timeout_secs * 250.0 if timeouts else None
        self.next_reset = self._mono_ms() + (self.reset_every_ms or 0)
        self.reset_mark = self.seq  # entries below this arrived before the last round

    def _mono_ms(self) -> float:
        return self.clock.monotonic() * 1000.0

    def _timestamp(self, tup: Tuple) -> int:
        try:
            ts = self.extractor(tup) if self.extractor is not None else tup[self.field]  # type: ignore[index]
        except Exception as exc:
            what = "timestamp extractor" if self.extractor is not None else f"timestamp field {self.field!r}"
            raise ValueError(f"windowed bolt {self.component!r}: {what} failed on a tuple from "
                             f"{tup.fields.source_key}: {type(exc).__name__}: {exc}") from exc
        if isinstance(ts, bool) or not isinstance(ts, (int, float)):
            raise ValueError(f"windowed bolt {self.component!r}: the timestamp of a tuple from {tup.fields.source_key} "
                             f"is {ts!r}; expected epoch milliseconds (an integer)")
        return int(ts)

    # --- what the executor loop calls
    def execute(self, tup: Tuple) -> None:
        if tup.task == -1:  # tick tuples are not windowed
            return
        if self.event_time:
            ts = self._timestamp(tup)
            self.tracker.observe(tup.task, ts, self._mono_ms())  # type: ignore[union-attr]
        else:
            ts = int(self.clock.time() * 1000)
            w = self.core.watermark
            if w is not None and ts < w:
                ts = w  # the wall clock stepped back: never make a tuple late in processing time
        key = tup[self.key_field] if self.key_field is not None else None
        entry = Entry(self.seq, ts, tup, key)
        self.seq += 1
        actions = self.core.add(entry)
        if actions:
            self.perform(actions)
        if self.persistent:
            self.collector.ack(tup)

    def on_timer(self) -> None:
        if self.reset_every_ms is not None and self._mono_ms() >= self.next_reset:
            self.reset_timeouts()
        if self.event_time:
            now = self._mono_ms()
            if now < self.next_watermark:
                return
            self.next_watermark = now + self.spec.watermark_interval_ms
            w = self.tracker.compute(now)  # type: ignore[union-attr]
            if w is None:
                return
        else:
            if self.spec.kind in ("count", "duration_every_count"):  # these fire on arrivals
                return
            w = int(self.clock.time() * 1000)
        actions = self.core.advance(w)
        if actions:
            self.perform(actions)

    def reset_timeouts(self) -> None:
        """Restart the timeout of every tuple buffered since before the last round (at most half a
        message timeout old): a session longer than the timeout, or a watermark held back by a slow
        input, keeps its tuples without their spouts replaying them."""
        mark = self.reset_mark
        reset = self.collector.reset_timeout
        n = 0
        for e in self.core.buffered():
            if e.seq < mark:
                reset(e.item)
                n += 1
        if n:
            self.collector.incr_metric("window_timeout_resets", n)
        self.reset_mark = self.seq
        self.next_reset = self._mono_ms() + self.reset_every_ms  # type: ignore[operator]

    def cleanup(self) -> None:
        self.bolt.cleanup()

    # --- a window that continues from a store (managed state: its load, or a rollback's reload)
    def restore(self, store: WindowStore, latest: dict[int, int] | None = None) -> None:
        """Continue from ``store`` (its entries and the core's metadata). ``latest``: the newest
        timestamp per input task as of the store (event time), which the watermark tracker restarts
        from: the inputs since then come again (a replay, or a rewind), and a watermark ahead of
        them would make them late (the core's restored watermark keeps it from going back)."""
        self.core = make_core(self.spec, store)
        if len(store) or store.meta():
            self.core.restore()
        self.seq = self.core.next_seq()
        self.reset_mark = self.seq
        if self.tracker is not None:
            tracker = WatermarkTracker(list(self.tracker.latest), self.spec.lag_ms, self.spec.idle_timeout_ms,
                                       self._mono_ms())
            for task, ts in (latest or {}).items():
                if task in tracker.latest:
                    tracker.latest[task] = ts
            self.tracker = tracker
        self.restores += 1

    def latest_timestamps(self) -> dict[int, int]:
        """The watermark tracker's newest timestamp per input task (event time; {} otherwise)."""
        if self.tracker is None:
            return {}
        return {t: ts for t, ts in self.tracker.latest.items() if ts is not None}

    # --- performing the core's actions
    def perform(self, actions: list[Any]) -> None:
        collector = self.collector
        for action in actions:
            if action.__class__ is Fire:
                self._fire(action)
            elif action.__class__ is Expire:
                if self.persistent:
                    continue  # acked on arrival (held until its checkpoint commits)
                ack = collector.ack
                for e in action.entries:
                    ack(e.item)
            elif action.__class__ is Late:
                tup = action.entry.item
                collector.incr_metric("late_tuples")
                if self.late_stream is not None:
                    collector.emit([list(tup.values)], anchors=tup, stream=self.late_stream)
                collector.ack(tup)

    def _fire(self, fire: Fire) -> None:
        holder = self.holder
        if holder is not None:
            holder.holding = True
        try:
            self._run_window(fire)
        finally:
            if holder is not None:
                holder.holding = False

    def _run_window(self, fire: Fire) -> None:
        tuples = [e.item for e in fire.entries]
        anchors = None if self.persistent else covering_anchors(tuples)
        window = TupleWindow(tuples, [e.item for e in fire.new], [e.item for e in fire.expired],
                             fire.start, fire.end, fire.key, fire.update, fire.replaces)
        collector = self.collector
        executor = self.executor
        collector.incr_metric("window_updates" if fire.update else "windows_fired")
        previous = collector.auto_anchor
        collector.auto_anchor = anchors  # type: ignore[assignment]  # every emit anchored to the window
        executor.enter_call()
        try:
            self.bolt.execute(window)
        except Exception as exc:  # noqa: BLE001 - user code: report, and replay the window's tuples
            executor.report_error(exc)
            if not self.persistent:  # a persistent window's tuples are acked with their checkpoint
                for t in tuples:
                    collector.fail(t)
        finally:
            executor.leave_call()
            collector.auto_anchor = previous


class WindowBody:
    """The body of a windowed bolt's executor: a :class:`WindowRunner` per task where the core's
    hot loop calls ``execute``, its timer on the executor's, its buffered tuples as the executor's
    pending. ``store_for(task, spec)`` gives a task's store (default: in memory);
    ``holder_for(task, collector)`` the collector the user's bolt gets (one that holds outputs);
    ``ready(task)``: whether the task's window runs yet (a persistent one waits for its state)."""

    name = "window"

    def __init__(self, executor: BoltExecutor, store_for: Any = None, holder_for: Any = None, ready: Any = None):
        self.executor = executor
        self.store_for = store_for
        self.holder_for = holder_for
        self.ready = ready

    def attach(self) -> None:
        ex = self.executor
        ex.use_body(self, prepare=self.prepare, close=[ex.cleanup_tasks], timer=self.on_timer, pending=self.pending)

    def prepare(self) -> None:
        ex = self.executor
        runtime = ex.runtime
        # the data inputs: not the $checkpoint subscriptions of a topology with checkpoints (the
        # checkpoint spout sends no data and would hold the watermark back until its idle timeout)
        inputs = data_inputs(runtime.defn, ex.component)
        input_tasks = sorted({t for inp in inputs for t in runtime.layout.component_tasks(inp.component)})
        where = f"windowed bolt {ex.component!r}"
        spec = WindowSpec.from_conf(ex.config, where=where)
        check_limits(spec, ex.config, where)

        def runner(task: int, bolt: Any, collector: BoltOutputCollector, given: Any) -> WindowRunner:
            store = self.store_for(task, spec) if self.store_for is not None else InMemoryWindowStore()
            collector.declare_metrics(METRICS)
            return WindowRunner(ex, bolt, collector, spec, input_tasks, store,
                                holder=given if given is not collector else None)

        ex.prepare_tasks(make=runner, collector_for=self.holder_for)

    def on_timer(self, now: float) -> None:
        ready = self.ready
        for task, runner in self.executor.bolts.items():
            if ready is None or ready(task):
                runner.on_timer()

    def pending(self) -> int:
        """Tuples buffered in this executor's windows (shown as the executor's pending)."""
        return sum(len(r.core) for r in self.executor.bolts.values())
