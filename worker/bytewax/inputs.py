"""The ``input`` step of a Bytewax dataflow as spouts (``gale.worker.bytewax.components``): a
``FixedPartitionedSource``'s partitions over the tasks, with ``position()``/``rewind()`` from their
snapshots (exactly-once can rewind them), or a ``DynamicSource``'s partition per task."""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta, timezone
from typing import Any

from bytewax.inputs import AbortExecution

from gale.topology.components import Spout
from gale.worker.bytewax.base import FlowComponent
from gale.worker.bytewax.stateful import StepError

_UTC = timezone.utc
_ONE_MS = timedelta(milliseconds=1)


class _Input(FlowComponent, Spout):
    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self._setup(conf, context)
        self.source = self.op.source
        self.seq = 0
        #: message id → (outlet index, task index, items): what a failure replays
        self.pending: dict[int, tuple[int, int, list | None]] = {}
        self.aborted = False
        self.collector.declare_metrics(["bytewax_ended_tasks"])

    def _emit(self, items: list) -> None:
        outlets = self.outlets
        emit = self.collector.emit
        for outlet, idx, batch in outlets.route(items):
            values = outlets.values(outlet, idx, batch)  # (what cannot be pickled fails here, nothing pending)
            self.seq += 1
            self.pending[self.seq] = (outlet.i, idx, batch)
            emit(values, msg_id=self.seq, stream=outlet.stream)

    def _emit_ends(self) -> None:
        outlets = self.outlets
        for outlet, idx in outlets.ends():
            self.seq += 1
            self.pending[self.seq] = (outlet.i, idx, None)
            self.collector.emit(outlets.values(outlet, idx, None), msg_id=self.seq, stream=outlet.stream)
        self._finished()

    def ack(self, msg_id):
        self.pending.pop(msg_id, None)

    def fail(self, msg_id):
        """At least once: the same batch again (exactly-once rewinds instead; never called then)."""
        entry = self.pending.get(msg_id)
        if entry is not None:
            i, idx, batch = entry
            outlet = self.outlets.all[i]
            self.collector.emit(self.outlets.values(outlet, idx, batch), msg_id=msg_id, stream=outlet.stream)

    def _next(self, part: Any) -> list | None:
        """One ``next_batch`` of a partition: its items, or None at its end (raises on abort)."""
        try:
            batch = part.next_batch()
        except StopIteration:
            return None
        except Exception as exc:  # noqa: BLE001 - user code (AbortExecution is handled by the caller)
            if isinstance(exc, AbortExecution):
                raise
            self._failed(exc)
            raise StepError(f"error calling `next_batch` in step {self.step_id}") from exc
        return batch if batch.__class__ is list else list(batch)

    def _abort(self) -> None:
        self.aborted = True
        if self.monitor is not None:
            self.monitor.aborted(self.step_id, self.task_id)


class _Partition:
    """A partition of a source in a task: when it may be asked next, its last snapshot when ended."""

    __slots__ = ("key", "part", "awake", "ended", "final")

    def __init__(self, key: str, part: Any):
        self.key = key
        self.part = part
        self.awake: datetime | None = None
        self.ended = False
        self.final: Any = None


class FixedInput(_Input):
    """An ``input`` of a ``FixedPartitionedSource`` (module docstring)."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        try:
            every = sorted(set(self.source.list_parts()))
        except Exception as exc:  # noqa: BLE001 - user code
            self._failed(exc)
            raise StepError(f"error calling `list_parts` in step {self.step_id}") from exc
        self.keys = [p for i, p in enumerate(every) if i % self.count == self.index]
        self.resume: dict[str, Any] = {}
        self.parts: list[_Partition] | None = None  # built at the first next_tuple (after a rewind)
        self.turn = 0

    def _build(self) -> None:
        self.parts = []
        for key in self.keys:
            resume = self.resume.get(key)
            try:
                part = self.source.build_part(self.step_id, key, resume)
            except Exception as exc:  # noqa: BLE001 - user code
                self._failed(exc)
                raise StepError(f"error calling `build_part` in step {self.step_id} for partition {key!r}") from exc
            p = _Partition(key, part)
            p.awake = self._awake(p, None)
            self.parts.append(p)
        if not self.parts:
            self._emit_ends()

    def _awake(self, p: _Partition, got: list | None) -> datetime | None:
        at = p.part.next_awake()
        if at is None and got is not None and not got:
            at = datetime.now(_UTC) + _ONE_MS
        return at

    def next_tuple(self):
        if self.aborted or (self.monitor is not None and self.monitor.halted):
            return
        if self.parts is None:
            self._build()
        live = [p for p in self.parts if not p.ended]
        if not live:
            return
        now = None
        for _ in range(len(live)):
            p = live[self.turn % len(live)]
            self.turn += 1
            if p.awake is not None:
                now = now or datetime.now(_UTC)
                if p.awake > now:
                    continue
            try:
                batch = self._next(p.part)
            except AbortExecution:
                self._abort()
                return
            if batch is None:
                self._end(p)
                if all(q.ended for q in self.parts):
                    self._emit_ends()
                return
            p.awake = self._awake(p, batch)
            if batch:
                self._emit(batch)
            return

    def _end(self, p: _Partition) -> None:
        p.final = self._snapshot(p)
        p.ended = True
        try:
            p.part.close()
        except Exception as exc:  # noqa: BLE001 - user code
            self._failed(exc)
            raise StepError(f"error calling `close` in step {self.step_id} for partition {p.key!r}") from exc

    def _snapshot(self, p: _Partition) -> Any:
        try:
            return p.part.snapshot()
        except Exception as exc:  # noqa: BLE001 - user code
            self._failed(exc)
            raise StepError(f"error calling `snapshot` in step {self.step_id} for partition {p.key!r}") from exc

    def position(self):
        """Each partition's snapshot (pickled): where it resumes."""
        out = {}
        for key in self.keys:
            if self.parts is None:
                state = self.resume.get(key)
            else:
                p = next(q for q in self.parts if q.key == key)
                state = p.final if p.ended else self._snapshot(p)
            out[key] = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        return out

    def rewind(self, position):
        """Back to ``position`` (None: the start): the partitions are built again from it."""
        for p in self.parts or ():
            if not p.ended:
                try:
                    p.part.close()
                except Exception as exc:  # noqa: BLE001 - user code
                    self.collector.report_error(exc)
        self.resume = {k: pickle.loads(v) for k, v in (position or {}).items() if k in self.keys}
        self.parts = None
        self.pending.clear()
        self.ended = False

    def close(self):
        for p in self.parts or ():
            if not p.ended:
                try:
                    p.part.close()
                except Exception:  # noqa: BLE001 - a stopping task: nothing to fail
                    pass


class DynamicInput(_Input):
    """An ``input`` of a ``DynamicSource``: one partition per task (it cannot rewind)."""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        try:
            self.part = self.source.build(self.step_id, self.index, self.count)
        except Exception as exc:  # noqa: BLE001 - user code
            self._failed(exc)
            raise StepError(f"error calling `build` in step {self.step_id}") from exc
        self.awake = self.part.next_awake()
        self.done = False

    def next_tuple(self):
        if self.done or self.aborted or (self.monitor is not None and self.monitor.halted):
            return
        if self.awake is not None and self.awake > datetime.now(_UTC):
            return
        try:
            batch = self._next(self.part)
        except AbortExecution:
            self._abort()
            return
        if batch is None:
            self.done = True
            self.part.close()
            self._emit_ends()
            return
        at = self.part.next_awake()
        self.awake = at if at is not None or batch else datetime.now(_UTC) + _ONE_MS
        if batch:
            self._emit(batch)
