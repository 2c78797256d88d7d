"""The Gale components a Bytewax dataflow runs as: one per core step (``gale.bytewax.topology``).

* :class:`FixedInput` / :class:`DynamicInput` — an ``input`` step: spout tasks owning the
  partitions of a ``FixedPartitionedSource`` (partition ``i`` of the sorted list to task ``i % n``;
  ``position()``/``rewind()`` are the partitions' snapshots, so exactly-once can rewind them) or one
  partition of a ``DynamicSource`` per task. Each ``next_batch`` is one tuple per receiving task,
  emitted with a message id (replayed on a failure under at-least-once).
* :class:`Step` — ``flat_map_batch``, ``branch``, ``merge``, ``redistribute``, ``inspect_debug`` and
  ``output`` to a ``DynamicSink``: a batch in, its batches out, anchored to it.
* :class:`Stateful` / :class:`ManagedStateful` — ``stateful_batch``: a logic per key
  (``gale.worker.bytewax.stateful``, or a library operator's equivalent from ``.fast``); notifications
  on the task's 50 ms ticks; with recovery a ``StatefulBolt`` whose key-value state holds each key's
  pickled snapshot, written at each checkpoint for the keys that changed.
* :class:`PartitionedOutput` / :class:`ManagedPartitionedOutput` — ``output`` to a
  ``FixedPartitionedSink``: each task owns the partitions routed to it, and with recovery their
  resume state is in the checkpoint.

The end of a bounded input is a batch of ``None`` from every writing task to every reading task, in
order with the data: a task whose inputs have all ended calls ``on_eof`` (a stateful step), closes its
partitions, tells the run (:class:`~gale.worker.bytewax.monitor.RunMonitor`, when one is in the
worker's resources) and passes the end on. A user function that raises is reported on the component
with its traceback and fails the input tuple (``run_main`` stops the run and raises it instead, as
Bytewax does).
"""

from __future__ import annotations

import pickle
from datetime import datetime, timezone
from typing import Any

from gale.topology.components import Bolt
from gale.topology.state import StatefulBolt
from gale.worker.bytewax import fast
from gale.worker.bytewax.base import FlowComponent
from gale.worker.bytewax.inputs import DynamicInput, FixedInput
from gale.worker.bytewax.routing import KeyOwner, unpack_batch
from gale.worker.bytewax.stateful import KeyedLogics, StepError

__all__ = ["DynamicInput", "FixedInput", "ManagedPartitionedOutput", "ManagedStateful", "PartitionedOutput",
           "Stateful", "Step"]

_UTC = timezone.utc


# ------------------------------------------------------------------------------------------ steps


