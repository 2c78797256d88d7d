"""Idempotent, atomic micro-batch commits for Spark sinks (local and mounted filesystems).

Storm gives no stable identity to a replayed tuple (a replay is a new tuple tree with new random
ids), so a sink recognises a row it has already written by the row's *key*: the values of the
sink's ``key_fields`` (all fields by default), hashed with :func:`row_key`.

Layout under the sink's path::

    <path>/gale_batch=<batch id>/part-*.parquet   one directory per committed batch
    <path>/gale_batch=<batch id>/_gale_keys       the 16-byte keys of its rows (readers skip "_" files)
    <path>/_gale_tmp/t<task>-<batch id>-<nonce>/  a batch being written (readers skip "_" dirs)

A batch is written into a temporary directory and renamed into place in one atomic step, so a
crash never leaves a partial batch visible; stale temporaries are removed when the task starts.
Rows whose key is already in a committed batch (within ``window_secs``) or repeated inside the
batch are not written again, so a replay — in the same batch or regrouped with other tuples — does
not duplicate rows. The batch id is a hash of the batch's keys: two writers committing the same
rows race for the same directory name and only one wins.

``spark.read.parquet(<path>)`` reads every committed row plus a ``gale_batch`` column.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

BATCH_DIR_PREFIX = "gale_batch="
TEMP_DIR = "_gale_tmp"
KEYS_FILE = "_gale_keys"
KEY_BYTES = 16


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return {"$time": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, (set, frozenset)):
        return {"$set": sorted(repr(v) for v in value)}
    return {"$repr": repr(value)}


def row_key(values: Sequence[Any]) -> bytes:
    """A stable 16-byte key of a row's values (the same in every process and run)."""
    text = json.dumps(list(values), sort_keys=True, default=_json_default, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=KEY_BYTES).digest()


def batch_id(component: str, keys: Iterable[bytes]) -> str:
    """The id of a batch made of rows with these keys: the same rows give the same id."""
    h = hashlib.blake2b(digest_size=16)
    h.update(component.encode("utf-8") + b"\0")
    for key in sorted(keys):
        h.update(key)
    return h.hexdigest()


def random_batch_id() -> str:
    return uuid.uuid4().hex


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class LocalBatchCommitter:
    """The commit protocol of one sink task on a local (or NFS-mounted) directory.

    Not thread-safe: one task uses it from its one batch thread at a time.
    """

    def __init__(self, path: str, component: str, task: int, window_secs: float = 3600.0, clock: Any = time):
        if "://" in path and not path.startswith("file://"):
            raise ValueError(
                f"sink path {path!r}: atomic batch commits need a local or mounted filesystem path "
                "(hdfs://, s3a:// and other schemes are not supported by SparkSink yet)"
            )
        self.root = os.path.abspath(path[len("file://"):] if path.startswith("file://") else path)
        self.component = component
        self.task = task
        self.window_secs = float(window_secs)
        self.clock = clock
        self.committed: set[bytes] = set()
        self._dirs: dict[str, tuple[float, list[bytes]]] = {}
        self._next_prune = 0.0

    # ------------------------------------------------------------------ paths
    @property
    def temp_root(self) -> str:
        return os.path.join(self.root, TEMP_DIR)

    def batch_dir(self, bid: str) -> str:
        return os.path.join(self.root, BATCH_DIR_PREFIX + bid)

    def temp_dir(self, bid: str) -> str:
        """A fresh, not yet existing temporary directory for writing batch ``bid``."""
        return os.path.join(self.temp_root, f"t{self.task}-{bid}-{uuid.uuid4().hex[:8]}")

    # ------------------------------------------------------------------ state
    def recover(self) -> list[str]:
        """Create the directories, remove this task's stale temporaries, load committed keys."""
        os.makedirs(self.temp_root, exist_ok=True)
        removed = []
        for name in os.listdir(self.temp_root):
            if name.startswith(f"t{self.task}-"):
                shutil.rmtree(os.path.join(self.temp_root, name), ignore_errors=True)
                removed.append(name)
        self.refresh()
        return removed

    def refresh(self) -> int:
        """Load the keys of batches committed since the last look (by any task). Returns how many."""
        now = self.clock.time()
        loaded = 0
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return 0
        for name in names:
            if not name.startswith(BATCH_DIR_PREFIX) or name in self._dirs:
                continue
            d = os.path.join(self.root, name)
            try:
                mtime = os.stat(d).st_mtime
                with open(os.path.join(d, KEYS_FILE), "rb") as f:
                    data = f.read()
            except OSError:
                continue  # not a Gale batch directory (or not readable): nothing to dedupe against
            keys = [data[i:i + KEY_BYTES] for i in range(0, len(data) - len(data) % KEY_BYTES, KEY_BYTES)]
            self._dirs[name] = (mtime, keys if now - mtime <= self.window_secs else [])
            self.committed.update(self._dirs[name][1])
            loaded += 1
        if now >= self._next_prune:
            self._prune(now)
        return loaded

    def _prune(self, now: float) -> None:
        self._next_prune = now + max(1.0, self.window_secs / 10.0)
        expired = [n for n, (mtime, keys) in self._dirs.items() if keys and now - mtime > self.window_secs]
        if expired:
            for name in expired:
                self._dirs[name] = (self._dirs[name][0], [])
            self.committed = {k for _, keys in self._dirs.values() for k in keys}

    def select_new(self, keys: Sequence[bytes]) -> list[int]:
        """Indices of the rows to write: keys not committed yet, first occurrence in the batch."""
        seen: set[bytes] = set()
        keep = []
        committed = self.committed
        for i, key in enumerate(keys):
            if key in committed or key in seen:
                continue
            seen.add(key)
            keep.append(i)
        return keep

    def is_committed(self, bid: str) -> bool:
        return os.path.isdir(self.batch_dir(bid))

    # ------------------------------------------------------------------ commit
    def commit(self, tmp: str, bid: str, keys: Sequence[bytes]) -> bool:
        """Make the batch written to ``tmp`` visible atomically. False if it already was."""
        keys_path = os.path.join(tmp, KEYS_FILE)
        with open(keys_path, "wb") as f:
            f.write(b"".join(keys))
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        final = self.batch_dir(bid)
        try:
            os.rename(tmp, final)
        except OSError:
            if os.path.isdir(final):  # another writer committed the same rows first
                self.abort(tmp)
                return False
            raise
        _fsync_dir(self.root)
        name = BATCH_DIR_PREFIX + bid
        self._dirs[name] = (self.clock.time(), list(keys))
        self.committed.update(keys)
        return True

    def abort(self, tmp: str) -> None:
        shutil.rmtree(tmp, ignore_errors=True)
