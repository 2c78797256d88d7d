"""Stream groupings: which target tasks get a tuple.

Each grouper answers ``choose(values) -> list of task ids`` for one subscription (a target
component subscribed to one stream of a source component). Fields grouping hashes the selected
values with a hash that is the same in every worker process (Python's ``hash`` of ``str`` is not:
it is randomized per process), so equal keys reach the same task wherever they are emitted.
"""

from __future__ import annotations

import os
import random
import zlib
from collections.abc import Sequence
from typing import Any

from gale.stablehash import stable_hash  # noqa: F401 - re-exported (it lived here first)
from gale.topology.definition import GroupingDef
from gale.topology.tuple import Fields

crc32 = zlib.crc32


class Grouper:
    """Picks target tasks for one subscription."""

    direct = False

    def constant(self) -> list[int] | None:
        """The target list when it never depends on the values (one target task, or all of them):
        emit then skips :meth:`choose`. ``None`` when it does."""
        return None

    def choose(self, values: Sequence[Any]) -> list[int]:  # pragma: no cover - abstract
        raise NotImplementedError


class ShuffleGrouper(Grouper):
    """Round-robin over a shuffled task list, reshuffled each cycle: even and unpredictable."""

    __slots__ = ("_tasks", "_order", "_i", "_rng")

    def __init__(self, tasks: Sequence[int], rng: random.Random | None = None):
        self._tasks = list(tasks)
        self._rng = rng or random.Random()
        self._order = [[t] for t in self._tasks]
        self._rng.shuffle(self._order)
        self._i = 0

    def choose(self, values: Sequence[Any]) -> list[int]:
        i = self._i
        if i >= len(self._order):
            self._rng.shuffle(self._order)
            i = 0
        self._i = i + 1
        return self._order[i]

    def constant(self) -> list[int] | None:
        return list(self._tasks) if len(self._tasks) == 1 else None


def process_hash_is_shared() -> bool:
    """True when Python's own ``hash`` gives the same value in every worker process: supervisors
    start workers with ``PYTHONHASHSEED=0`` (all workers of a cluster must run the same Python)."""
    return os.environ.get("PYTHONHASHSEED", "random") not in ("random", "")


class FieldsGrouper(Grouper):
    """Equal values of the grouping fields → the same task, in whichever process they are emitted.

    With ``builtin_hash`` (one process, or workers sharing ``PYTHONHASHSEED``) Python's cached
    string hash is used; otherwise :func:`stable_hash` (CRC-32 based).
    """

    __slots__ = ("_tasks", "_idx", "_n", "_single", "_builtin")

    def __init__(self, tasks: Sequence[int], source_fields: Fields, group_fields: Sequence[str],
                 builtin_hash: bool = False):
        self._tasks = [[t] for t in sorted(tasks)]
        self._n = len(self._tasks)
        self._idx = [source_fields.index(f) for f in group_fields]
        self._single = self._idx[0] if len(self._idx) == 1 else None
        self._builtin = builtin_hash

    def choose(self, values: Sequence[Any]) -> list[int]:
        if self._single is not None:
            v = values[self._single]
            if self._builtin:
                try:
                    return self._tasks[hash(v) % self._n]
                except TypeError:  # unhashable (a list or dict value)
                    return self._tasks[stable_hash(v) % self._n]
            h = crc32(v.encode("utf-8", "surrogatepass")) if v.__class__ is str else stable_hash(v)
        else:
            key = [values[i] for i in self._idx]
            if self._builtin:
                try:
                    return self._tasks[hash(tuple(key)) % self._n]
                except TypeError:
                    pass
            h = stable_hash(key)
        return self._tasks[h % self._n]

    def constant(self) -> list[int] | None:
        return list(self._tasks[0]) if self._n == 1 else None


class AllGrouper(Grouper):
    __slots__ = ("_tasks",)

    def __init__(self, tasks: Sequence[int]):
        self._tasks = sorted(tasks)

    def choose(self, values: Sequence[Any]) -> list[int]:
        return self._tasks

    def constant(self) -> list[int] | None:
        return list(self._tasks)


class GlobalGrouper(Grouper):
    __slots__ = ("_task",)

    def __init__(self, tasks: Sequence[int]):
        self._task = [min(tasks)]

    def choose(self, values: Sequence[Any]) -> list[int]:
        return self._task

    def constant(self) -> list[int] | None:
        return list(self._task)


class DirectGrouper(Grouper):
    """Direct streams: the emitter names the task (``emit_direct``); ``choose`` is never used."""

    direct = True

    def __init__(self, tasks: Sequence[int]):
        self.tasks = frozenset(tasks)

    def choose(self, values: Sequence[Any]) -> list[int]:
        return []


def make_grouper(
    grouping: GroupingDef,
    target_tasks: Sequence[int],
    source_fields: Fields,
    local_tasks: frozenset[int] | set[int] = frozenset(),
    rng: random.Random | None = None,
    builtin_hash: bool = False,
) -> Grouper:
    kind = grouping.type
    if kind in ("shuffle", "none"):
        return ShuffleGrouper(target_tasks, rng)
    if kind == "local_or_shuffle":
        local = [t for t in target_tasks if t in local_tasks]
        return ShuffleGrouper(local or target_tasks, rng)
    if kind == "fields":
        return FieldsGrouper(target_tasks, source_fields, grouping.fields, builtin_hash)
    if kind == "all":
        return AllGrouper(target_tasks)
    if kind == "global":
        return GlobalGrouper(target_tasks)
    if kind == "direct":
        return DirectGrouper(target_tasks)
    raise ValueError(f"unknown grouping {kind!r}")
