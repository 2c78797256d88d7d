"""Topology code bundles: what ``nimbus submit`` ships and supervisors unpack for their workers.

A bundle is a gzipped tar holding ``topology.json`` (the :class:`TopologyDef`), ``conf.json`` (the
topology's own config) and ``code/`` (the topology file's directory: its Python modules and data
files). Its SHA-256 is recorded in the assignment and checked end to end by every supervisor.

Extraction is defensive: absolute paths, ``..`` components, links, devices and oversized members are
refused, so a crafted bundle cannot write outside its directory.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from gale.errors import GaleError

SKIP_DIRS = {"__pycache__", ".git", ".venv", "venv", "node_modules", ".mypy_cache", ".pytest_cache", ".hypothesis"}
SKIP_SUFFIXES = (".pyc", ".pyo")
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
MAX_MEMBERS = 20000


class BundleError(GaleError):
    """A bundle could not be built, read or safely extracted."""


def checksum(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def make_bundle(code_dir: str | os.PathLike[str] | None, definition_json: str, conf: dict[str, Any],
                max_bytes: int = MAX_BUNDLE_BYTES) -> bytes:
    """Build a bundle from ``code_dir`` (regular files only; caches, VCS and venvs skipped)."""
    buf = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        _add_bytes(tar, "topology.json", definition_json.encode())
        _add_bytes(tar, "conf.json", json.dumps(conf, sort_keys=True).encode())
        if code_dir is not None:
            root = Path(code_dir).resolve()
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
                for name in sorted(filenames):
                    if name.endswith(SKIP_SUFFIXES) or name.startswith("."):
                        continue
                    path = Path(dirpath) / name
                    if path.is_symlink() or not path.is_file():
                        continue
                    total += path.stat().st_size
                    if total > max_bytes:
                        raise BundleError(
                            f"topology code in {root} exceeds {max_bytes // (1024 * 1024)} MB; "
                            "move data files out of the topology's directory or use --bundle-dir"
                        )
                    rel = path.relative_to(root).as_posix()
                    _add_bytes(tar, f"code/{rel}", path.read_bytes())
    return buf.getvalue()


def _safe_members(tar: tarfile.TarFile, max_bytes: int) -> list[tarfile.TarInfo]:
    members = []
    total = 0
    for i, m in enumerate(tar):
        if i >= MAX_MEMBERS:
            raise BundleError(f"bundle has more than {MAX_MEMBERS} entries")
        name = m.name
        parts = Path(name).parts
        if name.startswith("/") or os.path.isabs(name) or ".." in parts or not parts:
            raise BundleError(f"bundle entry {name!r} would be written outside the bundle directory")
        if not (m.isfile() or m.isdir()):
            raise BundleError(f"bundle entry {name!r} is a link or special file; only regular files are allowed")
        total += m.size
        if total > max_bytes:
            raise BundleError(f"bundle unpacks to more than {max_bytes // (1024 * 1024)} MB")
        members.append(m)
    return members


def read_bundle(data: bytes, max_bytes: int = MAX_BUNDLE_BYTES) -> tuple[str, dict[str, Any]]:
    """(definition JSON, conf) from a bundle without extracting the code."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            _safe_members(tar, max_bytes)
            definition = _member_text(tar, "topology.json")
            conf = json.loads(_member_text(tar, "conf.json"))
    except (tarfile.TarError, OSError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"bundle is not a valid gzipped tar: {exc}") from None
    if not isinstance(conf, dict):
        raise BundleError("bundle conf.json is not a mapping")
    return definition, conf


def _member_text(tar: tarfile.TarFile, name: str) -> str:
    try:
        fh = tar.extractfile(name)
    except KeyError:
        raise BundleError(f"bundle has no {name}") from None
    if fh is None:
        raise BundleError(f"bundle entry {name} is not a file")
    return fh.read().decode()


def extract_bundle(data: bytes, dest: str | os.PathLike[str], max_bytes: int = MAX_BUNDLE_BYTES) -> Path:
    """Extract into a temp dir next to ``dest``, then move it into place atomically."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                members = _safe_members(tar, max_bytes)
                tar.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BundleError(f"cannot extract bundle: {exc}") from None
        for required in ("topology.json", "conf.json"):
            if not (tmp / required).is_file():
                raise BundleError(f"bundle has no {required}")
        (tmp / "code").mkdir(exist_ok=True)
        (tmp / "CHECKSUM").write_text(checksum(data))
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
