"""Persistent windows (``WindowedBolt.with_persistence()``, Storm's ``withPersistence``): a window
whose buffer is the task's managed state.

:class:`StateWindowStore` is the window store (``gale.worker.runtime.windows.store``) over a
:class:`~gale.topology.state.KeyValueState`: ``put`` → ``state.put(seq, [ts, key, values, component,
stream, source task])``, ``remove`` → ``state.delete(seq)``, ``set_meta`` → the key ``"__meta"``. It
keeps the live :class:`Entry` objects in a dict beside the state (the core's indexes point at them);
built over a restored state it rebuilds them, as tuples without a message id (their spout tuples
were acked when the checkpoint holding them committed).

:class:`PersistentWindowedBoltExecutor` is a :class:`StatefulBoltExecutor` whose tasks run a
:class:`WindowRunner` in persistent mode: tuples are held until INITSTATE, which loads the task's
state and restores the window core from it (``core.restore()``); the runner acks every tuple on
arrival, which the deferring collector holds until the checkpoint holding it commits; the outputs
of a window are held until the next PREPARE and sent anchored to it (:class:`WindowOutputCollector`);
a ROLLBACK reloads the committed state and restores the core again (the inputs since then fail and
replay). :class:`ExactlyOnceWindowedBoltExecutor` is its exactly-once variant.
The state is per task (``<topology>/<component>/task<I>``) whatever the input grouping: a window is
per task, and its keys are arrival ordinals, not values of a grouping field, so key groups do not
apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gale.topology.checkpointing import data_inputs
from gale.topology.state import KeyValueState, StateError, pack
from gale.topology.tuple import Fields, Tuple
from gale.topology.windowing import WindowSpec, check_limits
from gale.worker.runtime.windows.executor import METRICS, WindowRunner, make_core
from gale.worker.runtime.windows.store import Entry, InMemoryWindowStore
from gale.worker.runtime.windows.watermark import WatermarkTracker
from gale.worker.state.coordinator import PREPARE, ROLLBACK
from gale.worker.state.exactly_once import ExactlyOnceBoltExecutor
from gale.worker.state.executor import DeferringCollector, StatefulBoltExecutor
from gale.worker.state.task_state import TaskState

META_KEY = "__meta"
INPUTS_KEY = "__inputs"  # the watermark tracker's newest timestamp per input task, at the last checkpoint


def _serializable(value: Any) -> bool:
    try:
        pack(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


class StateWindowStore:
    def __init__(self, state: KeyValueState, fields_of: Any):
        """``fields_of(component, stream)``: the :class:`Fields` of a source stream (to rebuild
        restored tuples)."""
        self.state = state
        self._entries: dict[int, Entry] = {}
        self._meta: dict[str, Any] = {}
        restored = []
        for k, v in state:
            if k == META_KEY:
                self._meta = v
            elif isinstance(k, int):
                ts, key, values, component, stream, task = v
                if isinstance(key, list):  # msgpack gives arrays back as lists: keys must be hashable
                    key = tuple(key)
                fields: Fields = fields_of(component, stream)
                restored.append(Entry(k, ts, Tuple(values, fields, component, stream, task), key))
        for e in sorted(restored, key=lambda e: e.seq):
            self._entries[e.seq] = e

    def put(self, entry: Entry) -> None:
        t = entry.item
        try:
            self.state.put(entry.seq, [entry.ts, entry.key, list(t.values), t.fields.component, t.fields.stream,
                                       t.task])
        except StateError as exc:
            bad = [f"{name}: {type(v).__qualname__}" for name, v in zip(t.fields.names, t.values)
                   if not _serializable(v)]
            raise StateError(
                f"a tuple from {t.fields.source_key} cannot be kept in a persistent window (with_persistence()): "
                f"its values must be serializable by the state (None, bool, int, float, str, bytes, lists, tuples "
                f"and dicts of those); not: {', '.join(bad) or exc}") from None
        self._entries[entry.seq] = entry

    def remove(self, entries: Iterable[Entry]) -> None:
        pop, delete = self._entries.pop, self.state.delete
        for e in entries:
            if pop(e.seq, None) is not None:
                delete(e.seq)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def set_meta(self, meta: dict[str, Any]) -> None:
        if meta != self._meta:
            self.state.put(META_KEY, meta)
            self._meta = dict(meta)

    def meta(self) -> dict[str, Any]:
        return dict(self._meta)

    def __len__(self) -> int:
        return len(self._entries)


class WindowOutputCollector(DeferringCollector):
    """The collector of a persistent window's task (at-least-once): inputs' acks held until their
    checkpoint commits (:class:`DeferringCollector`), and the outputs of ``execute(window)`` held
    until the next PREPARE, then emitted anchored to that checkpoint tuple. The checkpoint commits
    only once its tuple tree completed, so only once every output of the windows it records as
    fired was processed downstream (and whatever a downstream bolt anchored to them); an output that
    fails fails the checkpoint, which rolls back to the previous one, where those windows had not
    fired: they fire again. ``emit`` returns ``[]`` for a held output (its targets are chosen when
    it is sent); ``emit_direct`` its task."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.holding = False
        self.held_outputs: list[tuple[int | None, list[Any], str]] = []

    def emit(self, values: Any, anchors: Any = None, stream: str = "default") -> list[int]:
        if not self.holding:
            return super().emit(values, anchors, stream)
        self._route(stream, values)  # refused now, in the bolt's execute, as any emit
        self.held_outputs.append((None, list(values), stream))
        return []

    def emit_direct(self, task: int, values: Any, anchors: Any = None, stream: str = "default") -> list[int]:
        if not self.holding:
            return super().emit_direct(task, values, anchors, stream)
        self._direct_targets(self._route(stream, values), task)
        self.held_outputs.append((task, list(values), stream))
        return [task]

    def send_held(self, checkpoint: Tuple) -> None:
        """Emit the held outputs, anchored to the checkpoint tuple about to be forwarded."""
        out, self.held_outputs = self.held_outputs, []
        for task, values, stream in out:
            if task is None:
                super().emit(values, checkpoint, stream)
            else:
                super().emit_direct(task, values, checkpoint, stream)

    def discard_held(self) -> None:
        """A rollback: the windows that made them fire again from the reloaded state."""
        self.held_outputs = []


