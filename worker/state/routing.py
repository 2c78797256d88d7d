"""Fields grouping into a stateful bolt: hash → key group → task (``gale.topology.keygroups``), so the
task receiving a key's tuples owns the key's state, whatever the bolt's parallelism."""

from __future__ import annotations

from collections.abc import Sequence
from zlib import crc32
from typing import Any

from gale.stablehash import stable_hash
from gale.topology.definition import GroupingDef
from gale.topology.state import StatefulBolt
from gale.topology.tuple import Fields
from gale.worker.runtime.grouping import Grouper


class KeyGroupGrouper(Grouper):
    __slots__ = ("_targets", "_idx", "_single", "_groups")

    def __init__(self, tasks: Sequence[int], source_fields: Fields, group_fields: Sequence[str], groups: int):
        tasks = sorted(tasks)
        n = len(tasks)
        self._groups = groups
        # key group → [owning task]
        self._targets = [[tasks[kg * n // groups]] for kg in range(groups)]
        self._idx = [source_fields.index(f) for f in group_fields]
        self._single = self._idx[0] if len(self._idx) == 1 else None

    def choose(self, values: Sequence[Any]) -> list[int]:
        if self._single is not None:
            v = values[self._single]
            if v.__class__ is str:  # stable_hash of a str, inlined
                return self._targets[crc32(v.encode("utf-8", "surrogatepass")) % self._groups]
            return self._targets[stable_hash(v) % self._groups]
        return self._targets[stable_hash([values[i] for i in self._idx]) % self._groups]


def keyed_grouper(runtime: Any, target: str, grouping: GroupingDef, fields: Fields) -> Grouper | None:
    """The grouper for a fields grouping into a stateful bolt (None for any other subscription)."""
    if grouping.type != "fields" or not issubclass(runtime.topology.component_class(target), StatefulBolt):
        return None
    groups = int(runtime.component_conf(target)["topology.state.key.groups"])
    return KeyGroupGrouper(runtime.layout.component_tasks(target), fields, grouping.fields, groups)
