"""LocalState: a crash-safe, versioned key-value store in a local directory.

Workers keep their heartbeat in one; supervisors keep their id, local assignments and approved
workers in others (Storm's ``LocalState``/``VersionedStore``, ``docs/storm-model.md`` §3).

Each write stores the whole map as a new version file ``<version>.state``. Unlike Storm's
"marker file last" protocol, a version appears atomically: the bytes go to a temp file that is
fsynced, renamed into place with ``os.replace`` and the directory is fsynced. Each file carries a
SHA-256 of its content, so a torn, empty, truncated or bit-rotted newest version is detected; the
reader then falls back to the newest good version and logs a warning naming the bad file. It never
raises on bad files: with no good version at all, the state is empty.

File format (text, readable with ``cat``)::

    gale-localstate 1 <sha256 of the JSON body>
    {"key": value, ...}
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from gale.log import get_logger

log = get_logger("local_state")

MAGIC = "gale-localstate"
FORMAT_VERSION = 1
SUFFIX = ".state"


class LocalStateCorrupt(Exception):
    pass


def _encode(data: dict[str, Any]) -> bytes:
    body = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(body).hexdigest()
    return f"{MAGIC} {FORMAT_VERSION} {digest}\n".encode() + body + b"\n"


def _decode(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise LocalStateCorrupt("empty file")
    header, sep, rest = raw.partition(b"\n")
    if not sep:
        raise LocalStateCorrupt("no header line (torn write?)")
    parts = header.split(b" ")
    if len(parts) != 3 or parts[0] != MAGIC.encode():
        raise LocalStateCorrupt("bad header")
    if parts[1] != str(FORMAT_VERSION).encode():
        raise LocalStateCorrupt(f"unsupported format version {parts[1].decode(errors='replace')}")
    body = rest[:-1] if rest.endswith(b"\n") else rest
    if hashlib.sha256(body).hexdigest().encode() != parts[2]:
        raise LocalStateCorrupt("checksum mismatch (truncated or corrupted)")
    data = json.loads(body)
    if not isinstance(data, dict):
        raise LocalStateCorrupt("content is not a mapping")
    return data


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalState:
    """A versioned map in ``directory``; ``keep`` newest versions are retained after each write."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 4, *, fsync: bool = True):
        if keep < 1:
            raise ValueError("LocalState must keep at least one version")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.fsync = fsync
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    # -------------------------------------------------------------- versions

    def versions(self) -> list[int]:
        """Version numbers present on disk, newest first (good or not)."""
        out = []
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        for name in names:
            if name.endswith(SUFFIX) and name[: -len(SUFFIX)].isdigit():
                out.append(int(name[: -len(SUFFIX)]))
        return sorted(out, reverse=True)

    def _path(self, version: int) -> Path:
        return self.directory / f"{version:020d}{SUFFIX}"

    def _next_version(self) -> int:
        now = time.time_ns() // 1_000_000
        existing = self.versions()
        return max(now, existing[0] + 1) if existing else now

    # -------------------------------------------------------------- reading

    def snapshot(self) -> dict[str, Any]:
        """The newest readable version's map; ``{}`` if there is none."""
        for version in self.versions():
            path = self._path(version)
            try:
                data = _decode(path.read_bytes())
            except FileNotFoundError:
                continue  # removed by a concurrent cleanup: try the next one
            except (OSError, ValueError, LocalStateCorrupt) as exc:
                if str(path) not in self._warned:
                    self._warned.add(str(path))
                    log.warning("local-state-bad-version", path=str(path), problem=str(exc))
                continue
            return data
        return {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.snapshot().get(key, default)

    # -------------------------------------------------------------- writing

    def put(self, key: str, value: Any, *, cleanup: bool = True) -> None:
        self.update({key: value}, cleanup=cleanup)

    def update(self, values: dict[str, Any], *, cleanup: bool = True) -> None:
        with self._lock:
            data = self.snapshot()
            data.update(values)
            self._write(data)
            if cleanup:
                self._cleanup()

    def remove(self, key: str) -> None:
        with self._lock:
            data = self.snapshot()
            if key in data:
                del data[key]
                self._write(data)
                self._cleanup()

    def _write(self, data: dict[str, Any]) -> None:
        raw = _encode(data)
        target = self._path(self._next_version())
        tmp = self.directory / f".tmp-{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(raw)
                fh.flush()
                if self.fsync:
                    os.fsync(fh.fileno())
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                tmp.unlink()
        if self.fsync:
            _fsync_dir(self.directory)

    def _cleanup(self) -> None:
        """Keep the ``keep`` newest versions; also remove stale temp files of crashed writers."""
        for version in self.versions()[self.keep :]:
            try:
                self._path(version).unlink()
            except FileNotFoundError:
                pass
        for name in os.listdir(self.directory):
            if name.startswith(".tmp-"):
                path = self.directory / name
                try:
                    if time.time() - path.stat().st_mtime > 60:
                        path.unlink()
                except FileNotFoundError:
                    pass

    def cleanup(self, keep: int | None = None) -> None:
        with self._lock:
            if keep is not None:
                old, self.keep = self.keep, keep
                try:
                    self._cleanup()
                finally:
                    self.keep = old
            else:
                self._cleanup()
