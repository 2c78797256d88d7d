"""Nimbus's code store: one directory per topology under ``<storm.local.dir>/nimbus/stormdist``.

Files per topology: ``stormcode.tar.gz`` (the bundle), ``stormtopology.json`` and ``stormconf.json``
(unpacked copies nimbus reads without touching user code) and ``CHECKSUM``. Writes are atomic
(temp directory, fsync, rename), so a crash never leaves a half-written topology behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gale.bundle import BundleError, checksum, read_bundle
from gale.log import get_logger

log = get_logger("blobstore")

BUNDLE = "stormcode.tar.gz"
DEFINITION = "stormtopology.json"
CONF = "stormconf.json"
CHECKSUM = "CHECKSUM"


class BlobStore:
    def __init__(self, local_dir: str | os.PathLike[str]):
        self.root = Path(local_dir) / "nimbus" / "stormdist"
        self.root.mkdir(parents=True, exist_ok=True)

    def dir(self, topology_id: str) -> Path:
        if "/" in topology_id or topology_id in ("", ".", ".."):
            raise ValueError(f"invalid topology id {topology_id!r}")
        return self.root / topology_id

    def put(self, topology_id: str, bundle: bytes, definition_json: str, conf: dict[str, Any]) -> str:
        """Store a topology's bundle; returns its checksum."""
        digest = checksum(bundle)
        tmp = Path(tempfile.mkdtemp(prefix=f".{topology_id}.", dir=self.root))
        try:
            for name, data in (
                (BUNDLE, bundle),
                (DEFINITION, definition_json.encode()),
                (CONF, json.dumps(conf, sort_keys=True).encode()),
                (CHECKSUM, digest.encode()),
            ):
                with open(tmp / name, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            target = self.dir(topology_id)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
            fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return digest

    def put_bundle(self, topology_id: str, bundle: bytes) -> str:
        """Store a bundle received from another nimbus (definition and conf read from it)."""
        definition, conf = read_bundle(bundle)
        return self.put(topology_id, bundle, definition, conf)

    def has(self, topology_id: str, digest: str | None = None) -> bool:
        d = self.dir(topology_id)
        if not (d / BUNDLE).is_file() or not (d / CHECKSUM).is_file():
            return False
        return digest is None or (d / CHECKSUM).read_text().strip() == digest

    def checksum(self, topology_id: str) -> str | None:
        try:
            return (self.dir(topology_id) / CHECKSUM).read_text().strip()
        except FileNotFoundError:
            return None

    def bundle_path(self, topology_id: str) -> Path:
        return self.dir(topology_id) / BUNDLE

    def bundle(self, topology_id: str) -> bytes:
        return self.bundle_path(topology_id).read_bytes()

    def definition_json(self, topology_id: str) -> str:
        return (self.dir(topology_id) / DEFINITION).read_text()

    def conf(self, topology_id: str) -> dict[str, Any]:
        return json.loads((self.dir(topology_id) / CONF).read_text())

    def verify(self, topology_id: str) -> bool:
        """True when the stored bundle still matches its checksum."""
        try:
            return checksum(self.bundle(topology_id)) == self.checksum(topology_id)
        except (FileNotFoundError, BundleError):
            return False

    def ids(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def delete(self, topology_id: str) -> None:
        shutil.rmtree(self.dir(topology_id), ignore_errors=True)
