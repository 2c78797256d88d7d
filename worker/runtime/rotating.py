"""Storm's RotatingMap: entries expire after between (n-1) and n rotations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cython

_MISSING = object()


@cython.cclass
class RotatingMap:
    """``buckets`` dicts; new entries go to the newest; :meth:`rotate` expires the oldest bucket.

    With 2 buckets rotated every timeout period, an entry expires between 1× and 2× the period
    after it was put (the spout side of Storm's tuple timeouts). Compiled, an extension type
    (``rotating.pxd``): ``len()``, asked before every ``next_tuple``, is a C slot, and ``put`` and
    ``pop`` (each emit and ack) read the buckets as a typed list.
    """

    # the Python build's layout; compiled, the attributes are the C fields rotating.pxd declares
    __slots__ = ("_buckets", "_on_expire")

    def __init__(self, buckets: int = 2, on_expire: Callable[[Any, Any], None] | None = None):
        if buckets < 2:
            raise ValueError("RotatingMap needs at least 2 buckets")
        self._buckets = [{} for _ in range(buckets)]
        self._on_expire = on_expire

    def put(self, key: Any, value: Any) -> None:
        buckets = self._buckets
        b: dict = buckets[0]
        b[key] = value
        for i in range(1, len(buckets)):
            b = buckets[i]
            if b and key in b:
                del b[key]

    def get(self, key: Any, default: Any = None) -> Any:
        for b in self._buckets:
            if key in b:
                return b[key]
        return default

    def pop(self, key: Any, default: Any = None) -> Any:
        b: dict
        for b in self._buckets:
            value = b.pop(key, _MISSING)
            if value is not _MISSING:
                return value
        return default

    def touch(self, key: Any) -> bool:
        """Move ``key`` to the newest bucket (reset its timeout)."""
        for b in self._buckets[1:]:
            if key in b:
                self._buckets[0][key] = b.pop(key)
                return True
        return key in self._buckets[0]

    def __contains__(self, key: Any) -> bool:
        return any(key in b for b in self._buckets)

    def __len__(self) -> int:
        # asked once per next_tuple call (max spout pending): a C loop when compiled
        n: cython.Py_ssize_t = 0
        b: dict
        for b in self._buckets:
            n += len(b)
        return n

    def rotate(self) -> dict[Any, Any]:
        """Expire the oldest bucket; return its entries (also passed to ``on_expire``)."""
        dead = self._buckets.pop()
        self._buckets.insert(0, {})
        if self._on_expire is not None:
            for k, v in dead.items():
                self._on_expire(k, v)
        return dead

    def drain(self) -> dict[Any, Any]:
        """Take every entry out (none expires: ``on_expire`` is not called); return them."""
        out: dict[Any, Any] = {}
        for b in reversed(self._buckets):
            out.update(b)
            b.clear()
        return out

    def items(self):
        for b in self._buckets:
            yield from b.items()
