"""Persistent windows (``WindowedBolt.with_persistence()``, Storm's ``withPersistence``): a window
whose buffer is the task's managed state — the window body (``gale.worker.windows.runner``) with the
managed-state layers around it (``gale.worker.state.managed``), and three pieces of glue here:

* :class:`StateWindowStore` — the window store (``gale.worker.windows.store``) over a
  :class:`~gale.topology.state.KeyValueState`: ``put`` → ``state.put(seq, [ts, key, values,
  component, stream, source task])``, ``remove`` → ``state.delete(seq)``, ``set_meta`` → the key
  ``"__meta"``. It keeps the live :class:`Entry` objects in a dict beside the state (the core's indexes
  point at them); built over a restored state it rebuilds them, as tuples without a message id (their
  spout tuples were acked when the checkpoint holding them committed).
* :class:`PersistentWindow` — what the managed state is for (its *target*): loading or reloading the
  state restores the window from it (``WindowRunner.restore``), with the watermark tracker's newest
  timestamp per input task as of the checkpoint, which PREPARE writes into the state.
* :class:`HoldingCollector` and :class:`OutputHolding` — the outputs of a firing are held until the
  next PREPARE, then emitted anchored to that checkpoint tuple: the checkpoint commits only once its
  tuple tree completed, so only once every output of the windows it records as fired was processed
  downstream (and whatever a downstream bolt anchored to them); an output that fails fails the
  checkpoint, which rolls back to the previous one, where those windows had not fired: they fire
  again. A ROLLBACK discards what is held (the windows fire again from the reloaded state). Both
  guarantees alike: under exactly-once a downstream failure therefore rolls the topology back too.

The runner acks every tuple on arrival, which the task's held acks (at-least-once) keep until the
checkpoint holding the tuple commits. The state is per task (``<topology>/<component>/task<I>``)
whatever the input grouping: a window is per task, and its keys are arrival ordinals, not values of
a grouping field, so key groups do not apply.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gale.topology.state import KeyValueState, StateError, pack
from gale.topology.tuple import Fields, Tuple
from gale.worker.runtime.collector import BoltOutputCollector
from gale.worker.state.coordinator import PREPARE, ROLLBACK
from gale.worker.windows.store import Entry

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


class HoldingCollector:
    """The collector a persistent window's bolt gets: while its window fires (:attr:`holding`, set
    by the runner) its emits are held — checked at once, as any emit, and sent at the next PREPARE
    anchored to that checkpoint (:meth:`send_held`); ``emit`` then returns ``[]`` (its targets are
    chosen when it is sent), ``emit_direct`` its task. Everything else is the task's collector's."""

    def __init__(self, collector: BoltOutputCollector):
        self._collector = collector
        self.holding = False
        self.held: list[tuple[int | None, list[Any], str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collector, name)

    def emit(self, values: Any, anchors: Any = None, stream: str = "default") -> list[int]:
        if not self.holding:
            return self._collector.emit(values, anchors, stream)
        self._collector._route(stream, values)  # refused now, in the bolt's execute, as any emit
        self.held.append((None, list(values), stream))
        return []

    def emit_direct(self, task: int, values: Any, anchors: Any = None, stream: str = "default") -> list[int]:
        if not self.holding:
            return self._collector.emit_direct(task, values, anchors, stream)
        c = self._collector
        c._direct_targets(c._route(stream, values), task)
        self.held.append((task, list(values), stream))
        return [task]

    def send_held(self, checkpoint: Tuple) -> None:
        """Emit the held outputs, anchored to the checkpoint tuple about to be forwarded."""
        out, self.held = self.held, []
        c = self._collector
        for task, values, stream in out:
            if task is None:
                c.emit(values, checkpoint, stream)
            else:
                c.emit_direct(task, values, checkpoint, stream)

    def discard_held(self) -> None:
        """A rollback: the windows that made them fire again from the reloaded state."""
        self.held = []


class OutputHolding:
    """The checkpoint participant sending (PREPARE) or discarding (ROLLBACK) what each task's
    :class:`HoldingCollector` holds."""

    name = "held-outputs"

    def __init__(self, executor: Any):
        self.executor = executor
        self.holders: dict[int, HoldingCollector] = {}

    def attach(self) -> None:
        self.executor.layers[self.name] = self
        self.executor.pendings.append(self.pending)

    def holder_for(self, task: int, collector: BoltOutputCollector) -> HoldingCollector:
        holder = self.holders[task] = HoldingCollector(collector)
        return holder

    def act(self, task: int, txid: int, action: str, tup: Any) -> None:
        holder = self.holders[task]
        if action == PREPARE:
            holder.send_held(tup)
        elif action == ROLLBACK:
            holder.discard_held()

    def pending(self) -> int:
        return sum(len(h.held) for h in self.holders.values())


class PersistentWindow:
    """What a persistent window's managed state is for (:class:`~gale.worker.state.managed.ManagedState`'s
    target): the window continues from the loaded state, and again from the reloaded one after a
    rollback."""

    reinit_after_rollback = True

    def __init__(self, runner: Any, fields_of: Any):
        self.runner = runner
        self.fields_of = fields_of

    def init_state(self, state: KeyValueState) -> None:
        latest = {task: ts for task, ts in state.get(INPUTS_KEY) or ()}
        self.runner.restore(StateWindowStore(state, self.fields_of), latest)

    def pre_prepare(self, txid: int) -> None:
        """The watermark tracker's newest timestamp per input task goes into the checkpoint."""
        latest = [[t, ts] for t, ts in sorted(self.runner.latest_timestamps().items())]
        state = self.runner.core.store.state
        if latest and state.get(INPUTS_KEY) != latest:
            state.put(INPUTS_KEY, latest)

    def pre_commit(self, txid: int) -> None:
        pass

    def pre_rollback(self) -> None:
        pass
