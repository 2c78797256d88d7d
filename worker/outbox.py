"""What one worker has queued for another, grouped the way it goes on the wire (pure: no sockets).

Executor threads add messages; the transfer drains them into batch payloads (on the executor
thread that owns it, or its standby thread: one at a time). A
destination's :class:`Outbox` keeps one FIFO per *group*:

* a tuple group per (receiving task, source task, source component and stream), filled by
  :class:`~gale.worker.sender.TupleSender`; a drained group is one ``TUPLES`` message — the group's fields written
  once, then the tuples' bodies (:mod:`gale.worker.wire` has the layout), each encoded at emit;
* an acker group per acker task: ``(kind, root, val, spout_task)`` messages, drained into one
  ``ACKERS`` message of flattened integers; a result group per spout task: ``(outcome, root)``,
  into one ``RESULTS`` message. Each message is encoded when it is sent
  (:func:`~gale.worker.sender.encode_ints`);
* an ack pack group per acker task: each element one ack buffer flush's acks for that task, a bin of
  16 bytes an ack (root and value, little-endian), drained into one ``ACK_PACKS`` message. A bolt's
  acks are the most frequent message between workers; packed, one costs a 16-byte copy to write and
  to read instead of a msgpack message of four integers. An element counts as one message in
  :meth:`Outbox.queued`; :meth:`Outbox.drain` and the transfer's figures count its acks.

Everything in a group is msgpack bytes already (:mod:`gale.worker.sender` encodes at emit), so
draining a group writes one array header and joins the bytes.

Messages of one group keep their order. Groups are drained in the order they were made, so messages
of different groups may overtake one another within a batch — as they may between workers anyway:
the acker's XOR arithmetic does not depend on the order of a tree's messages. Except a *barrier*
(a ``$checkpoint`` tuple): each receiving task must get a source task's data and barriers in the
order they were emitted (the checkpoint layer aligns on it, ``gale.worker.state.gate``). A barrier
seals every group from its source task to its receiving task and goes in a group of its own after
them, so what came before it is drained before it and what comes after it goes to new groups
behind it; a sealed group leaves the drain order once it is empty. Only barriers pay for this.

Deques make the hand-over safe without a lock: executor threads only append (and make groups),
the draining thread only pops from the left, reading each group's length first.
"""

from __future__ import annotations

from collections import deque

import cython
import msgpack

from gale.worker.wire_kinds import ACK_PACK_BYTES, ACK_PACKS, ACKERS, GROUP_WIDTH, RESULTS, TUPLES

_packb = msgpack.Packer(use_bin_type=True).pack


