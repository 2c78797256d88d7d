"""Idempotent, atomic, durable micro-batch commits for Spark sinks (local and mounted filesystems).

Storm gives no stable identity to a replayed tuple's tree (a replay is a new tuple tree with new
random ids), so a sink recognises a row it has already written by a *key*: by default the key of
the input tuple's **lineage** (the stable identity of the spout message and of the emits that led
to the tuple, :mod:`gale.worker.runtime.lineage`) together with its values; with the sink's
``key_fields``, the values of those fields. Keys are 16-byte hashes (:func:`row_key`,
:func:`lineage_key`).

Layout under the sink's path::

    <path>/gale_batch=<batch id>/part-*.parquet   one directory per committed batch
    <path>/gale_batch=<batch id>/_gale_keys       the 16-byte keys of its rows (readers skip "_" files)
    <path>/_gale_tmp/t<task>-<batch id>-<nonce>/  a batch being written (readers skip "_" dirs)

The commit protocol (:meth:`LocalBatchCommitter.commit`), in this order:

1. Spark writes the batch into the temporary directory (its own commit protocol);
2. the keys file is written into it;
3. **every file and every directory** under the temporary directory is fsynced (Spark's part
   files, its ``_SUCCESS`` and checksum files, partition directories, the keys file) — Spark
   itself does not fsync, so without this a power loss could leave a batch recorded as
   committed whose data never reached the disk, and its replays would then be skipped;
4. the commit marker: the temporary directory is renamed to ``gale_batch=<id>`` (one atomic
   step, so a crash never leaves a partial batch visible);
5. the sink's directory is fsynced, so the rename itself is durable before the batch's tuples
   are acked.

Every file operation goes through a :class:`FileLayer` (injected; a test records the exact
sequence). Rows whose key is already in a committed batch (within ``window_secs``) or repeated
inside the batch are not written again, so a replay — in the same batch or regrouped with other
tuples — does not duplicate rows. The batch id is a hash of the batch's keys: two writers
committing the same rows race for the same directory name and only one wins. Stale temporaries
are removed when the task starts.

``spark.read.parquet(<path>)`` reads every committed row plus a ``gale_batch`` column.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import errno
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


def lineage_key(lineage: int, values: Sequence[Any]) -> bytes:
    """The key of a row from an input tuple with this (non-zero) lineage: the same input — the
    same spout message through the same emits — replayed gives the same key; identical values
    from different inputs give different keys."""
    return row_key([{"$lineage": lineage}, *values])


def unique_key() -> bytes:
    """A key no other row has: for rows whose input has no lineage (untracked tuples are never
    replayed, so they are always written)."""
    return uuid.uuid4().bytes


class FileLayer:
    """The file operations of the commit protocol, on the local (or a mounted) filesystem.

    Injected into :class:`LocalBatchCommitter` so a test can record the exact sequence of
    operations; every method raises :class:`OSError` on failure (the batch then fails and its
    tuples replay), except that a filesystem refusing to fsync a *directory* (``EINVAL``, as some
    network and FUSE filesystems do) is tolerated.
    """

    def write(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data`` (not yet fsynced)."""
        with open(path, "wb") as f:
            f.write(data)

    def fsync_file(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        """The commit marker: ``src`` (a directory) appears as ``dst`` in one atomic step.
        Fails if ``dst`` exists."""
        os.rename(src, dst)

    def walk(self, root: str) -> tuple[list[str], list[str]]:
        """Every file and every directory under ``root`` (``root`` included), directories deepest
        first (symbolic links to directories are not followed)."""
        files: list[str] = []
        dirs: list[str] = []
        for here, _subdirs, names in os.walk(root, topdown=False, followlinks=False):
            files.extend(os.path.join(here, n) for n in sorted(names))
            dirs.append(here)
        return files, dirs

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


class LocalBatchCommitter:
    """The commit protocol of one sink task on a local (or NFS-mounted) directory.

    Not thread-safe: one task uses it from its one batch thread at a time.
    """

    def __init__(self, path: str, component: str, task: int, window_secs: float = 3600.0, clock: Any = time,
                 files: FileLayer | None = None):
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
        self.files = files or FileLayer()
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
                self.files.remove_tree(os.path.join(self.temp_root, name))
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
        """Make the batch written to ``tmp`` durable and visible atomically (steps 2–5 of the
        module's protocol). False if another writer committed the same batch first."""
        files = self.files
        files.write(os.path.join(tmp, KEYS_FILE), b"".join(keys))
        written, dirs = files.walk(tmp)
        for path in written:
            files.fsync_file(path)
        for path in dirs:  # deepest first, ``tmp`` last
            files.fsync_dir(path)
        final = self.batch_dir(bid)
        try:
            files.rename(tmp, final)
        except OSError:
            if os.path.isdir(final):  # another writer committed the same rows first
                self.abort(tmp)
                return False
            raise
        files.fsync_dir(self.root)
        name = BATCH_DIR_PREFIX + bid
        self._dirs[name] = (self.clock.time(), list(keys))
        self.committed.update(keys)
        return True

    def abort(self, tmp: str) -> None:
        self.files.remove_tree(tmp)
