"""Where a Bytewax step's items go: the receiving task of each item, and the tuples that carry them.

Every stream into a Bytewax step is a fields grouping on ``route`` (``gale.bytewax.topology``), and
the writing task picks the receiving task itself: each receiving task index ``i`` has a *route
value* that the stream's grouper sends to task ``i`` — the integer ``i`` for Gale's fields grouping
(``hash(i) % n == i``), and with key groups (a stateful receiver, with recovery) a string whose key
group the task owns, so the grouper routes by key group exactly as Gale's keyed state expects. The
emit returns the task it went to; :class:`Edge` checks it.

Keyed items (``(key, value)``) go to the task owning the key: ``crc32(key)`` → key group → task
index with key groups (``gale.topology.keygroups``), ``crc32(key) % n`` without; a partitioned
sink's items go to the task owning the partition ``part_fn(key)`` picks. Pure: no runtime, no I/O.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any
from zlib import crc32

from gale.topology.keygroups import owner_index

#: route values are searched among these strings when routing by key group
_MAX_SEARCH = 1_000_000


def route_values(tasks: int, groups: int | None) -> list[Any]:
    """The route value of each receiving task index: ``i`` (fields grouping), or with ``groups``
    key groups a string ``"r<n>"`` of a key group task ``i`` owns (the first found, so every writer
    finds the same ones)."""
    if groups is None:
        return list(range(tasks))
    found: list[Any] = [None] * tasks
    missing = tasks
    for n in range(_MAX_SEARCH):
        value = f"r{n}"
        idx = owner_index(crc32(value.encode()) % groups, groups, tasks)
        if found[idx] is None:
            found[idx] = value
            missing -= 1
            if not missing:
                return found
    owned = [i for i, v in enumerate(found) if v is None]
    raise ValueError(f"task indexes {owned} of {tasks} own no key group of {groups}: use at most "
                     f"{groups} tasks (topology.state.key.groups)")


class KeyOwner:
    """The task index owning a string key (cached per key: a CRC-32 costs more than the lookup)."""

    __slots__ = ("tasks", "groups", "_cache")

    CACHE_KEYS = 65_536

    def __init__(self, tasks: int, groups: int | None):
        self.tasks = tasks
        self.groups = groups
        self._cache: dict[str, int] = {}

    def __call__(self, key: str) -> int:
        idx = self._cache.get(key)
        if idx is None:
            h = crc32(key.encode("utf-8", "surrogatepass"))
            idx = owner_index(h % self.groups, self.groups, self.tasks) if self.groups else h % self.tasks
            if len(self._cache) >= self.CACHE_KEYS:
                self._cache.clear()
            self._cache[key] = idx
        return idx


def split_keyed(items: Sequence[Any], owner: Callable[[str], int], tasks: int, step_id: str) -> list[list[Any]]:
    """``(key, value)`` items per receiving task index, in order; a malformed item raises
    ``TypeError`` as Bytewax words it (the step reading them is ``step_id``)."""
    out: list[list[Any]] = [[] for _ in range(tasks)]
    appends = [b.append for b in out]
    for item in items:
        if item.__class__ is tuple and len(item) == 2 and item[0].__class__ is str:
            appends[owner(item[0])](item)
        else:
            check_keyed(item, step_id)
            appends[owner(item[0])](item)
    return out


def check_keyed(item: Any, step_id: str) -> None:
    """Raise Bytewax's ``TypeError`` for an item a keyed step cannot route (a str key subclass passes)."""
    if not isinstance(item, tuple) or len(item) != 2:
        raise TypeError(f"step {step_id} requires `(key, value)` 2-tuple from upstream for routing; got a "
                        f"`{type(item).__name__}` instead")
    if not isinstance(item[0], str):
        raise TypeError(f"step {step_id} requires `str` keys in `(key, value)` from upstream; got a "
                        f"`{type(item[0]).__name__}` instead")


class CannotSerialize(TypeError):
    """An item of a batch for another worker cannot be pickled."""


def pack_batch(items: list[Any], step_id: str) -> bytes:
    """A batch as it crosses workers: pickled (the transport seals and authenticates the bytes).
    An item that cannot be pickled raises :class:`CannotSerialize` naming the step and its type."""
    try:
        return pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickling raises many kinds
        bad = _unpicklable(items)
        what = f"an item of type {_describe(bad)}" if bad is not None else "the batch"
        raise CannotSerialize(f"step {step_id!r}: {what} cannot be serialized to go to another worker "
                              f"({type(exc).__name__}: {exc}); items crossing workers must be picklable") from exc


def _unpicklable(items: list[Any]) -> Any:
    for item in items:
        try:
            pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001
            return item
    return None


def _describe(item: Any) -> str:
    """An item's type, and for a tuple, list or dict the type of what in it cannot be pickled."""
    name = f"{type(item).__module__}.{type(item).__qualname__}"
    if isinstance(item, (tuple, list, dict)):
        inner = _unpicklable(list(item.values()) if isinstance(item, dict) else list(item))
        if inner is not None:
            return f"{name} holding a {_describe(inner)}"
    return name


def unpack_batch(payload: Any) -> list[Any]:
    """The items of a batch tuple's ``batch`` field: the list itself (from this worker) or unpickled."""
    if payload.__class__ is list:
        return payload
    return pickle.loads(payload)
