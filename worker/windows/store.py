"""The window buffer's store: where buffered tuples live between arrival and expiry.

The window core (:mod:`.core`) keeps its own indexes (panes, sessions, the count queue) over
:class:`Entry` objects and tells the store what arrived (:meth:`WindowStore.put`) and what left
(:meth:`WindowStore.remove`); the store is the record a restarted task rebuilds the core from
(:meth:`WindowStore.entries` + :meth:`WindowStore.meta`: the core writes its metadata after every
watermark and firing, and ``core.restore()`` rebuilds a core from a store; a restored core continues
exactly as the original, ``tests/test_windows_core.py``). ``WindowBody``'s ``store_for`` picks
the store of each task.

:class:`InMemoryWindowStore` is a dict (tuples are lost with the worker, and replayed by their spouts
after ``topology.message.timeout.secs``). The store over managed state, for ``with_persistence()``,
is ``gale.worker.state.windows.StateWindowStore``: ``put`` → ``state.put(seq, [ts, key, values,
source])``, ``remove`` → ``state.delete(seq)``, ``set_meta``/``meta`` → one key; checkpointed with
the task's state, so a window in progress survives a worker kill without a replay of its input.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class Entry:
    """One buffered tuple: its arrival ordinal, timestamp (ms), session key and the tuple itself."""

    __slots__ = ("seq", "ts", "key", "item")

    def __init__(self, seq: int, ts: int, item: Any, key: Any = None):
        self.seq = seq
        self.ts = ts
        self.key = key
        self.item = item

    def __repr__(self) -> str:
        return f"Entry({self.seq}, ts={self.ts}, key={self.key!r}, {self.item!r})"


class WindowStore(Protocol):
    def put(self, entry: Entry) -> None: ...
    def remove(self, entries: Iterable[Entry]) -> None: ...
    def entries(self) -> list[Entry]: ...
    def set_meta(self, meta: dict[str, Any]) -> None: ...
    def meta(self) -> dict[str, Any]: ...
    def __len__(self) -> int: ...


class InMemoryWindowStore:
    """The default store: a dict by arrival ordinal (insertion-ordered)."""

    def __init__(self) -> None:
        self._entries: dict[int, Entry] = {}
        self._meta: dict[str, Any] = {}

    def put(self, entry: Entry) -> None:
        self._entries[entry.seq] = entry

    def remove(self, entries: Iterable[Entry]) -> None:
        pop = self._entries.pop
        for e in entries:
            pop(e.seq, None)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def set_meta(self, meta: dict[str, Any]) -> None:
        self._meta = dict(meta)

    def meta(self) -> dict[str, Any]:
        return dict(self._meta)

    def __len__(self) -> int:
        return len(self._entries)