class _Bolt(FlowComponent):
    """A step reading batches: ``_batch(items, tup)`` per batch, ``_end(tup)`` once every input ended."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self._setup(conf, context)
        self.collector.declare_metrics(["bytewax_ended_tasks"])

    def execute(self, tup):
        payload = tup.values[1]
        try:
            if payload is None:
                self.seen_ends.add((tup.fields.source_key, tup.task))
                if self.seen_ends >= self.expected:
                    if not self.ended:
                        self._end(tup)
                    # passed on at every end that arrives once all have: after a rollback the inputs
                    # send theirs again, and a stateful step downstream waits for them again
                    self._send_ends(tup)
                    self._finished()
            else:
                self._batch(unpack_batch(payload), tup)
        except Exception as exc:  # noqa: BLE001 - reported with its step, the tuple fails
            self._failed(exc)
            raise
        self.collector.ack(tup)

    def _send(self, items: list, anchor: Any, port: str = "down") -> None:
        outlets = self.outlets
        emit = self.collector.emit
        for outlet, idx, batch in outlets.route(items, port):
            emit(outlets.values(outlet, idx, batch), anchors=anchor, stream=outlet.stream)

    def _send_ends(self, anchor: Any) -> None:
        outlets = self.outlets
        for outlet, idx in outlets.ends():
            self.collector.emit(outlets.values(outlet, idx, None), anchors=anchor, stream=outlet.stream)

    def _end(self, tup: Any) -> None:
        """Every input ended (before the end is passed on)."""

    def _batch(self, items: list, tup: Any) -> None:
        raise NotImplementedError


class Step(_Bolt, Bolt):
    """``flat_map_batch``, ``branch``, ``merge``, ``redistribute``, ``inspect_debug``, and ``output``
    to a ``DynamicSink``."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        kind = type(self.op).__name__
        self._batch = getattr(self, f"_{kind}")
        if kind == "flat_map_batch":
            found = fast.batch_function(self.ancestors) if self.config.topology_bytewax_fast_operators else None
            self.mapper = found[0] if found is not None else self.op.mapper
        elif kind == "output":
            try:
                self.sink_part = self.op.sink.build(self.step_id, self.index, self.count)
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error calling `build` in step {self.step_id}") from exc

    def _flat_map_batch(self, items: list, tup: Any) -> None:
        try:
            out = self.mapper(items)
            if out.__class__ is not list:
                out = list(out)
        except Exception as exc:  # noqa: BLE001 - user code
            raise StepError(f"error calling `mapper` in step {self.step_id}") from exc
        self._send(out, tup)

    def _branch(self, items: list, tup: Any) -> None:
        predicate = self.op.predicate
        trues, falses = [], []
        for item in items:
            try:
                res = predicate(item)
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error calling predicate in step {self.step_id}") from exc
            if res is True:
                trues.append(item)
            elif res is False:
                falses.append(item)
            else:
                raise StepError(f"return value of `predicate` in step {self.step_id} must be a `bool`") from \
                    TypeError(f"'{type(res).__name__}' object cannot be converted to 'PyBool'")
        self._send(trues, tup, "trues")
        self._send(falses, tup, "falses")

    def _merge(self, items: list, tup: Any) -> None:
        self._send(items, tup)

    _redistribute = _merge

    def _inspect_debug(self, items: list, tup: Any) -> None:
        inspector, step_id, epoch, worker = self.op.inspector, self.step_id, self.epoch, self.index
        for item in items:
            try:
                inspector(step_id, item, epoch, worker)
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error calling inspector in step {step_id}") from exc
        self._send(items, tup)

    def _output(self, items: list, tup: Any) -> None:
        try:
            self.sink_part.write_batch(items)
        except Exception as exc:  # noqa: BLE001 - user code
            raise StepError(f"error writing output batch in step {self.step_id}") from exc

    def _end(self, tup: Any) -> None:
        if type(self.op).__name__ == "output":
            try:
                self.sink_part.close()
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error closing StatelessSinkPartition in step {self.step_id}") from exc


# ------------------------------------------------------------------------------------------ stateful


class _StatefulStep(_Bolt):
    """``stateful_batch`` (module docstring)."""

    #: managed state: rebuild the logics from the reloaded state after a rollback
    reinit_after_rollback = True

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        engine = None
        if self.config.topology_bytewax_fast_operators:
            engine = fast.keyed_engine(self.step_id, self.ancestors)
        if engine is None:
            from bytewax.operators import StatefulBatchLogic

            engine = KeyedLogics(self.step_id, self.op.builder, StatefulBatchLogic)
        self.engine = engine

    def execute(self, tup):
        if tup.is_tick():
            self._tick()
            return
        super().execute(tup)

    def _tick(self) -> None:
        when = self.engine.next_notify()
        if when is None:
            return
        now = datetime.now(_UTC)
        if when > now:
            return
        try:
            out = self.engine.activate(None, now)
        except Exception as exc:  # noqa: BLE001 - reported; nothing to fail (a tick is no input)
            self._failed(exc)
            raise
        if out:
            self._send(out, None)

    def _batch(self, items: list, tup: Any) -> None:
        engine = self.engine
        out = engine.activate(items, datetime.now(_UTC))
        when = engine.next_notify()
        if when is not None:
            # a notification already due runs now, before the next input (Bytewax activates the step
            # again at once for it)
            now = datetime.now(_UTC)
            if when <= now:
                out.extend(engine.activate(None, now))
        if out:
            self._send(out, tup)

    def _end(self, tup: Any) -> None:
        out = self.engine.activate(None, datetime.now(_UTC), eof=True)
        if out:
            self._send(out, tup)