def array_header(n: int) -> bytes:
    """msgpack's header of an array of ``n`` elements (``n`` < 2**32)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _acks_in(pack: bytes) -> int:
    """How many acks an ack pack element (a msgpack bin) holds: its header is 2 to 5 bytes, less
    than an ack, so the whole length divides to the count."""
    return len(pack) // ACK_PACK_BYTES


def _tuples_prefix(task: int, source_task: int, component: str, stream: str) -> bytes:
    """The head of a TUPLES message: its kind, receiving task, source component, stream and task."""
    return b"\x96" + b"".join(_packb(x) for x in (TUPLES, task, component, stream, source_task))


class Outbox:
    """The groups queued for one destination worker, drained into batch payloads."""

    __slots__ = ("tuple_groups", "int_groups", "_order", "_sealed")

    def __init__(self) -> None:
        #: (task, source task, "component:stream") → encoded bodies; made by the Transfer
        self.tuple_groups: dict[tuple[int, int, str], deque] = {}
        #: (kind, task) → encoded messages of the integer kinds (ACKERS, RESULTS, CONTROLS)
        self.int_groups: dict[tuple[int, int], deque] = {}
        #: (message prefix, the group's deque, kind) in the order groups were made (sender's view)
        self._order: list[tuple[bytes, deque, int]] = []
        #: ids of the groups no sender appends to any more (sealed by a barrier, or a barrier's own):
        #: dropped from ``_order`` by the draining thread once empty
        self._sealed: set[int] = set()

    # ------------------------------------------------------------------ executor threads

    def tuple_group(self, task: int, source_task: int, component: str, stream: str) -> deque:
        key = (task, source_task, f"{component}:{stream}")
        group = self.tuple_groups.get(key)
        if group is None:
            group = deque()
            self._order.append((_tuples_prefix(task, source_task, component, stream), group, TUPLES))
            group = self.tuple_groups.setdefault(key, group)
        return group

    def barrier(self, task: int, source_task: int, component: str, stream: str, body: bytes) -> None:
        """Queue a barrier's body behind everything ``source_task`` sent ``task`` so far, and seal
        those groups: its later messages make new groups, behind the barrier (executor thread)."""
        for key in list(self.tuple_groups):  # one C call: other threads may add groups meanwhile
            if key[0] == task and key[1] == source_task:
                self._sealed.add(id(self.tuple_groups.pop(key)))
        group = deque((body,))
        self._sealed.add(id(group))
        self._order.append((_tuples_prefix(task, source_task, component, stream), group, TUPLES))

    def group(self, kind: int, task: int) -> deque:
        """The group of ``kind`` (ACKERS, RESULTS or CONTROLS) for ``task``."""
        key = (kind, task)
        group = self.int_groups.get(key)
        if group is None:
            group = deque()
            self._order.append((b"\x93" + _packb(kind) + _packb(task), group, kind))
            group = self.int_groups.setdefault(key, group)
        return group

    def acker_group(self, task: int) -> deque:
        return self.group(ACKERS, task)

    def result_group(self, task: int) -> deque:
        return self.group(RESULTS, task)

    # ------------------------------------------------------------------ the draining thread

    def queued(self) -> int:
        """Messages waiting (tuples, acker messages, results; an ack pack counts as one)."""
        n: cython.Py_ssize_t = 0
        for entry in self._order:  # a plain loop: C when compiled (a generator is not)
            n += len(entry[1])
        return n

    def __bool__(self) -> bool:
        for entry in self._order:
            if entry[1]:
                return True
        return False

    def drain(self, limit: int) -> tuple[bytes, int]:
        """Up to ``limit`` queued messages (an ack pack counts as one) as one batch payload, and how
        many messages it holds (an ack pack's acks each)."""
        parts: list[bytes] = []
        taken: cython.Py_ssize_t = 0
        acks: cython.Py_ssize_t = 0  # the messages ack packs add past one each
        most: cython.Py_ssize_t = limit
        n: cython.Py_ssize_t
        i: cython.Py_ssize_t
        for prefix, group, kind in list(self._order):
            n = len(group)
            if not n:
                continue
            if n > most - taken:
                n = most - taken
            pop = group.popleft
            parts.append(prefix)
            parts.append(array_header(n * GROUP_WIDTH[kind]))
            if kind == ACK_PACKS:
                for i in range(n):
                    pack = pop()
                    acks += _acks_in(pack) - 1
                    parts.append(pack)
            else:
                for i in range(n):  # a C loop (an untyped count iterated a range object)
                    parts.append(pop())
            taken += n
            if taken >= most:
                break
        if self._sealed:
            self._forget_drained()
        return b"".join(parts), taken + acks

    def _forget_drained(self) -> None:
        """Drop the sealed groups that are empty from the drain order (the draining thread is the
        only one that removes; executor threads only append, so an index found stays valid)."""
        order = self._order
        sealed = self._sealed
        i = 0
        while i < len(order):
            group = order[i][1]
            if not group and id(group) in sealed:
                sealed.discard(id(group))
                del order[i]
            else:
                i += 1

    def drop_oldest(self, n: int) -> int:
        """Drop up to ``n`` messages as :meth:`queued` counts them, oldest groups first; returns how
        many messages were dropped (an ack pack's acks each)."""
        dropped = 0
        acks = 0
        for _, group, kind in list(self._order):
            while group and dropped < n:
                item = group.popleft()
                if kind == ACK_PACKS:
                    acks += _acks_in(item) - 1
                dropped += 1
            if dropped >= n:
                break
        return dropped + acks

    def clear(self) -> int:
        """Drop everything queued; returns how many messages that was (an ack pack's acks each)."""
        return self.drop_oldest(self.queued())
