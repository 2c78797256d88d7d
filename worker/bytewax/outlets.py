"""A Bytewax step's outgoing streams in a task: which receiving task gets which items, as what tuple.

One :class:`Outlet` per Gale stream the step writes (one per step reading one of its ports,
``gale.bytewax.topology``). :meth:`Outlets.route` turns a batch written on a port into
``(outlet, task index, items)`` parts — the whole batch to one task when nothing needs splitting —
and :meth:`Outlets.values` the values of the tuple carrying a part: its route value and the items,
the list itself for a task in this worker, pickled for another worker (``routing.pack_batch``).
The end of input goes to every receiving task (:meth:`Outlets.ends`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gale.worker.bytewax.routing import KeyOwner, check_keyed, pack_batch, route_values, split_keyed


class Outlet:
    __slots__ = ("i", "stream", "port", "kind", "to", "tasks", "n", "routes", "local", "owner", "near", "cursor",
                 "parts", "part_fn")

    def __init__(self, i: int, edge: dict, tasks: Sequence[int], local_tasks: frozenset[int], my_index: int,
                 groups: int | None):
        self.i = i  # its place among the task's outlets
        self.stream: str = edge["stream"]
        self.port: str = edge["port"]
        self.kind: str = edge["route"]
        self.to: str = edge["to"]
        self.tasks = list(tasks)
        self.n = len(self.tasks)
        self.routes = route_values(self.n, groups if edge["keygroups"] else None)
        self.local = [t in local_tasks for t in self.tasks]
        self.owner = KeyOwner(self.n, groups if edge["keygroups"] else None)
        # the receiving task a "local" route prefers: the one with this task's index when it is in this
        # worker, else the worker's others in turn, else all in turn
        near = [i for i in range(self.n) if self.local[i]]
        if my_index < self.n and self.local[my_index]:
            near = [my_index]
        self.near = near or list(range(self.n))
        self.cursor = 0
        self.parts: list[str] = []
        self.part_fn: Callable[[str], int] | None = None

    def bind_sink(self, sink: Any) -> None:
        """A partitioned sink's items go to the task owning their partition (``part_fn(key)`` into
        the sorted list of every partition)."""
        self.parts = sorted(set(sink.list_parts()))
        self.part_fn = sink.part_fn

    def split(self, items: list, step_id: str) -> list[tuple[int, list]]:
        """``(task index, items)`` for the receiving tasks of ``items`` (none empty)."""
        n = self.n
        kind = self.kind
        if kind == "local":
            near = self.near
            if len(near) == 1:
                return [(near[0], items)]
            self.cursor += 1
            return [(near[self.cursor % len(near)], items)]
        if kind == "key":
            if n == 1:
                for item in items:  # still checked: the step reading them needs (str, value)
                    if item.__class__ is not tuple or len(item) != 2 or item[0].__class__ is not str:
                        check_keyed(item, self.to)
                return [(0, items)]
            return [(i, b) for i, b in enumerate(split_keyed(items, self.owner, n, self.to)) if b]
        if kind == "part":
            return self._split_parts(items)
        # spread: the batch in n even runs, the first to the next task in turn
        if n == 1:
            return [(0, items)]
        self.cursor += 1
        size = -(-len(items) // n)
        return [((self.cursor + j) % n, items[j * size:(j + 1) * size]) for j in range(n) if items[j * size:(j + 1) * size]]

    def _split_parts(self, items: list) -> list[tuple[int, list]]:
        parts, part_fn, owner = self.parts, self.part_fn, self.owner
        if not parts:
            raise RuntimeError(f"step {self.to}: its sink lists no partitions")
        out: dict[int, list] = {}
        for item in items:
            if item.__class__ is not tuple or len(item) != 2 or not isinstance(item[0], str):
                check_keyed(item, self.to)
            idx = owner(parts[part_fn(item[0]) % len(parts)])
            batch = out.get(idx)
            if batch is None:
                out[idx] = [item]
            else:
                batch.append(item)
        return list(out.items())


class Outlets:
    """Every outlet of one task of a step."""

    def __init__(self, edges: Sequence[dict], context: Any, groups: int | None, step_id: str):
        local = frozenset(context.worker_tasks)
        me = context.this_task_index
        self.step_id = step_id
        self.all = [Outlet(i, e, context.component_tasks(e["to"]), local, me, groups) for i, e in enumerate(edges)]
        self.by_port: dict[str, list[Outlet]] = {}
        for outlet in self.all:
            self.by_port.setdefault(outlet.port, []).append(outlet)

    def route(self, items: list, port: str = "down") -> list[tuple[Outlet, int, list]]:
        """The parts of a batch written on ``port``: each reader gets every item (its own list when
        there are several, so none sees another's changes)."""
        outlets = self.by_port.get(port)
        if not outlets or not items:
            return []
        several = len(outlets) > 1
        parts = []
        for outlet in outlets:
            for idx, batch in outlet.split(list(items) if several else items, self.step_id):
                parts.append((outlet, idx, batch))
        return parts

    def values(self, outlet: Outlet, idx: int, items: list | None) -> list:
        """The tuple values carrying ``items`` (None: the end of input) to receiving task ``idx``."""
        if items is None or outlet.local[idx]:
            return [outlet.routes[idx], items]
        return [outlet.routes[idx], pack_batch(items, self.step_id)]

    def ends(self) -> list[tuple[Outlet, int]]:
        """Every (outlet, receiving task index): where the end of input goes."""
        return [(outlet, idx) for outlet in self.all for idx in range(outlet.n)]