class Stateful(_StatefulStep, Bolt):
    """``stateful_batch`` without recovery: the logics live in the task's memory."""


class ManagedStateful(_StatefulStep, StatefulBolt):
    """``stateful_batch`` with recovery: each key's snapshot in managed state (module docstring)."""

    def init_state(self, state):
        self.kv = state
        self.engine.restore((key, pickle.loads(value)) for key, value in state)
        self.seen_ends = set()
        self.ended = False

    def pre_prepare(self, txid):
        puts, deletes = self.engine.take_changes()
        kv = self.kv
        for key, snapshot in puts.items():
            kv.put(key, pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL))
        for key in deletes:
            kv.delete(key)


# ------------------------------------------------------------------------------------------ partitioned output


class _PartitionedOutputStep(_Bolt):
    """``output`` to a ``FixedPartitionedSink``: the partitions routed to this task."""

    reinit_after_rollback = True

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.sink = self.op.sink
        try:
            every = sorted(set(self.sink.list_parts()))
        except Exception as exc:  # noqa: BLE001 - user code
            raise StepError(f"error calling `list_parts` in step {self.step_id}") from exc
        # the partitions this task owns: those its writers route here (``Outlet.bind_sink``)
        groups = int(self.config.topology_state_key_groups) if self.config.topology_bytewax_recovery else None
        owner = KeyOwner(self.count, groups)
        self.every = every
        self.keys = [p for p in every if owner(p) == self.index]
        self.parts: dict[str, Any] = {}
        self.written: set[str] = set()

    def _open_parts(self, resume: dict[str, Any]) -> None:
        for part in self.parts.values():
            try:
                part.close()
            except Exception as exc:  # noqa: BLE001 - user code
                self.collector.report_error(exc)
        self.parts = {}
        for key in self.keys:
            try:
                self.parts[key] = self.sink.build_part(self.step_id, key, resume.get(key))
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error calling `build_part` in step {self.step_id} for partition {key!r}") from exc

    def _batch(self, items: list, tup: Any) -> None:
        if not self.parts and self.keys:
            self._open_parts({})
        every, part_fn = self.every, self.sink.part_fn
        by_part: dict[str, list] = {}
        for key, value in items:
            name = every[part_fn(key) % len(every)]
            by_part.setdefault(name, []).append(value)
        for name, values in by_part.items():
            try:
                self.parts[name].write_batch(values)
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error writing output batch in step {self.step_id}") from exc
            self.written.add(name)

    def _end(self, tup: Any) -> None:
        for name, part in self.parts.items():
            try:
                part.close()
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error closing StatefulSinkPartition in step {self.step_id}") from exc
        self.parts = {}


class PartitionedOutput(_PartitionedOutputStep, Bolt):
    """``output`` to a ``FixedPartitionedSink`` without recovery."""


class ManagedPartitionedOutput(_PartitionedOutputStep, StatefulBolt):
    """``output`` to a ``FixedPartitionedSink`` with recovery: each partition's resume state in the checkpoint."""

    def init_state(self, state):
        self.kv = state
        self._open_parts({key: pickle.loads(value) for key, value in state})
        self.written = set()
        self.seen_ends = set()
        self.ended = False

    def pre_prepare(self, txid):
        for name in self.written:
            part = self.parts.get(name)
            if part is not None:
                try:
                    snap = part.snapshot()
                except Exception as exc:  # noqa: BLE001 - user code
                    raise StepError(f"error calling `snapshot` in step {self.step_id} for partition {name!r}") from exc
                self.kv.put(name, pickle.dumps(snap, protocol=pickle.HIGHEST_PROTOCOL))
        self.written = set()
