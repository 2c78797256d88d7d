"""State providers: where checkpoints of managed state are kept (``topology.state.provider``).

The interface (documented in docs/state.md; keep it stable, windowed bolts build on it). State is
stored per *namespace* — an opaque string the runtime chooses (``<topology>/<component>/kg<N>`` for
a key group, ``<topology>/<component>/task<I>`` for an unkeyed task); keys and values are bytes
(msgpack, packed by :class:`gale.topology.state.KeyValueState`).

* ``load(namespaces) -> {namespace: {key: value}}`` — the committed content (staged, uncommitted
  transactions are never read back).
* ``prepare(txid, changes) -> bytes_written`` — stage, durably, the changes of checkpoint ``txid``:
  ``changes`` maps a namespace to ``(puts: {key: value}, deletes: {key})``. Staging the same txid
  again replaces what was staged for it.
* ``commit(txid, namespaces)`` — atomically per namespace, merge what was staged for ``txid`` into
  the committed content and forget the staged copy. Idempotent: a namespace with nothing staged for
  ``txid`` (already committed, or no changes) is left alone.
* ``rollback(namespaces)`` — forget everything staged (uncommitted) in those namespaces.
* ``get_meta(name) -> bytes | None`` / ``put_meta(name, value)`` — small records (the checkpoint
  coordinator's ``__state``), written atomically.
* ``close()``.

Every method may raise :class:`StateProviderError` (the store is unreachable, …): the checkpoint
then fails, nothing is committed in part, and the coordinator rolls back and retries.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from gale.config import as_config
from gale.config_keys import Config
from gale.errors import GaleError

Changes = Mapping[str, tuple[Mapping[bytes, bytes], Iterable[bytes]]]


class StateProviderError(GaleError):
    """The state provider could not do what was asked (nothing was changed in part)."""


class StateProvider(Protocol):
    def load(self, namespaces: Iterable[str]) -> dict[str, dict[bytes, bytes]]: ...
    def prepare(self, txid: int, changes: Changes) -> int: ...
    def commit(self, txid: int, namespaces: Iterable[str]) -> None: ...
    def rollback(self, namespaces: Iterable[str]) -> None: ...
    def get_meta(self, name: str) -> bytes | None: ...
    def put_meta(self, name: str, value: bytes) -> None: ...
    def close(self) -> None: ...


class MemoryStateProvider:
    """In process memory: one per worker process (all its tasks), lost when the process ends —
    Storm's default ``InMemoryKeyValueStateProvider``. For local mode and tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.committed: dict[str, dict[bytes, bytes]] = {}
        self.staged: dict[str, dict[int, tuple[dict[bytes, bytes], set[bytes]]]] = {}
        self.meta: dict[str, bytes] = {}

    def load(self, namespaces: Iterable[str]) -> dict[str, dict[bytes, bytes]]:
        with self._lock:
            return {ns: dict(self.committed.get(ns, {})) for ns in namespaces}

    def prepare(self, txid: int, changes: Changes) -> int:
        written = 0
        with self._lock:
            for ns, (puts, deletes) in changes.items():
                puts, deletes = dict(puts), set(deletes)
                self.staged.setdefault(ns, {})[txid] = (puts, deletes)
                written += sum(len(k) + len(v) for k, v in puts.items()) + sum(len(k) for k in deletes)
        return written

    def commit(self, txid: int, namespaces: Iterable[str]) -> None:
        with self._lock:
            for ns in namespaces:
                staged = self.staged.get(ns)
                if not staged or txid not in staged:
                    continue
                puts, deletes = staged.pop(txid)
                data = self.committed.setdefault(ns, {})
                for k in deletes:
                    data.pop(k, None)
                data.update(puts)

    def rollback(self, namespaces: Iterable[str]) -> None:
        with self._lock:
            for ns in namespaces:
                self.staged.pop(ns, None)

    def get_meta(self, name: str) -> bytes | None:
        with self._lock:
            return self.meta.get(name)

    def put_meta(self, name: str, value: bytes) -> None:
        with self._lock:
            self.meta[name] = value

    def close(self) -> None:
        pass


def open_provider(conf: Config | Mapping[str, Any]) -> Any:
    """The provider ``topology.state.provider`` names, connected per ``conf``."""
    config = as_config(conf, "topology configuration")
    name = config.topology_state_provider
    if name == "memory":
        return MemoryStateProvider()
    if name == "redis":
        from gale.worker.state.redis_provider import RedisStateProvider

        return RedisStateProvider(config.topology_state_redis_url)
    if name == "sqlite":
        from gale.worker.state.sqlite_provider import SqliteStateProvider

        return SqliteStateProvider(config.topology_state_sqlite_path)
    raise StateProviderError(f"unknown topology.state.provider {name!r}: use 'memory', 'redis' or 'sqlite'")
