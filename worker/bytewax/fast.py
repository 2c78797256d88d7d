"""Bytewax's library operators run by equivalent code without their per-item shims.

Bytewax builds ``op.map``, ``op.key_on``, ``op.stateful_map`` and the others in Python on its core
operators: ``op.map("m", s, f)`` is a ``flat_map_batch`` whose mapper is ``lambda xs: (f(x) for x
in xs)``; ``op.stateful_map`` is a ``stateful_batch`` whose logic per key wraps a logic that wraps a
shim around the user's function — four Python calls per item where the user wrote one. A core step
built by one of the operators below (the step's ancestor is exactly that library operator, checked
by class identity, so a user's operator of the same name is not) runs the operator's definition
directly: the user's function once per item, the same checks with the same messages, the same
outputs in the same order, and — for the stateful ones — the same snapshots (a ``deepcopy`` of the
state), so a state written one way resumes the other. ``tests/test_bytewax_fast.py`` holds each to
the library's own code on the same inputs. ``topology.bytewax.fast.operators: false`` runs the
library's code instead.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from gale.worker.bytewax.stateful import StepError, group_by_key

BatchFn = Callable[[list], list]


def _library() -> Any:
    import bytewax.operators as op

    return op


def _is(step: Any, name: str) -> bool:
    op = _library()
    fn = getattr(op, name, None)
    return fn is not None and type(step) is getattr(fn, "_op_cls", None)


def _f_repr(f: Any) -> str:
    from bytewax.dataflow import f_repr

    return f_repr(f)


# ---------------------------------------------------------------------------- stateless (flat_map_batch)


def _map(step: Any) -> BatchFn:
    mapper = step.mapper
    return lambda xs: [mapper(x) for x in xs]


def _flat_map(step: Any) -> BatchFn:
    mapper = step.mapper

    def run(xs: list) -> list:
        out: list = []
        extend = out.extend
        for x in xs:
            extend(mapper(x))
        return out

    return run


def _not_bool(predicate: Any, step_id: str, keep: Any) -> TypeError:
    return TypeError(f"return value of `predicate` {_f_repr(predicate)} in step {step_id!r} must be a `bool`; "
                     f"got a {type(keep)!r} instead")


def _filter(step: Any) -> BatchFn:
    predicate, step_id = step.predicate, step.step_id

    def run(xs: list) -> list:
        out = []
        for x in xs:
            keep = predicate(x)
            if keep is True:
                out.append(x)
            elif keep is not False:
                raise _not_bool(predicate, step_id, keep)
        return out

    return run


def _key_on(step: Any) -> BatchFn:
    key, step_id = step.key, step.step_id

    def run(xs: list) -> list:
        out = []
        append = out.append
        for x in xs:
            k = key(x)
            if k.__class__ is not str and not isinstance(k, str):
                raise TypeError(f"return value of `key` {_f_repr(key)} in step {step_id!r} must be a `str`; "
                                f"got a {type(k)!r} instead")
            append((k, x))
        return out

    return run


def _key_rm(step: Any) -> BatchFn:
    def run(xs: list) -> list:
        out = []
        for k_v in xs:
            _k, v = k_v
            out.append(v)
        return out

    return run


def _map_value(step: Any) -> BatchFn:
    mapper = step.mapper

    def run(xs: list) -> list:
        out = []
        for k_v in xs:
            k, v = k_v
            out.append((k, mapper(v)))
        return out

    return run


def _filter_map(step: Any) -> BatchFn:
    mapper = step.mapper

    def run(xs: list) -> list:
        out = []
        for x in xs:
            y = mapper(x)
            if y is not None:
                out.append(y)
        return out

    return run


def _unpair(step_id: str, k_v: Any) -> tuple:
    try:
        k, v = k_v
    except TypeError as ex:
        raise TypeError(f"step {step_id!r} requires `(key, value)` 2-tuple as upstream for routing; got a "
                        f"{type(k_v)!r} instead") from ex
    return k, v


def _per_value(step: Any, values_of: Callable[[Any], Iterable]) -> BatchFn:
    """The ``*_value`` operators: each ``(key, value)`` item's value through ``values_of``, every value
    it gives back paired with the key again (the library's ``flat_map_value``)."""
    step_id = step.step_id

    def run(xs: list) -> list:
        out = []
        append = out.append
        for k_v in xs:
            k, v = _unpair(step_id, k_v)
            for w in values_of(v):
                append((k, w))
        return out

    return run


def _flat_map_value(step: Any) -> BatchFn:
    return _per_value(step, step.mapper)


def _filter_value(step: Any) -> BatchFn:
    predicate, step_id = step.predicate, step.step_id

    def kept(v: Any) -> tuple:
        keep = predicate(v)
        if keep is True:
            return (v,)
        if keep is not False:
            raise _not_bool(predicate, step_id, keep)
        return ()

    return _per_value(step, kept)


def _filter_map_value(step: Any) -> BatchFn:
    mapper = step.mapper

    def mapped(v: Any) -> tuple:
        w = mapper(v)
        return () if w is None else (w,)

    return _per_value(step, mapped)


def _flatten(step: Any) -> BatchFn:
    step_id = step.step_id

    def run(xs: list) -> list:
        out: list = []
        for x in xs:
            if not isinstance(x, Iterable):
                raise TypeError(f"step {step_id!r} requires upstream to be iterables; got a {type(x)!r} instead")
            out.extend(x)
        return out

    return run


#: library operators whose only core step is a ``flat_map_batch``, and the batch function of each
STATELESS: dict[str, Callable[[Any], BatchFn]] = {
    "map": _map, "flat_map": _flat_map, "filter": _filter, "key_on": _key_on, "key_rm": _key_rm,
    "map_value": _map_value, "filter_map": _filter_map, "flat_map_value": _flat_map_value,
    "filter_value": _filter_value, "filter_map_value": _filter_map_value, "flatten": _flatten,
}


def batch_function(ancestors: Iterable[Any]) -> tuple[BatchFn, Any] | None:
    """The batch function of the outermost library operator among ``ancestors`` (outermost first)
    that :data:`STATELESS` has, and that step; None when there is none."""
    for step in ancestors:
        for name, make in STATELESS.items():
            if _is(step, name):
                return make(step), step
    return None


# ---------------------------------------------------------------------------- stateful (stateful_batch)


class FastKeyedStates:
    """``op.stateful_map`` / ``op.stateful_flat_map`` of one task: a state per key, the user's
    mapper once per value — :class:`gale.worker.bytewax.stateful.KeyedLogics`' interface and
    outputs, without logic objects."""

    def __init__(self, core_step_id: str, step: Any, flat: bool):
        self.step_id = core_step_id
        self.outer_id = step.step_id
        self.mapper = step.mapper
        self.flat = flat
        self.states: dict[str, Any] = {}
        self.changed: set[str] = set()

    def restore(self, snapshots: Iterable[tuple[str, Any]]) -> None:
        # the library's builder keeps the resume state as the state (None or not)
        self.states = dict(snapshots)
        self.changed = set()

    def activate(self, items: list | None, now: datetime, eof: bool = False) -> list[tuple[str, Any]]:
        if not items:
            return []
        groups = group_by_key(items)
        out: list[tuple[str, Any]] = []
        append = out.append
        states, mapper, flat = self.states, self.mapper, self.flat
        for key in sorted(groups):
            state = states.get(key)
            try:
                for value in groups[key]:
                    res = mapper(state, value)
                    try:
                        state, w = res
                    except TypeError as ex:
                        raise TypeError(self._not_pair(res)) from ex
                    if flat:
                        for x in w:
                            append((key, x))
                    else:
                        append((key, w))
            except Exception as exc:  # noqa: BLE001 - user code
                raise StepError(f"error calling `StatefulBatchLogic.on_batch` in step {self.step_id} "
                                f"for key {key}") from exc
            if state is None:
                states.pop(key, None)
            else:
                states[key] = state
        self.changed.update(groups)
        return out

    def _not_pair(self, res: Any) -> str:
        what = "emit_values" if self.flat else "emit_value"
        return (f"return value of `mapper` {_f_repr(self.mapper)} in step {self.outer_id!r} must be a 2-tuple of "
                f"`(updated_state, {what})`; got a {type(res)!r} instead")

    def take_changes(self) -> tuple[dict[str, Any], set[str]]:
        puts: dict[str, Any] = {}
        deletes: set[str] = set()
        states = self.states
        for key in self.changed:
            if key in states:
                puts[key] = copy.deepcopy(states[key])
            else:
                deletes.add(key)
        self.changed = set()
        return puts, deletes

    def next_notify(self) -> datetime | None:
        return None

    def __len__(self) -> int:
        return len(self.states)


def keyed_engine(core_step_id: str, ancestors: Iterable[Any]) -> FastKeyedStates | None:
    """A :class:`FastKeyedStates` for a ``stateful_batch`` built by ``op.stateful_map`` or
    ``op.stateful_flat_map`` (the outermost of them among ``ancestors``), else None."""
    for step in ancestors:
        if _is(step, "stateful_map"):
            return FastKeyedStates(core_step_id, step, flat=False)
        if _is(step, "stateful_flat_map"):
            return FastKeyedStates(core_step_id, step, flat=True)
    return None
