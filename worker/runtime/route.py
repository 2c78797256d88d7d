"""Stream routes: where the tuples of one output stream of one component go.

A :class:`StreamRoute` is built per executor and stream (``Runtime.routes_for``) from the stream's
fields and its subscriptions' groupers, and binds the cheapest form of the choice for the output
collectors (:mod:`gale.worker.runtime.collector`): no grouping when the targets cannot depend on the
values (``const``), and with one target task in this process its queue's ``append`` itself
(``single_append``). Its ``emitted``/``transferred`` counters are read by the stats roll.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gale.topology.tuple import Fields
from gale.worker.runtime import lineage as _lineage
from gale.worker.runtime.grouping import DirectGrouper, Grouper


def _no_targets(values: Sequence[Any]) -> list[int]:
    return []


class StreamRoute:
    """Where one output stream of one component goes: its fields and its subscriptions."""

    __slots__ = ("stream", "fields", "n", "groupers", "direct", "direct_tasks", "single", "choose", "emitted",
                 "transferred", "salt", "salt_hash", "const", "const_queues", "single_queue", "single_append")

    def __init__(self, stream: str, fields: Fields, groupers: list[Grouper], direct: bool,
                 queue_of: Callable[[int], Any] | None = None):
        self.stream = stream
        self.fields = fields
        self.n = len(fields.names)
        #: lineage salt of tuples on this route (emitting component and stream)
        self.salt = _lineage.stream_salt(fields.component, stream)
        self.salt_hash = hash(self.salt)
        # per-executor counters (routes are built per executor), read by the stats roll
        self.emitted = 0
        self.transferred = 0
        self.groupers = [g for g in groupers if not g.direct]
        self.direct = direct
        self.direct_tasks: frozenset[int] = frozenset().union(
            *[g.tasks for g in groupers if isinstance(g, DirectGrouper)]
        )
        self.single = self.groupers[0] if len(self.groupers) == 1 else None
        #: values → target task ids, bound to the cheapest form for this route
        self.choose: Callable[[Sequence[Any]], list[int]] = (
            self.single.choose if self.single is not None else self.targets if self.groupers else _no_targets
        )
        #: the target list when no grouper depends on the values (no subscriber, or every
        #: subscription has one task / goes to all its tasks): emit skips ``choose``. ``None`` otherwise.
        self.const: list[int] | None = None
        consts = [g.constant() for g in self.groupers]
        if all(c is not None for c in consts):
            self.const = [t for c in consts for t in c]  # type: ignore[union-attr]
        #: with ``const`` and every target in this process (``queue_of`` given): their input deques
        self.const_queues: list[Any] | None = None
        if self.const and queue_of is not None:
            queues = [queue_of(t) for t in self.const]
            if all(q is not None for q in queues):
                self.const_queues = queues
        #: the deque of the only target when every tuple goes to one task in this process
        self.single_queue: Any = self.const_queues[0] if self.const_queues and len(self.const_queues) == 1 else None
        #: its ``append`` (a bound method is called without looking the method up per tuple)
        self.single_append: Any = self.single_queue.append if self.single_queue is not None else None

    def targets(self, values: Sequence[Any]) -> list[int]:
        if self.single is not None:
            return self.single.choose(values)
        out: list[int] = []
        for g in self.groupers:
            out.extend(g.choose(values))
        return out
