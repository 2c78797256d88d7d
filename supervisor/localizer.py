"""Downloading topology code from nimbus into ``<storm.local.dir>/supervisor/stormdist/<id>``.

Downloads run on a small thread pool so a slow nimbus never blocks the slot loop. Each bundle is
verified against the checksum in the assignment before it is unpacked (safely, see
:mod:`gale.bundle`) and moved into place atomically; a truncated or tampered download is
discarded and retried with backoff.

With the code, the supervisor fetches from the same nimbus the configuration nimbus stored at
submit — which holds the topology's transport secret — over the API with the cluster's token, and
writes it as ``stormconf.json``, mode 0600, beside the code (the directory itself is 0700). The
secret never comes from ZooKeeper or the user's bundle. Code counts as ready only with that file.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from gale.bundle import BundleError, checksum, extract_bundle
from gale.log import get_logger

log = get_logger("supervisor.localizer")

RETRY_SECS = 3.0
STORMCONF = "stormconf.json"  # read by gale.worker.daemon


class CodeSource:
    """One nimbus that may hold a topology's code: ``code()`` downloads the bundle, ``stored_conf()``
    the configuration with the secret."""

    def __init__(self, name: str, code: Callable[[], bytes], stored_conf: Callable[[], dict[str, Any]]):
        self.name = name
        self.code = code
        self.stored_conf = stored_conf


def write_private_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically, readable by this user only (0600)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with open(fd, "w") as fh:
            json.dump(data, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class Localizer:
    def __init__(self, local_dir: str | Path, fetch: Callable[[str], list[CodeSource]],
                 on_ready: Callable[[], None] = lambda: None, metrics: Any = None, threads: int = 2):
        self.root = Path(local_dir) / "supervisor" / "stormdist"
        self.root.mkdir(parents=True, exist_ok=True)
        self.fetch = fetch  # topology id -> the nimbuses to try, in order
        self.on_ready = on_ready
        self.metrics = metrics
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="localizer")
        self._lock = threading.Lock()
        self._inflight: set[tuple[str, str]] = set()
        self._retry_after: dict[tuple[str, str], float] = {}
        self.failures: dict[tuple[str, str], str] = {}

    def dir(self, topology_id: str) -> Path:
        return self.root / topology_id

    def ready(self, topology_id: str, digest: str) -> bool:
        try:
            return ((self.dir(topology_id) / "CHECKSUM").read_text().strip() == digest
                    and (self.dir(topology_id) / STORMCONF).is_file())
        except (FileNotFoundError, NotADirectoryError):
            return False

    def request(self, topology_id: str, digest: str) -> None:
        key = (topology_id, digest)
        with self._lock:
            if key in self._inflight or self.ready(topology_id, digest):
                return
            if time.monotonic() < self._retry_after.get(key, 0.0):
                return
            self._inflight.add(key)
        self._pool.submit(self._download, topology_id, digest)

    def _download(self, topology_id: str, digest: str) -> None:
        key = (topology_id, digest)
        ok = False
        try:
            sources = self.fetch(topology_id)
            if not sources:
                raise BundleError("no nimbus is known to hold this topology's code")
            problems = []
            for source in sources:
                name = source.name
                try:
                    data = source.code()
                except Exception as exc:  # noqa: BLE001 - network trouble: try the next source
                    problems.append(f"{name}: {type(exc).__name__}: {exc}")
                    continue
                got = checksum(data)
                if got != digest:
                    problems.append(f"{name}: checksum {got[:12]} != expected {digest[:12]} (truncated or tampered)")
                    continue
                try:
                    stored_conf = source.stored_conf()
                except Exception as exc:  # noqa: BLE001 - no token, an old nimbus: try the next source
                    problems.append(f"{name}: no topology secret: {type(exc).__name__}: {exc}")
                    continue
                dest = extract_bundle(data, self.dir(topology_id))
                write_private_json(dest / STORMCONF, stored_conf)
                ok = True
                log.info("code-downloaded", topology=topology_id, source=name, bytes=len(data))
                if self.metrics is not None:
                    self.metrics.code_downloads.labels(result="ok").inc()
                break
            if not ok:
                raise BundleError("; ".join(problems) or "no source")
        except Exception as exc:  # noqa: BLE001
            self.failures[key] = str(exc)
            log.error("code-download-failed", topology=topology_id, error=str(exc))
            if self.metrics is not None:
                self.metrics.code_downloads.labels(result="error").inc()
            with self._lock:
                self._retry_after[key] = time.monotonic() + RETRY_SECS
        finally:
            with self._lock:
                self._inflight.discard(key)
        if ok:
            self.failures.pop(key, None)
            self.on_ready()

    def cleanup(self, keep: set[str]) -> None:
        for path in self.root.iterdir():
            if path.name.startswith("."):
                if time.time() - path.stat().st_mtime > 300:
                    shutil.rmtree(path, ignore_errors=True)
                continue
            if path.name not in keep:
                shutil.rmtree(path, ignore_errors=True)
                log.info("code-removed", topology=path.name)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
