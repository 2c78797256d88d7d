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
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import cython

from gale.stablehash import stable_hash  # noqa: F401 - re-exported (it lived here first)
from gale.topology.definition import GroupingDef
from gale.topology.tuple import Fields

crc32 = zlib.crc32


@cython.cclass
class Grouper:
    """Picks target tasks for one subscription. The groupers on the per-tuple path (this class,
    :class:`ShuffleGrouper`, :class:`FieldsGrouper`) are C types with typed slots in the compiled
    build (``grouping.pxd``): ``choose`` then runs without an interpreter frame."""

    direct = False

    def constant(self) -> list[int] | None:
        """The target list when it never depends on the values (one target task, or all of them):
        emit then skips :meth:`choose`. ``None`` when it does."""
        return None

    def choose(self, values: Sequence[Any]) -> list[int]:  # pragma: no cover - abstract
        raise NotImplementedError


@cython.cclass
class ShuffleGrouper(Grouper):
    """Round-robin over a shuffled task list, reshuffled each cycle: even and unpredictable.

    The compiled build reshuffles in C with splitmix64 (``splitmix.pxd``), seeded from ``rng`` (so
    a seeded ``rng`` still gives one sequence); the Python build with ``rng.shuffle``, which costs
    about as much as the choices of its cycle together."""

    def __init__(self, tasks: Sequence[int], rng: random.Random | None = None):
        self._tasks = list(tasks)
        self._rng = rng or random.Random()
        self._state = self._rng.getrandbits(64)
        self._order = [[t] for t in self._tasks]
        self._rng.shuffle(self._order)
        self._i = 0

    def choose(self, values: Sequence[Any]) -> list[int]:
        order = self._order  # read once: a load-aware shuffle swaps the list from another thread
        i = self._i
        if i >= len(order):
            self._reshuffle(order)
            i = 0
        self._i = i + 1
        return order[i]

    @cython.cfunc
    def _reshuffle(self, order: list) -> cython.void:
        """Fisher–Yates over ``order`` in place."""
        if cython.compiled:
            k: cython.Py_ssize_t
            j: cython.Py_ssize_t
            for k in range(len(order) - 1, 0, -1):
                j = cython.cast(cython.Py_ssize_t, splitmix64(cython.address(self._state)) % (k + 1))
                order[k], order[j] = order[j], order[k]
        else:
            self._rng.shuffle(order)

    def constant(self) -> list[int] | None:
        return list(self._tasks) if len(self._tasks) == 1 else None


#: scopes of a load-aware shuffle, nearest first (Storm's LocalityScope, without racks)
WORKER_LOCAL, HOST_LOCAL, EVERYTHING = 0, 1, 2
SCOPE_NAMES = ("worker-local", "host-local", "everything")
#: a task's share of a scope's choices at no load; fewer as its load rises (never none)
MAX_WEIGHT = 10
#: spilling past the scope (see LoadAwareShuffleGrouper.refresh): the busy share at which the
#: scope's workers count as hot, the gap to the far workers' that is noise, the share added per
#: refresh per unit of gap, the busy share under which the scope's workers have time to spare (no
#: spill), the cap (at 1.0 each near task still keeps one slot of a spilling shuffle's list: a
#: spout's worker at a full core hands the other worker all it will take, which a cap of 0.9 did
#: not while the other worker idled 10-14% of the time; docs/benchmarks.md)
SPILL_HOT, SPILL_DEADBAND, SPILL_GAIN, SPILL_COOL, MAX_SPILL = 0.8, 0.1, 0.5, 0.5, 1.0
#: choices in one cycle of a spilling shuffle's list (at least; 1% of the choices each)
SPILL_SLOTS = 100


