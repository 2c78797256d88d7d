"""What one worker has queued for another, grouped the way it goes on the wire (pure: no sockets).

Executor threads add messages; the transfer drains them into batch payloads (on the executor
thread that owns it, or its standby thread: one at a time). A
destination's :class:`Outbox` keeps one FIFO per *group*:

* a tuple group per (receiving task, source task, source component and stream), filled by
  :class:`TupleSender`; a drained group is one ``TUPLES`` message — the group's fields written
  once, then the tuples' bodies (:mod:`gale.worker.wire` has the layout), encoded in one msgpack
  call except those encoded at emit (values that are not plain: see :class:`TupleSender`);
* an acker group per acker task: ``(kind, root, val, spout_task)`` messages, drained into one
  ``ACKERS`` message of flattened integers; a result group per spout task: ``(outcome, root)``,
  into one ``RESULTS`` message.

Messages of one group keep their order. Groups are drained in the order they were made, so messages
of different groups may overtake one another within a batch — as they may between workers anyway:
the acker's XOR arithmetic does not depend on the order of a tree's messages.

Deques make the hand-over safe without a lock: executor threads only append (and make groups),
the draining thread only pops from the left, reading each group's length first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from itertools import chain
from typing import Any

import cython
import msgpack

from gale.topology.tuple import Fields, Tuple
from gale.worker.wire import ACKERS, MAX_U64, MIN_I64, RESULTS, TUPLES

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
    return pack(_body(tup))


@cython.cfunc
def _body(tup: Tuple) -> list:
    root = tup._root
    if root is not None:  # one tuple tree, held in two slots
        return [tup.values, tup.lineage, root, tup._edge]
    ids = tup._mid
    if not ids:
        return [tup.values, tup.lineage]
    body = [tup.values, tup.lineage]
    for pair in ids.items():
        body.extend(pair)
    return body


@cython.cfunc
@cython.exceptval(check=False)
def _plain(values: object, max_bytes: cython.Py_ssize_t) -> cython.bint:
    """Whether msgpack is sure to encode ``values`` within ``max_bytes``: a list or tuple of str,
    bytes, 64-bit ints, floats, bools and None, the bound summed from their lengths (a str's UTF-8
    takes at most 4 bytes per character)."""
    if type(values) is not list and type(values) is not tuple:
        return False
    size: cython.Py_ssize_t = 64  # the array headers, lineage, root and edge
    for v in values:
        tv = type(v)
        if tv is str:
            size += 5 + 4 * len(v)
        elif tv is bytes:
            size += 5 + len(v)
        elif tv is int:
            if v < MIN_I64 or v > MAX_U64:
                return False
            size += 9
        elif tv is float or tv is bool or v is None:
            size += 9
        else:
            return False
        if size > max_bytes:
            return False
    return True


@cython.cclass
class TupleSender:
    """The executor threads' side of sending to other workers (``Transfer.send_tuple``,
    ``send_acker``, ``send_result``): put a tuple's body, an acker message or a verdict in its group
    in its destination's outbox.

    A body whose values are plain (:func:`_plain`: msgpack cannot fail on them, and they fit
    ``max_bytes``) is queued as a list and encoded with the rest of its group when the sender
    drains it: one msgpack call per group. Any other body is encoded here, so a value msgpack cannot
    carry, or a tuple over ``max_bytes``, fails the emit (and its input tuple) with a clear error.
    Values are read when they are encoded: like Storm, which serializes on its transfer thread, a
    component must not change a list after emitting it.

    ``groups``: (task, source task, "component:stream") → the group's deque, made on a group's
    first tuple through ``outbox_of(task)`` (the destination's :class:`Outbox`, or None: the task
    has no route, and the tuple is counted by ``outbox_of`` and dropped). The transfer replaces
    ``groups`` (and ``acker_groups``, ``result_groups``: acker / spout task → deque) with empty dicts
    when the routes change."""

    def __init__(self, pack: Callable[[Any], bytes], max_bytes: int, outbox_of: Callable[[int], Outbox | None]):
        self.pack = pack
        self.max_bytes = max_bytes
        self.outbox_of = outbox_of
        self.groups = {}
        self.acker_groups = {}
        self.result_groups = {}

    def send_tuple(self, task: int, tup: Tuple) -> None:
        t: Tuple = tup
        body = _body(t)
        if not _plain(t.values, self.max_bytes):
            try:
                body = self.pack(body)
            except (TypeError, ValueError, OverflowError) as exc:
                raise ValueError(
                    f"component {t.component!r} emitted a value on stream {t.stream!r} that cannot be sent to "
                    f"another worker: {exc} (tuple values must be msgpack-serializable: str, bytes, int, float, "
                    "bool, None, lists and dicts of those, pyarrow Tables and RecordBatches)"
                ) from None
            if len(body) > self.max_bytes:
                raise ValueError(
                    f"component {t.component!r} emitted a {len(body)}-byte tuple on stream {t.stream!r}; tuples "
                    f"sent to another worker are limited to topology.transfer.max.tuple.bytes ({self.max_bytes}) — "
                    "send a reference (a path or key) instead of the data"
                )
        fields: Fields = t.fields
        key = (task, t.task, fields.source_key)
        group = self.groups.get(key)
        if group is None:
            box = self.outbox_of(task)
            if box is None:
                return
            group = box.tuple_group(task, t.task, fields.component, fields.stream)
            self.groups[key] = group
        group.append(body)


    def send_acker(self, task: int, msg: tuple) -> None:
        """``msg``: ``(kind, root, val, spout_task)``, integers, for an acker task elsewhere."""
        self._append(self.acker_groups, task, msg, ACKERS)

    def send_result(self, task: int, result: tuple) -> None:
        """``result``: ``(outcome, root)``, integers, for a spout task elsewhere."""
        self._append(self.result_groups, task, result, RESULTS)

    @cython.cfunc
    def _append(self, groups: dict, task: object, item: object, kind: cython.int):
        group = groups.get(task)
        if group is None:
            box = self.outbox_of(task)
            if box is None:
                return
            group = groups[task] = box.acker_group(task) if kind == ACKERS else box.result_group(task)
        group.append(item)


def _tuple_bodies(items: list) -> bytes:
    """A drained tuple group's array of bodies: the lists (plain bodies) encoded here, the bytes
    (bodies encoded at emit) as they are."""
    if not any(type(item) is bytes for item in items):
        return _packb(items)  # the common case: one call, its own array header
    parts = [array_header(len(items))]
    run: list = []
    for item in items:
        if type(item) is bytes:
            if run:
                parts.append(_elements(run))
                run = []
            parts.append(item)
        else:
            run.append(item)
    if run:
        parts.append(_elements(run))
    return b"".join(parts)


def _elements(run: list) -> bytes:
    """``run`` encoded as msgpack array elements, without the array's header."""
    return _packb(run)[len(array_header(len(run))):]


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

    # ------------------------------------------------------------------ the draining thread

    def queued(self) -> int:
        """Messages waiting (tuples, acker messages, results)."""
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
                parts.append(_tuple_bodies(items))
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