class PersistentRunner(WindowRunner):
    """A :class:`WindowRunner` over managed state; the stateful executor calls the hooks of a
    stateful bolt on it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.restores = 0  # INITSTATE, then each ROLLBACK

    def init_state(self, state: KeyValueState) -> None:
        """The task's state was loaded (INITSTATE) or reloaded (ROLLBACK): the window continues from it."""
        store = StateWindowStore(state, self.executor.fields_of)
        self.core = make_core(self.spec, store)
        if len(store) or store.meta():
            self.core.restore()
        self.seq = self.core.next_seq()
        self.reset_mark = self.seq
        if self.tracker is not None:
            # the newest timestamp per input task as of the checkpoint, not as of now: the inputs
            # since then are replayed (or, exactly-once, read again after the rewind), and a watermark
            # ahead of them would make them late (the core's restored watermark keeps it from going back)
            tracker = WatermarkTracker(list(self.tracker.latest), self.spec.lag_ms, self.spec.idle_timeout_ms,
                                       self._mono_ms())
            for task, ts in state.get(INPUTS_KEY) or ():
                if task in tracker.latest:
                    tracker.latest[task] = ts
            self.tracker = tracker
        self.restores += 1

    def _fire(self, fire: Any) -> None:
        collector = self.collector
        if not isinstance(collector, WindowOutputCollector):  # exactly-once: emitted at once
            return super()._fire(fire)
        collector.holding = True
        try:
            super()._fire(fire)
        finally:
            collector.holding = False

    def pre_prepare(self, txid: int) -> None:
        """The watermark tracker's newest timestamp per input task goes into the checkpoint."""
        if self.tracker is not None:
            latest = [[t, ts] for t, ts in sorted(self.tracker.latest.items()) if ts is not None]
            state = self.core.store.state
            if latest and state.get(INPUTS_KEY) != latest:
                state.put(INPUTS_KEY, latest)

    def pre_commit(self, txid: int) -> None:
        pass

    def pre_rollback(self) -> None:
        pass


