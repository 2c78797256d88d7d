"""Fields grouping into a stateful bolt: hash → key group → task (``gale.topology.keygroups``), so the
task receiving a key's tuples owns the key's state, whatever the bolt's parallelism."""

from __future__ import annotations

from collections.abc import Sequence
from zlib import crc32
from typing import Any

from gale.stablehash import stable_hash
from gale.topology.tuple import Fields
from gale.worker.runtime.grouping import Grouper


#: str keys whose targets a grouper remembers (then it starts afresh): a CRC-32 per tuple costs more
#: than the dict lookup, and a word count's vocabulary is mostly far smaller
CACHE_KEYS = 65_536


class KeyGroupGrouper(Grouper):
    __slots__ = ("_targets", "_idx", "_single", "_groups", "_cache")

    def __init__(self, tasks: Sequence[int], source_fields: Fields, group_fields: Sequence[str], groups: int):
        tasks = sorted(tasks)
        n = len(tasks)
        self._groups = groups
        # key group → [owning task]
        self._targets = [[tasks[kg * n // groups]] for kg in range(groups)]
        self._idx = [source_fields.index(f) for f in group_fields]
        self._single = self._idx[0] if len(self._idx) == 1 else None
        self._cache: dict[str, list[int]] = {}  # str key → its targets

    def choose(self, values: Sequence[Any]) -> list[int]:
        if self._single is not None:
            v = values[self._single]
            if v.__class__ is str:
                targets = self._cache.get(v)
                if targets is None:
                    targets = self._targets[self.key_group_of_str(v)]
                    if len(self._cache) >= CACHE_KEYS:
                        self._cache.clear()
                    self._cache[v] = targets
                return targets
            return self._targets[stable_hash(v) % self._groups]
        return self._targets[stable_hash([values[i] for i in self._idx]) % self._groups]

    def key_group_of_str(self, v: str) -> int:
        """``key_group(v, groups)`` (``stable_hash`` of a str, inlined)."""
        return crc32(v.encode("utf-8", "surrogatepass")) % self._groups