class LoadAwareShuffleGrouper(ShuffleGrouper):
    """Storm 2's default shuffle: the nearest tasks while they keep up, farther ones when they do not.

    Target tasks fall in cumulative scopes — this worker, this host, everywhere. Tuples go to the
    tasks of the current scope, round-robin over a shuffled list in which each task appears in
    proportion to ``1 - load`` (a load is 0..1: how full its input queue or its worker's outbox is).
    :meth:`refresh` (about once a second) widens the scope while the current one's average load is at
    least ``higher`` and narrows it while the nearer one's is below ``lower``
    (``topology.localityaware.higher.bound`` / ``.lower.bound``). A tuple kept in its worker is
    never serialized. ``choose`` is :class:`ShuffleGrouper`'s, over the current scope's list.

    Queue loads miss one bottleneck: a worker whose own tasks keep up while its executor thread
    never rests (a worker running the only spout task, with its acker and the encoding of what it
    sends). Its queues stay short, so the scope stays local, while a peer waits for work. So the
    grouper also sends a share :attr:`spill` of its choices past the scope, to the farther tasks,
    steered by the busy share their workers report (:mod:`gale.worker.loads`: the share of time
    their executor threads were not waiting for work): it grows while the scope's workers are hot
    (busy at least :data:`SPILL_HOT` of the time) and hotter than the far ones by more than
    :data:`SPILL_DEADBAND` at two refreshes in a row (one hot second, such as a worker starting,
    is not enough), shrinks while the far ones are hotter, and ends once the scope's workers are
    busy less than :data:`SPILL_COOL` of the time. Workers equally hot (a spout in each) keep their
    tuples local: a crossing tuple costs CPU on both sides and would buy nothing.
    """

    __slots__ = ("higher", "lower", "scope", "_where", "spill", "_was_hot")

    def __init__(self, tasks: Sequence[int], local_tasks: frozenset[int] | set[int], higher: float = 0.8,
                 lower: float = 0.2, rng: random.Random | None = None):
        super().__init__(sorted(tasks), rng)
        self.higher = higher
        self.lower = lower
        #: task → its scope; until the first refresh: local or not
        self._where = {t: WORKER_LOCAL if t in local_tasks else EVERYTHING for t in self._tasks}
        self.scope = self._nearest()
        #: the share of choices sent past the scope (0..MAX_SPILL)
        self.spill = 0.0
        self._was_hot = False  # the last refresh found the scope hot and hotter than the far workers
        self._set_order({})

    def _nearest(self) -> int:
        return min(self._where.values()) if self._where else EVERYTHING

    def members(self, scope: int) -> list[int]:
        """The tasks of ``scope`` (cumulative: a wider scope holds the nearer ones)."""
        return [t for t in self._tasks if self._where[t] <= scope]

    def _set_order(self, loads: dict[int, float]) -> None:
        near = self.members(self.scope)
        far = [t for t in self._tasks if self._where[t] > self.scope] if self.spill else []
        if far:
            slots = max(SPILL_SLOTS, MAX_WEIGHT * len(self._tasks))
            n_far = max(1, round(slots * self.spill))
            order = _spread(near, loads, slots - n_far) + _spread(far, loads, n_far)
        else:
            order = _spread(near, loads)
        self._rng.shuffle(order)
        self._order = order  # one assignment: a concurrent choose sees the old list or the new one
        self._i = 0

    def _average(self, scope: int, loads: dict[int, float]) -> float:
        tasks = self.members(scope)
        return sum(loads.get(t, 0.0) for t in tasks) / len(tasks) if tasks else 0.0

    def refresh(self, load_of: Callable[[int], float], locate: Callable[[int], int],
                busy_of: Callable[[int], float | None] | None = None) -> None:
        """Re-read where the tasks are and how loaded; move the scope; adjust the spill by the busy
        share of the tasks' workers (``busy_of``: None where not known); rebuild the choices."""
        self._where = {t: locate(t) for t in self._tasks}
        loads = {t: min(max(load_of(t), 0.0), 1.0) for t in self._tasks}
        scopes = sorted(set(self._where.values()))
        scope = max(self.scope, scopes[0])
        if scope not in scopes:  # the tasks moved: the nearest scope at least as wide
            scope = next((s for s in scopes if s >= scope), scopes[-1])
        while scope != scopes[-1] and self._average(scope, loads) >= self.higher:
            scope = scopes[scopes.index(scope) + 1]
        while scope != scopes[0]:
            nearer = scopes[scopes.index(scope) - 1]
            if self._average(nearer, loads) >= self.lower:
                break
            scope = nearer
        self.scope = scope
        self.spill = self._next_spill(busy_of) if busy_of is not None else 0.0
        self._set_order(loads)

    def _next_spill(self, busy_of: Callable[[int], float | None]) -> float:
        near = _mean(busy_of(t) for t in self.members(self.scope))
        far = _mean(busy_of(t) for t in self._tasks if self._where[t] > self.scope)
        spill = self.spill
        if near is None or far is None:  # no far tasks, or no fresh reports: as Storm does
            self._was_hot = False
            return 0.0
        gap = near - far
        hot = near >= SPILL_HOT and gap > SPILL_DEADBAND
        if gap < -SPILL_DEADBAND:  # the far workers are the hotter ones
            spill += SPILL_GAIN * gap
        elif hot and self._was_hot:
            spill += SPILL_GAIN * gap
        elif near < SPILL_COOL:
            spill = 0.0
        self._was_hot = hot
        return min(max(spill, 0.0), MAX_SPILL)


