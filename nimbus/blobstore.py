"""Nimbus's code store: one directory per topology under ``<storm.local.dir>/nimbus/stormdist``.

Files per topology: ``stormcode.tar.gz`` (the bundle), ``stormtopology.json`` and ``stormconf.json``
(unpacked copies nimbus reads without touching user code) and ``CHECKSUM``. Writes are atomic
(temp directory, fsync, rename), so a crash never leaves a half-written topology behind.

``stormconf.json`` is the configuration nimbus stored at submit, with the topology's transport
secret (``topology.secret``); it is written mode 0600 (the topology directories are 0700) and leaves
this store only through the token-guarded route supervisors and standby nimbuses use.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gale.bundle import BundleError, checksum, read_bundle
from gale.config import stored_secret
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
                mode = 0o600 if name == CONF else 0o644
                with open(os.open(tmp / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as fh:
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

    def put_bundle(self, topology_id: str, bundle: bytes, stored_conf: dict[str, Any] | None = None) -> str:
        """Store a bundle received from another nimbus, with the configuration that nimbus stored
        (its secret included); without one, the bundle's own conf (no secret: workers will not run)."""
        definition, conf = read_bundle(bundle)
        if stored_conf is not None:
            if not isinstance(stored_conf, dict) or stored_secret(stored_conf) is None:
                raise BundleError(f"the stored configuration of {topology_id} has no topology.secret")
            conf = stored_conf
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

    def stored_conf(self, topology_id: str) -> dict[str, Any] | None:
        """The stored configuration with the secret, or None when this nimbus holds none."""
        path = self.dir(topology_id) / CONF  # ValueError for an invalid id
        try:
            conf = json.loads(path.read_text())
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            return None
        return conf if isinstance(conf, dict) else None

    def ids(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def delete(self, topology_id: str) -> None:
        shutil.rmtree(self.dir(topology_id), ignore_errors=True)
