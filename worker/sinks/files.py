"""The file sink: one part file per task and checkpoint, JSON lines or Parquet (pyarrow).

::

    builder.set_bolt("to-files", FileSink, 2, kwargs={"path": "/data/counts", "format": "parquet"})

At PREPARE the task's records of checkpoint ``m`` are written to ``<path>/_pending/<transaction
name>.<ext>`` (through a temporary name, fsynced, renamed, the directory fsynced): durable, and
invisible to readers — Spark, pyarrow datasets, pandas and Hive skip paths starting with ``_`` or
``.``; :func:`read_parts` does too. At COMMIT the pending file is renamed into place,
``<path>/part-<topology>-<component>-<task>-<txid>.<ext>`` (txid zero-padded, so names sort in
commit order per task), and the directory fsynced; an abandoned checkpoint's pending file is
deleted. A restarted task finds its pending files and the coordinator's record decides. A rename
is atomic: a reader sees a whole part or none.

A committed part is never overwritten: a part of the same name from an earlier run of the topology
(its checkpoint record deleted, so txids start again) fails the commit, naming both files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gale.errors import ConfigError
from gale.local_state import _fsync_dir
from gale.topology.sink import Batch, SinkError, TransactionalSink

PENDING = "_pending"
FORMATS = {"jsonl": ".jsonl", "parquet": ".parquet"}


class FileSink(TransactionalSink):
    """See the module docstring. ``path``: the directory of the parts (made if missing);
    ``format``: ``jsonl`` (a record is any JSON-serializable value; others are written with
    ``str``) or ``parquet`` (records are dicts; their columns are the union of their keys)."""

    def __init__(self, path: str, format: str = "jsonl", guarantee: str | None = None, dead_letters: bool = False):
        super().__init__(guarantee=guarantee, dead_letters=dead_letters)
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise ConfigError(f"FileSink path must be a directory path, got {path!r}")
        if format not in FORMATS:
            raise ConfigError(f"FileSink format {format!r}: use one of {sorted(FORMATS)}")
        self.path, self.format = str(path), format

    def open_store(self) -> FileStore:
        return FileStore(self.path, self.format, self.sink_name)


class FileStore:
    def __init__(self, path: str, format: str, name: Any):
        self.root, self.format, self.name = Path(path), format, name
        self.pending = self.root / PENDING
        self.ext = FORMATS[format]
        self.where = f"file sink {name.component!r} at {self.root}"
        self._made = False

    def _dirs(self) -> None:
        if not self._made:
            self.pending.mkdir(parents=True, exist_ok=True)
            self._made = True

    def _io(self, what: str, fn: Any) -> Any:
        try:
            self._dirs()
            return fn()
        except SinkError:
            raise
        except (OSError, ValueError, TypeError) as exc:
            raise SinkError(f"{self.where}: {what}: {type(exc).__name__}: {exc}") from None

    def pending_file(self, txn: str) -> Path:
        return self.pending / f"{txn}{self.ext}"

    def part_file(self, txn: str) -> Path:
        index, txid = self.name.parse(txn)
        stem = self.name.component_prefix.rstrip(":").replace(":", "-")[len("gale-"):]
        return self.root / f"part-{stem}-{index}-{txid:012d}{self.ext}"

    def new_batch(self) -> Batch:
        return Batch()

    def prepared(self) -> list[str]:
        def scan() -> list[str]:
            return sorted(p.name[:-len(self.ext)] for p in self.pending.iterdir()
                          if p.name.endswith(self.ext) and p.name.startswith(self.name.component_prefix))

        return self._io("listing pending parts", scan)

    def prepare(self, name: str, txid: int, batch: Batch, refused: Any) -> int:
        final = self.pending_file(name)

        def write() -> int:
            tmp = final.with_name("." + final.name + ".tmp")
            if self.format == "jsonl":
                with open(tmp, "w", encoding="utf-8") as fh:
                    for record in batch:
                        fh.write(json.dumps(record, default=str, separators=(",", ":")))
                        fh.write("\n")
                    fh.flush()
                    os.fsync(fh.fileno())
            else:
                import pyarrow as pa
                import pyarrow.parquet as pq

                table = pa.Table.from_pylist(list(batch))
                with open(tmp, "wb") as fh:
                    pq.write_table(table, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, final)
            _fsync_dir(self.pending)
            return len(batch)

        return self._io(f"writing {final.name}", write)

    def commit(self, name: str) -> None:
        pending, part = self.pending_file(name), self.part_file(name)

        def rename() -> None:
            if not pending.exists():
                return  # committed already (or aborted): nothing to do
            if part.exists():
                raise SinkError(f"{self.where}: cannot commit {pending.name}: {part} already exists — a part of an "
                                "earlier run of the topology whose checkpoint record was deleted; move it away")
            os.replace(pending, part)
            _fsync_dir(self.root)
            _fsync_dir(self.pending)

        self._io(f"committing {name}", rename)

    def abort(self, name: str) -> None:
        def remove() -> None:
            self.pending_file(name).unlink(missing_ok=True)
            _fsync_dir(self.pending)

        self._io(f"aborting {name}", remove)

    def close(self) -> None:
        pass


def part_files(path: str | os.PathLike) -> list[Path]:
    """The committed parts under ``path``, in name order (never a pending or temporary file)."""
    root = Path(path)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_file() and p.name.startswith("part-")
                  and p.suffix in FORMATS.values())


def read_parts(path: str | os.PathLike) -> list[Any]:
    """Every committed record under ``path`` (JSON lines and Parquet parts), part by part."""
    return list(_records(part_files(path)))


def _records(parts: list[Path]) -> Iterator[Any]:
    for part in parts:
        if part.suffix == ".jsonl":
            with open(part, encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        yield json.loads(line)
        else:
            import pyarrow.parquet as pq

            yield from pq.read_table(part).to_pylist()
