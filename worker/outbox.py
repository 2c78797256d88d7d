"""What one worker has queued for another, grouped the way it goes on the wire (pure: no sockets).

Executor threads add messages; the transfer's sender thread drains them into batch payloads. A
destination's :class:`Outbox` keeps one FIFO per *group*:

* a tuple group per (receiving task, source task, source component and stream): each tuple is
  encoded alone at emit time (:func:`encode_tuple`, so a value msgpack cannot carry fails that
  emit), and a drained group is one ``TUPLES`` message — the group's fields written once, then the
  tuples' encoded bodies (:mod:`gale.worker.wire` has the layout);
* an acker group per acker task: ``(kind, root, val, spout_task)`` messages, drained into one
  ``ACKERS`` message of flattened integers; a result group per spout task: ``(outcome, root)``,
  into one ``RESULTS`` message.

Messages of one group keep their order. Groups are drained in the order they were made, so messages
of different groups may overtake one another within a batch — as they may between workers anyway:
the acker's XOR arithmetic does not depend on the order of a tree's messages.

Deques make the hand-over safe without a lock: executor threads only append (and make groups),
the sender thread only pops from the left, reading each group's length first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import chain
from typing import Any

import msgpack

from gale.topology.tuple import Tuple
from gale.worker.wire import ACKERS, RESULTS, TUPLES

_packb = msgpack.Packer(use_bin_type=True).pack


def array_header(n: int) -> bytes:
    """msgpack's header of an array of ``n`` elements (``n`` < 2**32)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def encode_tuple(pack: Callable[[Any], bytes], tup: Tuple) -> bytes:
    """A tuple's body in a ``TUPLES`` message: ``[values, lineage, root, edge, ...]`` (its anchors
    flattened; none for an untracked tuple). Raises what ``pack`` raises for a value it cannot encode."""
    root = tup._root
    if root is not None:  # one tuple tree, held in two slots
        return pack([tup.values, tup.lineage, root, tup._edge])
    ids = tup._mid
    if not ids:
        return pack([tup.values, tup.lineage])
    if len(ids) == 1:
        for root, edge in ids.items():
            return pack([tup.values, tup.lineage, root, edge])
    body = [tup.values, tup.lineage]
    for pair in ids.items():
        body.extend(pair)
    return pack(body)


class Outbox:
    """The groups queued for one destination worker, drained into batch payloads."""

    __slots__ = ("tuple_groups", "acker_groups", "result_groups", "_order")

    def __init__(self) -> None:
        #: (task, source task, "component:stream") → encoded bodies; made by the Transfer
        self.tuple_groups: dict[tuple[int, int, str], deque] = {}
        self.acker_groups: dict[int, deque] = {}
        self.result_groups: dict[int, deque] = {}
        #: (message prefix, the group's deque, kind) in the order groups were made (sender's view)
        self._order: list[tuple[bytes, deque, int]] = []

    # ------------------------------------------------------------------ executor threads

    def tuple_group(self, task: int, source_task: int, component: str, stream: str) -> deque:
        key = (task, source_task, f"{component}:{stream}")
        group = self.tuple_groups.get(key)
        if group is None:
            group = deque()
            prefix = b"\x96" + b"".join(_packb(x) for x in (TUPLES, task, component, stream, source_task))
            self._order.append((prefix, group, TUPLES))
            group = self.tuple_groups.setdefault(key, group)
        return group

    def acker_group(self, task: int) -> deque:
        group = self.acker_groups.get(task)
        if group is None:
            group = deque()
            self._order.append((b"\x93" + _packb(ACKERS) + _packb(task), group, ACKERS))
            group = self.acker_groups.setdefault(task, group)
        return group

    def result_group(self, task: int) -> deque:
        group = self.result_groups.get(task)
        if group is None:
            group = deque()
            self._order.append((b"\x93" + _packb(RESULTS) + _packb(task), group, RESULTS))
            group = self.result_groups.setdefault(task, group)
        return group

    # ------------------------------------------------------------------ sender thread

    def queued(self) -> int:
        """Messages waiting (tuples, acker messages, results)."""
        return sum(len(group) for _, group, _ in self._order)

    def __bool__(self) -> bool:
        return any(group for _, group, _ in self._order)

    def drain(self, limit: int) -> tuple[bytes, int]:
        """Up to ``limit`` queued messages as one batch payload, and how many it holds."""
        parts: list[bytes] = []
        taken = 0
        for prefix, group, kind in list(self._order):
            n = len(group)
            if not n:
                continue
            if n > limit - taken:
                n = limit - taken
            pop = group.popleft
            items = [pop() for _ in range(n)]
            parts.append(prefix)
            if kind == TUPLES:
                parts.append(array_header(n))
                parts.append(b"".join(items))
            else:
                parts.append(_packb(list(chain.from_iterable(items))))
            taken += n
            if taken >= limit:
                break
        return b"".join(parts), taken

    def drop_oldest(self, n: int) -> int:
        """Drop up to ``n`` messages, oldest groups first; returns how many were dropped."""
        dropped = 0
        for _, group, _ in list(self._order):
            while group and dropped < n:
                group.popleft()
                dropped += 1
            if dropped >= n:
                break
        return dropped

    def clear(self) -> int:
        """Drop everything queued; returns how many messages that was."""
        return self.drop_oldest(self.queued())