def _spread(tasks: list[int], loads: dict[int, float], n: int | None = None) -> list[list[int]]:
    """Choices over ``tasks``, each task's in proportion to its weight ``MAX_WEIGHT * (1 - load)``
    (at least one): its weight's worth each, or about ``n`` in all."""
    weights = [max(1, round(MAX_WEIGHT * (1.0 - loads.get(t, 0.0)))) for t in tasks]
    total = sum(weights)
    order: list[list[int]] = []
    for t, w in zip(tasks, weights):
        order.extend([[t]] * (w if n is None else max(1, round(n * w / total))))
    return order


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def process_hash_is_shared() -> bool:
    """True when Python's own ``hash`` gives the same value in every worker process: supervisors
    start workers with ``PYTHONHASHSEED=0`` (all workers of a cluster must run the same Python)."""
    return os.environ.get("PYTHONHASHSEED", "random") not in ("random", "")


@cython.cclass
class FieldsGrouper(Grouper):
    """Equal values of the grouping fields → the same task, in whichever process they are emitted.

    With ``builtin_hash`` (one process, or workers sharing ``PYTHONHASHSEED``) Python's cached
    string hash is used; otherwise :func:`stable_hash` (CRC-32 based).
    """

    def __init__(self, tasks: Sequence[int], source_fields: Fields, group_fields: Sequence[str],
                 builtin_hash: bool = False):
        self._tasks = [[t] for t in sorted(tasks)]
        self._n = len(self._tasks)
        self._idx = [source_fields.index(f) for f in group_fields]
        self._single = self._idx[0] if len(self._idx) == 1 else -1  # -1: several fields
        self._builtin = builtin_hash

    def choose(self, values: Sequence[Any]) -> list[int]:
        if self._single >= 0:
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


#: str keys whose targets a :class:`KeyGroupGrouper` remembers (then it starts afresh): a CRC-32 per
#: tuple costs more than the dict lookup, and a word count's vocabulary is mostly far smaller
CACHE_KEYS = 65_536


@cython.cclass
class KeyGroupGrouper(Grouper):
    """A fields grouping through key groups (``gale.topology.keygroups``): hash → key group → the
    task owning it, so the task receiving a key's tuples owns the key's state whatever the bolt's
    parallelism. The same hash in every process (:func:`stable_hash`); targets of ``str`` keys are
    remembered (at most ``cache_keys``, then the cache starts afresh)."""

    def __init__(self, tasks: Sequence[int], source_fields: Fields, group_fields: Sequence[str], groups: int,
                 cache_keys: int = CACHE_KEYS):
        tasks = sorted(tasks)
        n = len(tasks)
        self._groups = groups
        self._targets = [[tasks[kg * n // groups]] for kg in range(groups)]  # key group → [owning task]
        self._idx = [source_fields.index(f) for f in group_fields]
        self._single = self._idx[0] if len(self._idx) == 1 else -1  # -1: several fields
        self._cache = {}  # str key → its targets
        self._cache_keys = cache_keys

    def choose(self, values: Sequence[Any]) -> list[int]:
        if self._single >= 0:
            v = values[self._single]
            if v.__class__ is str:
                targets = self._cache.get(v)
                if targets is None:
                    targets = self._targets[crc32(v.encode("utf-8", "surrogatepass")) % self._groups]
                    if len(self._cache) >= self._cache_keys:
                        self._cache.clear()
                    self._cache[v] = targets
                return targets
            return self._targets[stable_hash(v) % self._groups]
        return self._targets[stable_hash([values[i] for i in self._idx]) % self._groups]


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
    locality: tuple[float, float] | None = None,
) -> Grouper:
    """``locality``: (higher, lower) bounds for a load-aware shuffle when some targets are in other
    workers (None: ``topology.disable.loadaware.messaging``, an even shuffle over every task). With
    every target in this worker the shuffle stays even (Storm would also weight it by load)."""
    kind = grouping.type
    if kind in ("shuffle", "none"):
        if kind == "shuffle" and locality is not None and not all(t in local_tasks for t in target_tasks):
            return LoadAwareShuffleGrouper(target_tasks, local_tasks, *locality, rng=rng)
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
