"""The files a supervisor's log server may show, and how it reads them: paged and searched.

Everything is relative to the supervisor's log directory (``storm.log.dir``): its own
``supervisor.log`` and, per worker, ``workers-artifacts/<topology-id>/<port>/`` with ``worker.log``,
``worker.out``, ``events.log`` (sampled tuples), thread dumps (``threaddump-*.txt``) and CPU
profiles (``profile-*.svg``). :func:`resolve` is the only way from a requested name to a file:

* the name is relative, ``/``-separated, each segment made of letters, digits, ``.``, ``_`` and
  ``-`` only (so no ``..``, no absolute path, no backslash, no percent-encoding left over, no NUL);
* the file name is a log, an output, a dump or a profile (:data:`KINDS`): nothing else under the
  directory is served, even if ``storm.log.dir`` were set to a directory holding secrets;
* the file, with every symbolic link resolved, must lie inside the log directory and be a regular
  file.

Limits (each refused with its reason when exceeded): a page is at most :data:`PAGE_MAX` bytes
(default :data:`PAGE_DEFAULT`, the file's tail when no start is given); a search looks for 1 to
:data:`NEEDLE_MAX` characters, returns at most :data:`MATCHES_MAX` matches and scans at most
:data:`SCAN_MAX` bytes per request (it says where to go on); lines are shown up to
:data:`LINE_MAX` bytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gale.errors import GaleError, NotFoundError

PAGE_DEFAULT = 64 * 1024
PAGE_MAX = 1024 * 1024
NEEDLE_MAX = 256
MATCHES_DEFAULT = 20
MATCHES_MAX = 100
SCAN_MAX = 64 * 1024 * 1024
LINE_MAX = 2048
NAME_MAX = 512
_SEGMENT = re.compile(r"^[A-Za-z0-9_.-]{1,255}$")
#: the files served: logs (and their rotations), process output, thread dumps, profiles
KINDS = re.compile(r"^[A-Za-z0-9_.-]+\.(log(\.\d{1,3})?|out|txt|svg)$")


class LogPathError(GaleError):
    """A requested log name that is refused (the message says why)."""


@dataclass(frozen=True)
class WorkerRef:
    """A worker this supervisor runs: where its files are and which processes are it."""

    port: int
    topology_id: str
    worker_id: str
    worker_dir: Path       # the worker's own directory (its control socket)
    artifacts: str         # its artifacts directory, relative to the log directory
    pid: int | None        # its process, None when not running
    alive: Callable[[], bool]


@dataclass(frozen=True)
class LogFile:
    name: str  # relative to the log directory, with "/"
    path: Path


def check_name(name: str) -> list[str]:
    """The segments of an acceptable relative name, or :class:`LogPathError` naming the problem."""
    if not name:
        raise LogPathError("no file named: pass file=<path relative to the log directory> (GET .../logs lists them)")
    if len(name) > NAME_MAX:
        raise LogPathError(f"file name of {len(name)} characters is longer than {NAME_MAX}")
    if "\x00" in name:
        raise LogPathError("file name contains a NUL character")
    if "\\" in name:
        raise LogPathError(f"file name {name!r} contains a backslash: use '/' between directories")
    if name.startswith("/"):
        raise LogPathError(f"file name {name!r} is absolute: give it relative to the log directory")
    segments = name.split("/")
    for seg in segments:
        if seg in ("", ".", ".."):
            raise LogPathError(f"file name {name!r} has an empty, '.' or '..' segment: only paths inside the log "
                               "directory are served")
        if not _SEGMENT.match(seg):
            raise LogPathError(f"file name {name!r}: segment {seg!r} has characters other than letters, digits, "
                               "'.', '_' and '-'")
    if not KINDS.match(segments[-1]):
        raise LogPathError(f"{segments[-1]!r} is not a log file: the log server serves *.log (and rotations "
                           "*.log.N), *.out, *.txt (thread dumps) and *.svg (profiles)")
    return segments


def resolve(root: Path, name: str) -> LogFile:
    """The file ``name`` names under ``root`` (see the module docstring); 404 when it does not exist."""
    segments = check_name(name)
    base = root.resolve()
    candidate = base.joinpath(*segments)
    try:
        real = candidate.resolve(strict=True)
    except FileNotFoundError:
        raise NotFoundError(f"no log file {name!r} on this supervisor (GET .../logs lists them)") from None
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise LogPathError(f"file {name!r} cannot be opened: {exc}") from None
    if not real.is_relative_to(base):
        raise LogPathError(f"file {name!r} leads outside the log directory (a symbolic link): refused")
    if not real.is_file():
        raise LogPathError(f"{name!r} is not a regular file")
    return LogFile(name="/".join(segments), path=real)


def list_files(root: Path, limit: int = 2000) -> list[dict[str, Any]]:
    """Every servable file under ``root`` (links not followed), newest first: name, size, mtime."""
    out = []
    base = root.resolve()
    if not base.is_dir():
        return []
    for directory, dirs, files in os.walk(base, followlinks=False):
        dirs[:] = sorted(d for d in dirs if _SEGMENT.match(d))
        for f in files:
            p = Path(directory) / f
            rel = p.relative_to(base).as_posix()
            if not KINDS.match(f) or p.is_symlink():
                continue
            try:
                st = p.stat()
            except FileNotFoundError:
                continue  # rotated away meanwhile
            out.append({"file": rel, "size": st.st_size, "mtime": int(st.st_mtime)})
    out.sort(key=lambda e: (-e["mtime"], e["file"]))
    return out[:limit]


def read_page(f: LogFile, start: int | None, length: int = PAGE_DEFAULT) -> dict[str, Any]:
    """``length`` bytes from ``start`` (None: the file's last ``length`` bytes), as text."""
    if not 1 <= length <= PAGE_MAX:
        raise LogPathError(f"length {length} is out of range: 1 to {PAGE_MAX} bytes")
    if start is not None and start < 0:
        raise LogPathError(f"start {start} is negative: give a byte offset from 0 (or none for the tail)")
    with open(f.path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        begin = max(0, size - length) if start is None else min(start, size)
        fh.seek(begin)
        data = fh.read(length)
    end = begin + len(data)
    return {"file": f.name, "size": size, "start": begin, "end": end, "length": len(data),
            "data": data.decode("utf-8", errors="replace"),
            "prev": max(0, begin - length) if begin > 0 else None, "next": end if end < size else None}


def search(f: LogFile, needle: str, start: int = 0, max_matches: int = MATCHES_DEFAULT,
           ignore_case: bool = False, scan_max: int = SCAN_MAX) -> dict[str, Any]:
    """Lines of the file from byte ``start`` that contain ``needle``: each match's byte offset
    (of its line) and the line; ``next`` is where to go on (more matches, or the scan budget spent)."""
    if not 1 <= len(needle) <= NEEDLE_MAX:
        raise LogPathError(f"search text of {len(needle)} characters: give 1 to {NEEDLE_MAX}")
    if not 1 <= max_matches <= MATCHES_MAX:
        raise LogPathError(f"max matches {max_matches} is out of range: 1 to {MATCHES_MAX}")
    if start < 0:
        raise LogPathError(f"start {start} is negative")
    want = needle.encode("utf-8")
    if ignore_case:
        want = want.lower()
    matches = []
    with open(f.path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        offset = min(start, size)
        fh.seek(offset)
        scanned = 0
        next_start = None
        while True:
            line = fh.readline(LINE_MAX * 32)
            if not line:
                break
            hay = line.lower() if ignore_case else line
            if want in hay:
                if len(matches) == max_matches:
                    next_start = offset
                    break
                text = line.rstrip(b"\n")
                matches.append({"offset": offset, "match": offset + hay.index(want),
                                "line": text[:LINE_MAX].decode("utf-8", errors="replace"),
                                "truncated": len(text) > LINE_MAX})
            offset += len(line)
            scanned += len(line)
            if scanned >= scan_max and offset < size:
                next_start = offset
                break
    return {"file": f.name, "size": size, "start": min(start, size), "search": needle, "ignoreCase": ignore_case,
            "matches": matches, "next": next_start, "scanned": scanned}
