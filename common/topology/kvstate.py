"""A task's key-value state (:class:`KeyValueState`, Storm's ``KeyValueState``) and what packs it.

A stateful bolt calls ``get`` and ``put`` once or more per tuple: the class is on the per-tuple path
of stateful topologies, compiled with the core (``gale.compiled``, ``kvstate.pxd``), so a call
runs without an interpreter frame. ``gale.topology.state`` (the user's module) re-exports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import cython
import msgpack


class StateError(Exception):
    """A state operation that cannot be done (a value that cannot be serialized, a key this task
    does not own)."""


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def unpack_key(data: bytes) -> Any:
    # keys come back hashable: arrays as tuples
    return msgpack.unpackb(data, raw=False, use_list=False)


def unpack_value(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)


def _describe(obj: Any) -> str:
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


_MISSING = object()
#: the ints msgpack packs (a signed or an unsigned 64-bit integer)
_INT_MIN = -(1 << 63)
_UINT_MAX = (1 << 64) - 1


@cython.cclass
class KeyValueState:
    """A task's key-value state: ``get``, ``put``, ``delete``, iteration, ``len``, ``in``.

    ``put`` serializes the value at once (so a later change to a mutable value you put is not
    seen: put it again; an immutable scalar that always serializes is serialized when the
    checkpoint takes the changes). Iteration yields ``(key, value)`` pairs, like Storm's
    ``iterator()``.
    """

    def __init__(self, owns: Callable[[Any], str | None] | None = None):
        self._data: dict[Any, Any] = {}
        #: key → packed value (or a scalar that certainly packs, packed when taken), changed since the
        #: last checkpoint prepared
        self._dirty: dict[Any, Any] = {}
        #: keys deleted since the last checkpoint prepared
        self._deleted: set[Any] = set()
        #: key → None when this task owns the key, else a message saying why not (key groups)
        self._owns = owns
        # one Packer per state (a task's state is used by one thread): cheaper than packb per put
        self._packb = msgpack.Packer(use_bin_type=True).pack

    # --- the user's API
    def get(self, key: Any, default: Any = None) -> Any:
        return self._data.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        data = self._data
        try:
            known = key in data  # a key already in the state was checked when it was first put
        except TypeError:
            known = False
        if not known:
            self._check_key(key)
        cls = value.__class__
        if (cls is int and _INT_MIN <= value <= _UINT_MAX) or cls is float or cls is bool or value is None or (
                cls is str and value.isascii()):
            # an immutable value that certainly packs: packed when the checkpoint takes the changes,
            # once per key however often it was put (never bytes, so told apart from packed values)
            self._dirty[key] = value
        else:
            try:
                self._dirty[key] = self._packb(value)
            except (TypeError, ValueError, OverflowError) as exc:
                raise StateError(
                    f"state value for key {key!r} has type {_describe(value)}, which cannot be serialized ({exc}); "
                    "values must be None, bool, int, float, str, bytes, or lists/tuples/dicts of those"
                ) from None
        data[key] = value
        if self._deleted:
            self._deleted.discard(key)

    def _check_key(self, key: Any) -> None:
        try:
            hash(key)
            pack(key)
        except (TypeError, ValueError, OverflowError):
            raise StateError(
                f"state key {key!r} of type {_describe(key)} cannot be a state key: keys must be hashable and "
                "serializable (str, int, float, bool, None, bytes, or a tuple of those)"
            ) from None
        if self._owns is not None:
            why = self._owns(key)
            if why is not None:
                raise StateError(why)

    def delete(self, key: Any) -> None:
        """Remove ``key`` (no error when absent)."""
        if self._data.pop(key, _MISSING) is not _MISSING or key in self._dirty:
            self._dirty.pop(key, None)
            self._deleted.add(key)

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._data.items()))

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(self)

    def keys(self) -> list[Any]:
        return list(self._data)

    # --- the runtime's side
    def changes(self) -> tuple[dict[Any, bytes], set[Any]]:
        """The keys put (packed values) and deleted since the last :meth:`take_changes`."""
        return self._packed(self._dirty), set(self._deleted)

    def take_changes(self) -> tuple[dict[Any, bytes], set[Any]]:
        """Hand over the changes since the last call (they become part of the checkpoint being
        prepared) and start tracking afresh."""
        dirty, deleted = self._dirty, self._deleted
        self._dirty, self._deleted = {}, set()
        return self._packed(dirty), deleted

    def _packed(self, dirty: dict) -> dict:
        """``dirty`` with every value packed (``put`` leaves scalars that certainly pack for here)."""
        packb = self._packb
        return {k: v if v.__class__ is bytes else packb(v) for k, v in dirty.items()}

    def reset(self, data: dict[Any, Any]) -> None:
        """Replace the whole content (restore from a checkpoint); no changes pending."""
        self._data = data
        self._dirty = {}
        self._deleted = set()
