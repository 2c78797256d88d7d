"""How a sink's records become rows of a keyed table, pure: the batch of one checkpoint (upserts keep
the last value per key, deltas add up) and the checks that name what is wrong with a record. Used by
the PostgreSQL and Redis sinks.

=================== ============================================================================
option              a record (a dict: column → value) ...
=================== ============================================================================
``key=()``           is appended: every record is a row (``INSERT``)
``key=("word",)``    is upserted by its key columns: the last record of a key in a checkpoint
                     wins (``INSERT … ON CONFLICT (word) DO UPDATE SET col = EXCLUDED.col``)
``deltas=("n",)``    adds its delta columns to the row's (summed over the checkpoint, then
                     ``SET n = table.n + EXCLUDED.n``); the other columns are upserted
``columns=(...)``    is written in these columns only (default: the first record's keys); a
                     record without one of them fails, naming it
=================== ============================================================================
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gale.errors import ConfigError


class RowError(ValueError):
    """A record that cannot be a row (not a dict, a column missing, a delta that is not a number)."""


class RowSpec:
    def __init__(self, key: Sequence[str] = (), deltas: Sequence[str] = (), columns: Sequence[str] | None = None,
                 where: str = "sink"):
        self.key = tuple(_names(key, "key", where))
        self.deltas = tuple(_names(deltas, "deltas", where))
        self.columns = tuple(_names(columns, "columns", where)) if columns is not None else None
        if self.deltas and not self.key:
            raise ConfigError(f"{where}: deltas {list(self.deltas)} need key columns to add up by (key=...)")
        overlap = set(self.key) & set(self.deltas)
        if overlap:
            raise ConfigError(f"{where}: columns {sorted(overlap)} cannot be both key and delta columns")
        if self.columns is not None:
            missing = [c for c in self.key + self.deltas if c not in self.columns]
            if missing:
                raise ConfigError(f"{where}: key and delta columns {missing} are not among columns {list(self.columns)}")

    def columns_of(self, record: Mapping[str, Any]) -> tuple[str, ...]:
        return self.columns if self.columns is not None else tuple(record)

    def key_of(self, record: Any) -> Any:
        """The record's key (a value, or a tuple of values for several key columns) for messages."""
        if not isinstance(record, Mapping):
            return None
        values = tuple(record.get(k) for k in self.key)
        return values[0] if len(values) == 1 else values


def _names(names: Sequence[str] | None, what: str, where: str) -> list[str]:
    if names is None:
        return []
    if isinstance(names, str):
        names = (names,)
    out = list(names)
    bad = [n for n in out if not isinstance(n, str) or not n]
    if bad:
        raise ConfigError(f"{where}: {what} must be column names (strings), got {bad!r}")
    return out


class RowBatch:
    """The rows of one checkpoint of one task, in the order they are to be written."""

    def __init__(self, spec: RowSpec):
        self.spec = spec
        self.columns: tuple[str, ...] | None = spec.columns
        self._append: list[tuple] = []
        self._keyed: dict[Any, list] = {}
        self._delta_at: tuple[int, ...] = ()
        self._key_at: tuple[int, ...] = ()
        self._indexed = False
        self.records = 0

    def add(self, record: Any) -> None:
        if not isinstance(record, Mapping):
            raise RowError(f"a sink record must be a dict of column → value, got {type(record).__name__}: {record!r}")
        if not self._indexed:
            if self.columns is None:
                self.columns = self.spec.columns_of(record)
            self._index()
        try:
            row = [record[c] for c in self.columns]
        except KeyError as exc:
            raise RowError(f"record {record!r} has no column {exc.args[0]!r} (columns: {list(self.columns)})") from None
        self.records += 1
        if not self.spec.key:
            self._append.append(tuple(row))
            return
        key = tuple(row[i] for i in self._key_at)
        try:
            old = self._keyed.get(key)
        except TypeError:
            raise RowError(f"record {record!r}: key {key!r} is not hashable") from None
        for i in self._delta_at:
            if not isinstance(row[i], (int, float)) or isinstance(row[i], bool):
                raise RowError(f"record with key {self.spec.key_of(record)!r}: delta column {self.columns[i]!r} "
                               f"must be a number, got {row[i]!r}")
            if old is not None:
                row[i] += old[i]
        if old is not None:
            del self._keyed[key]  # the last record of a key goes last
        self._keyed[key] = row

    def _index(self) -> None:
        cols = self.columns
        missing = [k for k in self.spec.key + self.spec.deltas if k not in cols]
        if missing:
            raise RowError(f"records have no column {missing[0]!r} (columns: {list(cols)}; key {list(self.spec.key)}, "
                           f"deltas {list(self.spec.deltas)})")
        self._key_at = tuple(cols.index(k) for k in self.spec.key)
        self._delta_at = tuple(cols.index(d) for d in self.spec.deltas)
        self._indexed = True

    def rows(self) -> Iterator[tuple]:
        if not self.spec.key:
            return iter(self._append)
        return (tuple(r) for r in self._keyed.values())

    def key_of_row(self, row: Sequence[Any]) -> Any:
        if not self.spec.key:
            return None
        values = tuple(row[i] for i in self._key_at)
        return values[0] if len(values) == 1 else values

    def record_of(self, row: Sequence[Any]) -> dict:
        return dict(zip(self.columns or (), row))

    def __len__(self) -> int:
        return len(self._append) + len(self._keyed)
