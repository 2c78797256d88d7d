"""The SQLite state provider (``topology.state.provider: sqlite``): checkpoints in one file on this
machine (``topology.state.sqlite.path``; a directory holds ``gale-state.sqlite3``) — for local mode,
Bytewax's ``RecoveryConfig`` directory (``gale.bytewax.run_main``) and clusters on one machine
(every worker process opens the same file; SQLite locks it).

Tables: ``committed(ns, k, v)``, ``staged(ns, txid, k, v, deleted)`` with ``staged_txids(ns,
txid)`` (a checkpoint staged with no change still replaces an earlier staging of its txid), and
``meta(name, v)``. ``prepare`` and ``commit`` are one transaction each, so a process killed
mid-commit leaves all of it or none; the journal is written ahead and synced (``synchronous=FULL``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

from gale.worker.state.provider import Changes, StateProviderError

FILE_NAME = "gale-state.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS committed (ns TEXT NOT NULL, k BLOB NOT NULL, v BLOB NOT NULL, PRIMARY KEY (ns, k));
CREATE TABLE IF NOT EXISTS staged (ns TEXT NOT NULL, txid INTEGER NOT NULL, k BLOB NOT NULL, v BLOB,
                                   deleted INTEGER NOT NULL, PRIMARY KEY (ns, txid, k));
CREATE TABLE IF NOT EXISTS staged_txids (ns TEXT NOT NULL, txid INTEGER NOT NULL, PRIMARY KEY (ns, txid));
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, v BLOB NOT NULL);
"""


def database_path(path: str) -> Path:
    """The file ``topology.state.sqlite.path`` names: itself, or ``gale-state.sqlite3`` in a directory."""
    p = Path(path).expanduser()
    return p / FILE_NAME if p.is_dir() else p


class SqliteStateProvider:
    def __init__(self, path: str):
        self.path = database_path(path)
        self._lock = threading.Lock()
        try:
            if self.path.parent and not self.path.parent.exists():
                os.makedirs(self.path.parent, exist_ok=True)
            self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise StateProviderError(f"cannot open the SQLite state file {self.path}: {exc}") from exc

    def _tx(self, work) -> object:
        with self._lock:
            try:
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    out = work(self.db)
                except BaseException:
                    self.db.execute("ROLLBACK")
                    raise
                self.db.execute("COMMIT")
                return out
            except sqlite3.Error as exc:
                raise StateProviderError(f"SQLite state file {self.path}: {exc}") from exc

    def _read(self, sql: str, args: tuple) -> list:
        with self._lock:
            try:
                return self.db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StateProviderError(f"SQLite state file {self.path}: {exc}") from exc

    def load(self, namespaces: Iterable[str]) -> dict[str, dict[bytes, bytes]]:
        out: dict[str, dict[bytes, bytes]] = {}
        for ns in namespaces:
            out[ns] = {bytes(k): bytes(v) for k, v in self._read("SELECT k, v FROM committed WHERE ns = ?", (ns,))}
        return out

    def prepare(self, txid: int, changes: Changes) -> int:
        def work(db: sqlite3.Connection) -> int:
            written = 0
            for ns, (puts, deletes) in changes.items():
                db.execute("DELETE FROM staged WHERE ns = ? AND txid = ?", (ns, txid))
                db.execute("INSERT OR IGNORE INTO staged_txids (ns, txid) VALUES (?, ?)", (ns, txid))
                db.executemany("INSERT INTO staged (ns, txid, k, v, deleted) VALUES (?, ?, ?, ?, 0)",
                               [(ns, txid, k, v) for k, v in puts.items()])
                deletes = [k for k in deletes if k not in puts]
                db.executemany("INSERT INTO staged (ns, txid, k, v, deleted) VALUES (?, ?, ?, NULL, 1)",
                               [(ns, txid, k) for k in deletes])
                written += sum(len(k) + len(v) for k, v in puts.items()) + sum(len(k) for k in deletes)
            return written

        return self._tx(work)  # type: ignore[return-value]

    def commit(self, txid: int, namespaces: Iterable[str]) -> None:
        namespaces = list(namespaces)

        def work(db: sqlite3.Connection) -> None:
            for ns in namespaces:
                if db.execute("SELECT 1 FROM staged_txids WHERE ns = ? AND txid = ?", (ns, txid)).fetchone() is None:
                    continue
                db.execute("DELETE FROM committed WHERE ns = ? AND k IN "
                           "(SELECT k FROM staged WHERE ns = ? AND txid = ? AND deleted = 1)", (ns, ns, txid))
                db.execute("INSERT OR REPLACE INTO committed (ns, k, v) "
                           "SELECT ns, k, v FROM staged WHERE ns = ? AND txid = ? AND deleted = 0", (ns, txid))
                db.execute("DELETE FROM staged WHERE ns = ? AND txid = ?", (ns, txid))
                db.execute("DELETE FROM staged_txids WHERE ns = ? AND txid = ?", (ns, txid))

        self._tx(work)

    def rollback(self, namespaces: Iterable[str]) -> None:
        namespaces = list(namespaces)

        def work(db: sqlite3.Connection) -> None:
            for ns in namespaces:
                db.execute("DELETE FROM staged WHERE ns = ?", (ns,))
                db.execute("DELETE FROM staged_txids WHERE ns = ?", (ns,))

        self._tx(work)

    def get_meta(self, name: str) -> bytes | None:
        rows = self._read("SELECT v FROM meta WHERE name = ?", (name,))
        return bytes(rows[0][0]) if rows else None

    def put_meta(self, name: str, value: bytes) -> None:
        self._tx(lambda db: db.execute("INSERT OR REPLACE INTO meta (name, v) VALUES (?, ?)", (name, value)))

    def close(self) -> None:
        with self._lock:
            try:
                self.db.close()
            except sqlite3.Error:
                pass
