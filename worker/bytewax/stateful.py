"""The keyed state of a ``stateful_batch`` step in one task: a logic per key, as Bytewax runs them.

Bytewax's engine (``src/operators.rs``, ``stateful_batch``) does, each time the step is activated:
``on_batch(values)`` for every key with new items (keys in sorted order, a key's values in arrival
order), building the key's logic first with ``builder(None)`` when it has none; then ``on_notify()``
for every key whose scheduled time (the last ``notify_at`` it returned) has passed; then, at the end
of the input, ``on_eof()`` for every key with a logic; a logic that returns ``True`` (discard) is
dropped, its schedule with it; last, ``notify_at()`` of every key called above that kept its logic
(a ``None`` leaves an earlier schedule in place, as Bytewax does). Outputs are ``(key, value)``.

:class:`KeyedLogics` does exactly that over a batch of ``(key, value)`` items and remembers which keys
changed since the last snapshot, so a checkpoint writes only those (``snapshot()`` of each, or a
delete for a discarded one) — Bytewax snapshots the keys awoken in each epoch the same way.
:class:`FastKeyedStates` (``gale.worker.bytewax.fast``) has the same interface for library
operators it runs without logic objects. Errors name the step and the key, as Bytewax's do, with the
user's exception as the cause.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any


class StepError(RuntimeError):
    """User code of a step raised (the cause), or returned what the step cannot use."""


def batch_ret(res: Any, step_id: str, method: str, key: str) -> tuple[list, bool]:
    """``(emit, is_complete)`` of a logic's ``on_*`` method, checked as Bytewax checks it."""
    where = f"error calling `StatefulBatchLogic.{method}` in step {step_id} for key {key}"
    try:
        emit, discard = res
    except (TypeError, ValueError) as exc:
        raise StepError(where) from TypeError(
            f"did not return a 2-tuple of `(emit, is_complete)`; got a `{type(res).__name__}` instead")
    if discard.__class__ is not bool:
        if not isinstance(discard, bool):
            raise StepError(where) from TypeError(
                f"`is_complete` was not a `bool`; got a `{type(discard).__name__}` instead")
    if emit.__class__ is not list:
        if isinstance(emit, (tuple, range)) or (hasattr(emit, "__getitem__") and hasattr(emit, "__len__")
                                                and not isinstance(emit, (str, bytes, dict))):
            emit = list(emit)
        else:
            raise StepError(where) from TypeError(f"`emit` was not a `list`; got a `{type(emit).__name__}` instead")
    return emit, discard


def group_by_key(items: list) -> dict[str, list]:
    """``(key, value)`` items → each key's values, in arrival order."""
    groups: dict[str, list] = {}
    for key, value in items:
        values = groups.get(key)
        if values is None:
            groups[key] = [value]
        else:
            values.append(value)
    return groups


class KeyedLogics:
    """The logics of one task of a ``stateful_batch`` step (module docstring)."""

    def __init__(self, step_id: str, builder: Callable[[Any], Any], logic_class: type):
        self.step_id = step_id
        self.builder = builder
        self.logic_class = logic_class
        self.logics: dict[str, Any] = {}
        self.sched: dict[str, datetime] = {}
        #: keys whose logic ran (or was discarded) since the last :meth:`take_changes`
        self.changed: set[str] = set()

    # ------------------------------------------------------------------ building

    def build(self, key: str, resume: Any) -> Any:
        try:
            logic = self.builder(resume)
        except Exception as exc:  # noqa: BLE001 - user code
            raise StepError(f"error calling `builder` in step {self.step_id} for key {key}") from exc
        if not isinstance(logic, self.logic_class):
            raise StepError(f"error calling `builder` in step {self.step_id} for key {key}") from TypeError(
                "logic must subclass `bytewax.operators.StatefulBatchLogic`")
        return logic

    def restore(self, snapshots: Iterable[tuple[str, Any]]) -> None:
        """Rebuild every key's logic from its snapshot (the committed state); schedules from ``notify_at``."""
        self.logics.clear()
        self.sched.clear()
        self.changed.clear()
        for key, snap in snapshots:
            self.logics[key] = self.build(key, snap)
        self._reschedule(list(self.logics))

    # ------------------------------------------------------------------ one activation

    def activate(self, items: list | None, now: datetime, eof: bool = False) -> list[tuple[str, Any]]:
        """One activation: ``items`` (``(key, value)``, or None) through ``on_batch``, then the due
        notifications, then ``on_eof`` when ``eof``; the outputs in that order."""
        out: list[tuple[str, Any]] = []
        awoken: list[str] = []
        if items:
            groups = group_by_key(items)
            self._run("on_batch", sorted(groups), out, awoken, groups)
        if self.sched:
            due = sorted(k for k, t in self.sched.items() if t <= now)
            if due:
                for key in due:
                    del self.sched[key]
                self._run("on_notify", due, out, awoken)
        if eof and self.logics:
            self._run("on_eof", sorted(self.logics), out, awoken)
        self._reschedule(awoken)
        return out

    def _run(self, method: str, keys: list[str], out: list, awoken: list, groups: dict | None = None) -> None:
        logics, builder_of, step_id = self.logics, self.build, self.step_id
        append = out.append
        for key in keys:
            logic = logics.get(key)
            if logic is None:
                if groups is None:  # discarded earlier in this activation
                    continue
                logic = logics[key] = builder_of(key, None)
            try:
                res = getattr(logic, method)(groups[key]) if groups is not None else getattr(logic, method)()
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error calling `StatefulBatchLogic.{method}` in step {step_id} for key {key}") from exc
            emit, discard = batch_ret(res, step_id, method, key)
            for value in emit:
                append((key, value))
            if discard:
                del logics[key]
                self.sched.pop(key, None)
            awoken.append(key)
        self.changed.update(keys)

    def _reschedule(self, keys: list[str]) -> None:
        for key in keys:
            logic = self.logics.get(key)
            if logic is None:
                continue
            try:
                at = logic.notify_at()
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error calling `StatefulBatchLogic.notify_at` in step {self.step_id} "
                                f"for key {key}") from exc
            if at is not None:
                if not isinstance(at, datetime):
                    raise StepError(f"error calling `StatefulBatchLogic.notify_at` in step {self.step_id} for key "
                                    f"{key}") from TypeError(f"did not return a `datetime`; got a `{type(at).__name__}` "
                                                             "instead")
                self.sched[key] = at

    # ------------------------------------------------------------------ snapshots

    def take_changes(self) -> tuple[dict[str, Any], set[str]]:
        """The snapshot of every key changed since the last call, and the keys discarded since."""
        puts: dict[str, Any] = {}
        deletes: set[str] = set()
        for key in self.changed:
            logic = self.logics.get(key)
            if logic is None:
                deletes.add(key)
                continue
            try:
                puts[key] = logic.snapshot()
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error calling `StatefulBatchLogic.snapshot` in step {self.step_id} "
                                f"for key {key}") from exc
        self.changed = set()
        return puts, deletes

    def next_notify(self) -> datetime | None:
        return min(self.sched.values()) if self.sched else None

    def __len__(self) -> int:
        return len(self.logics)