class PersistentWindowedBoltExecutor(StatefulBoltExecutor):
    collector_class = WindowOutputCollector
    _checkpoint: Tuple | None = None

    def prepare(self) -> None:
        runtime = self.runtime
        routes = runtime.routes_for(self.component)
        provider = runtime.resources["state"]
        inputs = data_inputs(runtime.defn, self.component)
        input_tasks = sorted({t for inp in inputs for t in runtime.layout.component_tasks(inp.component)})
        all_tasks = runtime.layout.component_tasks(self.component)
        where = f"windowed bolt {self.component!r}"
        for task in self.tasks:
            # per-task state whatever the grouping (see the module docstring)
            self.states[task] = TaskState(provider, runtime.state_prefix, self.component, all_tasks.index(task),
                                          len(all_tasks), None)
            bolt = runtime.instantiate(self.component)
            collector = self.collector_class(self, task, routes)
            conf = runtime.task_conf(self.component)
            spec = WindowSpec.from_conf(conf, where=where)
            check_limits(spec, conf, where)
            runner = PersistentRunner(self, bolt, collector, spec, input_tasks, InMemoryWindowStore(), conf)
            self.bolts[task] = runner
            self.collectors[task] = collector
            self.basic[task] = False
            collector.declare_metrics(METRICS)
            bolt.prepare(conf, self.context(task), collector)
        self.stats.extra.setdefault("state_bytes_written", 0)
        self.stats.extra.setdefault("state_checkpoint_failures", 0)
        self.stats.extra.setdefault("state_keys_max", 0)

    def fields_of(self, component: str, stream: str) -> Fields:
        return self.runtime._stream_fields[(component, stream)]

    def on_checkpoint(self, task: int, tup: Tuple) -> None:
        self._checkpoint = tup  # the anchor of the outputs released at PREPARE
        try:
            super().on_checkpoint(task, tup)
        finally:
            self._checkpoint = None

    def act(self, task: int, txid: int, action: str) -> None:
        ready = self.initialized[task]
        super().act(task, txid, action)
        collector = self.collectors[task]
        if action == PREPARE:
            collector.send_held(self._checkpoint)  # type: ignore[attr-defined]
        elif action == ROLLBACK:
            collector.discard_held()  # type: ignore[attr-defined]
            if ready:  # the state went back to the last commit: so does the window
                self.bolts[task].init_state(self.states[task].kv)

    def on_timer(self, now: float) -> None:
        super().on_timer(now)
        for task, runner in self.bolts.items():
            if self.initialized[task]:
                runner.on_timer()

    def pending_count(self) -> int:
        return super().pending_count() + sum(len(r.core) for r in self.bolts.values())


class ExactlyOnceWindowedBoltExecutor(ExactlyOnceBoltExecutor, PersistentWindowedBoltExecutor):
    """A persistent window in an exactly-once topology: the window's buffer and metadata are in the
    checkpoint like any managed state; inputs are acked on arrival (at once: no held acks), inputs
    of an older generation are dropped, and a ROLLBACK reloads the window from the last checkpoint.

    Its outputs are not anchored (the inputs' trees are already complete), yet they stay consistent
    with the checkpoints: this executor forwards each ``$checkpoint`` action after everything it
    emitted before it, and a stateful task downstream acts on an action only once it has arrived on
    all its inputs, so an output emitted before the window's PREPARE is in the downstream state's
    checkpoint too, and one emitted before a ROLLBACK is rolled back with it. An output emitted
    from a timer (processing time, or a watermark interval) belongs to the generation the task is in."""

    def act(self, task: int, txid: int, action: str) -> None:
        ready = self.initialized[task]
        ExactlyOnceBoltExecutor.act(self, task, txid, action)
        if action == ROLLBACK and ready:  # the state went back to the last commit: so does the window
            self.bolts[task].init_state(self.states[task].kv)

    def pending_count(self) -> int:
        return ExactlyOnceBoltExecutor.pending_count(self) + sum(len(r.core) for r in self.bolts.values())
