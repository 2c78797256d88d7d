"""Encoding what one worker sends another, at emit, on the executor thread that emits it (pure: no
sockets): :class:`TupleSender` puts each tuple's body, acker message, ack and verdict into its
group in the destination's :class:`~gale.worker.outbox.Outbox`, already as msgpack bytes.

The common bodies — a few strings and numbers in one tuple tree — and the integer messages are
written by C code of this module in the compiled build (no list or int object per message), by
msgpack in Python; the bytes are the same (tests/test_wire_groups.py). A bolt worker's acks for an
acker task elsewhere go packed, 16 bytes an ack (:meth:`TupleSender.pack_ack`). The reader of
these bytes: :mod:`gale.worker.wire` and its compiled fast path :mod:`gale.worker.wire_fast`. C
declarations: ``sender.pxd``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cython
import msgpack

from gale.topology.state import CHECKPOINT_STREAM
from gale.topology.tuple import Fields, Tuple
from gale.worker.outbox import Outbox
from gale.worker.runtime.acker import ACK
from gale.worker.wire_kinds import ACK_PACK_BYTES, ACK_PACKS, ACKERS, CONTROLS, MAX_U64, RESULTS

_packb = msgpack.Packer(use_bin_type=True).pack

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


#: the longest plain body encoded at emit in C (a stack buffer); longer ones go to msgpack
PLAIN_BODY_BYTES = cython.declare(cython.Py_ssize_t, 1024)


def encode_body(tup: Tuple, max_bytes: int) -> bytes | None:
    """A tuple's body (:func:`encode_tuple`), written in C by the compiled build when it is *plain*
    — at most 15 values, each a str, bytes, 64-bit int, float, bool or None, in at most one tuple
    tree, within ``max_bytes`` and :data:`PLAIN_BODY_BYTES` — in one pass without a list or an int
    object per body; msgpack's own bytes (tested). Else, and always in Python, None: the caller
    encodes the body with msgpack, which reports what it cannot carry."""
    return _encode_body(tup, max_bytes)


def encode_ints(msg: tuple) -> bytes:
    """An acker message ``(kind, root, val, spout_task)`` or a verdict ``(outcome, root)`` as the
    elements of a group's flat integer array (msgpack's bytes without an array header). Integers
    outside [-2**63, 2**64) raise OverflowError."""
    return _encode_ints(msg)


@cython.cfunc
def _encode_body(tup: Tuple, max_bytes: cython.Py_ssize_t) -> object:
    if cython.compiled:
        return _c_body(tup, max_bytes if max_bytes < PLAIN_BODY_BYTES else PLAIN_BODY_BYTES)
    return None


@cython.cfunc
def _encode_ints(msg: tuple) -> bytes:
    if cython.compiled:
        out = _c_ints(msg)
        if out is not None:
            return out
    return _packb(msg)[1:]  # a fixarray header (at most 15 elements) is one byte


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _put_uint(p: cython.p_uchar, v: cython.ulonglong) -> cython.p_uchar:
    """``v`` as msgpack writes a non-negative integer (the shortest form); returns the end."""
    if v < 0x80:
        p[0] = cython.cast(cython.uchar, v)
        return p + 1
    if v <= 0xFF:
        p[0] = 0xCC
        p[1] = cython.cast(cython.uchar, v)
        return p + 2
    if v <= 0xFFFF:
        p[0] = 0xCD
        return _put_be(p + 1, v, 2)
    if v >> 32 == 0:  # not ``v <= 0xFFFFFFFF``: Cython reads a literal past C int's range as a Python int
        p[0] = 0xCE
        return _put_be(p + 1, v, 4)
    p[0] = 0xCF
    return _put_be(p + 1, v, 8)


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _put_be(p: cython.p_uchar, v: cython.ulonglong, n: cython.int) -> cython.p_uchar:
    """The low ``n`` bytes of ``v``, big-endian."""
    k: cython.int
    for k in range(n):
        p[k] = cython.cast(cython.uchar, (v >> (8 * (n - 1 - k))) & 0xFF)
    return p + n


@cython.cfunc
@cython.exceptval(check=False)
def _as_u64(v: object, out: cython.p_ulonglong) -> cython.bint:
    """Whether ``v`` is an int in [0, 2**64), stored at ``out`` (compiled only: C calls, no exception
    raised, none left set). Ids are such ints, half of them past 2**63."""
    if type(v) is not int or _PyLong_Sign(v) < 0 or _PyLong_NumBits(v) > 64:
        return False
    # the digits, masked (a loop over its 30-bit digits; PyLong_AsUnsignedLongLong goes through
    # a byte array for every int past one digit, three times the instructions)
    out[0] = PyLong_AsUnsignedLongLongMask(v)
    return True


@cython.cfunc
@cython.exceptval(check=False)
def _put_int(p: cython.p_uchar, v: object) -> cython.p_uchar:
    """A Python int as msgpack writes it, or NULL when it lies outside [-2**63, 2**64) (or is no int)."""
    u: cython.ulonglong
    if _as_u64(v, cython.address(u)):
        return _put_uint(p, u)
    if type(v) is not int:
        return cython.NULL
    x: cython.longlong = _long_as_i64(v)
    if x == -1 and PyErr_Occurred() != cython.NULL:  # past 2**64, or below -2**63
        PyErr_Clear()
        return cython.NULL
    if x >= -32:  # negative here: a non-negative int either fit 64 bits unsigned or fits nothing
        p[0] = cython.cast(cython.uchar, x & 0xFF)
        return p + 1
    if x >= -0x80:
        p[0] = 0xD0
        return _put_be(p + 1, cython.cast(cython.ulonglong, x), 1)
    if x >= -0x8000:
        p[0] = 0xD1
        return _put_be(p + 1, cython.cast(cython.ulonglong, x), 2)
    if x >= -0x80000000:
        p[0] = 0xD2
        return _put_be(p + 1, cython.cast(cython.ulonglong, x), 4)
    p[0] = 0xD3
    return _put_be(p + 1, cython.cast(cython.ulonglong, x), 8)


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _put_len(p: cython.p_uchar, n: cython.Py_ssize_t, marker8: cython.uchar) -> cython.p_uchar:
    """msgpack's header of a str or bin of ``n`` bytes: ``marker8`` (str8 0xD9, bin8 0xC4) and a
    1-byte length, or the two markers after it (16-bit, then 32-bit length)."""
    if n < 0x100:
        p[0] = marker8
        p[1] = cython.cast(cython.uchar, n)
        return p + 2
    if n < 0x10000:
        p[0] = marker8 + 1
        return _put_be(p + 1, n, 2)
    p[0] = marker8 + 2
    return _put_be(p + 1, n, 4)


@cython.cfunc
@cython.exceptval(check=False)
def _put_raw(p: cython.p_uchar, end: cython.p_uchar, data: cython.p_const_char, n: cython.Py_ssize_t,
             binary: cython.bint) -> cython.p_uchar:
    """A str's UTF-8 (or bytes) with msgpack's header, or NULL when it does not fit before ``end``."""
    if end - p < n + 5:
        return cython.NULL
    if not binary and n < 32:
        p[0] = cython.cast(cython.uchar, 0xA0 | n)
        p += 1
    elif binary:
        p = _put_len(p, n, 0xC4)
    else:
        p = _put_len(p, n, 0xD9)
    memcpy(p, data, n)
    return p + n


@cython.cfunc
def _c_body(tup: Tuple, limit: cython.Py_ssize_t) -> object:
    """:func:`encode_body`, compiled: written into a stack buffer, checked as it goes."""
    buf: cython.uchar[1024]
    values = tup.values
    tv = type(values)
    if tv is not list and tv is not tuple:
        return None
    root = tup._root
    if root is None and tup._mid:
        return None  # several trees: msgpack
    n: cython.Py_ssize_t = len(values)
    if n > 15:
        return None
    if limit < 64:
        return None
    start: cython.p_uchar = cython.address(buf[0])
    p: cython.p_uchar = start
    # while p <= end one more scalar (9 bytes) and the lineage, root and edge (27) still fit
    end: cython.p_uchar = start + limit - 40
    p[0] = 0x94 if root is not None else 0x92
    p[1] = cython.cast(cython.uchar, 0x90 | n)
    p += 2
    size: cython.Py_ssize_t = 0
    d: cython.double
    bits: cython.ulonglong
    for v in values:
        t = type(v)
        if t is str:
            try:
                data = PyUnicode_AsUTF8AndSize(v, cython.address(size))
            except UnicodeEncodeError:  # a lone surrogate: msgpack refuses it too
                return None
            p = _put_raw(p, end, data, size, False)
        elif t is int:
            p = _put_int(p, v)
        elif t is float:
            d = PyFloat_AS_DOUBLE(v)
            memcpy(cython.address(bits), cython.address(d), 8)
            p[0] = 0xCB
            p = _put_be(p + 1, bits, 8)
        elif v is None:
            p[0] = 0xC0
            p += 1
        elif v is True:
            p[0] = 0xC3
            p += 1
        elif v is False:
            p[0] = 0xC2
            p += 1
        elif t is bytes:
            p = _put_raw(p, end, PyBytes_AS_STRING(v), len(v), True)
        else:
            return None
        if p == cython.NULL or p > end:
            return None
    p = _put_int(p, tup.lineage) if type(tup.lineage) is int else cython.NULL
    if p != cython.NULL and root is not None:
        p = _put_int(p, root)
        if p != cython.NULL:
            p = _put_uint(p, tup._edge)
    if p == cython.NULL or p - start > limit:
        return None
    return PyBytes_FromStringAndSize(cython.cast(cython.p_char, start), p - start)


@cython.cfunc
def _c_ints(msg: tuple) -> object:
    """:func:`encode_ints`, compiled (None: not 2 or 4 ints in range; msgpack then decides)."""
    buf: cython.uchar[40]
    n: cython.Py_ssize_t = len(msg)
    if n != 4 and n != 2:
        return None
    p: cython.p_uchar = cython.address(buf[0])
    for v in msg:
        if type(v) is not int:
            return None
        p = _put_int(p, v)
        if p == cython.NULL:
            return None
    return PyBytes_FromStringAndSize(cython.cast(cython.p_char, cython.address(buf[0])), p - cython.address(buf[0]))


@cython.cfunc
def _ack_bytes(root: object, val: object) -> object:
    """An ``(ACK, root, val, 0)`` acker message as :func:`encode_ints` writes it, compiled (None: a
    value outside [-2**63, 2**64), or as Python: the caller encodes the tuple)."""
    if not cython.compiled:
        return None
    buf: cython.uchar[24]
    start: cython.p_uchar = cython.address(buf[0])
    if type(root) is not int or type(val) is not int:
        return None
    start[0] = ACK  # a positive fixint
    p: cython.p_uchar = _put_int(start + 1, root)
    if p != cython.NULL:
        p = _put_int(p, val)
    if p == cython.NULL:
        return None
    p[0] = 0
    return PyBytes_FromStringAndSize(cython.cast(cython.p_char, start), p + 1 - start)


#: an ack pack past this many bytes goes out as an element and the flush starts another (4,096 acks)
ACK_PACK_LIMIT = 4096 * ACK_PACK_BYTES
_PACK_LIMIT = ACK_PACK_LIMIT  # C copies (outbox.pxd)
_ACK_BYTES = ACK_PACK_BYTES
#: room kept for a bin32 header before a pack's acks (the shortest header is written when it is sent)
_PACK_HEAD = 5


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _put_le(p: cython.p_uchar, v: cython.ulonglong) -> cython.p_uchar:
    """``v`` as 8 bytes, little-endian."""
    k: cython.int
    for k in range(8):
        p[k] = cython.cast(cython.uchar, (v >> (8 * k)) & 0xFF)
    return p + 8


def _bin(data: bytes | bytearray) -> bytes:
    """``data`` as a msgpack bin (header and bytes)."""
    return _packb(bytes(data))


@cython.cclass
class TupleSender:
    """The executor threads' side of sending to other workers (``Transfer.send_tuple``,
    ``send_acker``, ``send_result``): put a tuple's body, an acker message or a verdict in its group
    in its destination's outbox.

    A body is encoded here, at emit: a plain one by :func:`encode_body`, any other by ``pack``
    (msgpack with the Arrow hook), so a value msgpack cannot carry, or a tuple over ``max_bytes``,
    fails the emit (and its input tuple) with a clear error. A component may change a list after
    emitting it (Storm serializes on its transfer thread: there it must not).

    ``groups``: "component:stream" → task → source task → the ``append`` of the group's deque, made
    on a group's first tuple through ``outbox_of(task)`` (the destination's :class:`Outbox`, or
    None: the task has no route, and the tuple is counted by ``outbox_of`` and dropped). The
    transfer replaces ``groups`` (and ``acker_groups``, ``ack_pack_groups``, ``result_groups``,
    ``control_groups``: acker / spout task → ``append``) with empty dicts when the routes change."""

    def __init__(self, pack: Callable[[Any], bytes], max_bytes: int, outbox_of: Callable[[int], Outbox | None]):
        self.pack = pack
        self.max_bytes = max_bytes
        self.outbox_of = outbox_of
        self.groups = {}
        self.acker_groups = {}
        self.ack_pack_groups = {}
        self.result_groups = {}
        self.control_groups = {}

    def send_tuple(self, task: int, tup: Tuple) -> None:
        t: Tuple = tup
        body = _encode_body(t, self.max_bytes)
        if body is None:
            try:
                body = encode_tuple(self.pack, t)
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
        source = t.task
        # three lookups by a str (the same object each time) and two small ints: a tuple key cost its
        # allocation, three hashes and a comparison, twice as many instructions
        by_task: dict = self.groups.get(fields.source_key)
        by_source: dict = by_task.get(task) if by_task is not None else None
        append = by_source.get(source) if by_source is not None else None
        if append is None:
            box = self.outbox_of(task)
            if box is None:
                return
            if fields.stream == CHECKPOINT_STREAM:  # a barrier (never cached: every one comes here)
                box.barrier(task, source, fields.component, fields.stream, body)
                # sealed: what follows goes behind the barrier (``list(dict.values())`` is one C call:
                # other executor threads may add streams meanwhile; only this one has this source task's)
                for streams in list(self.groups.values()):
                    sources = streams.get(task)
                    if sources is not None:
                        sources.pop(source, None)
                return
            append = box.tuple_group(task, source, fields.component, fields.stream).append
            if by_task is None:
                by_task = self.groups.setdefault(fields.source_key, {})
            if by_source is None:
                by_source = by_task.setdefault(task, {})
            by_source[source] = append
        append(body)

    def send_acker(self, task: int, msg: tuple) -> None:
        """``msg``: ``(kind, root, val, spout_task)``, integers, for an acker task elsewhere."""
        self._append(self.acker_groups, task, msg, ACKERS)

    def send_ack(self, task: object, root: object, val: object):
        """``send_acker(task, (ACK, root, val, 0))`` without the message tuple: the ack buffer's
        path (:meth:`gale.worker.runtime.delivery.Delivery.flush_acks`), written from the two ints."""
        encoded = _ack_bytes(root, val)
        if encoded is None:
            encoded = _encode_ints((ACK, root, val, 0))
        self._add(self.acker_groups, task, encoded, ACKERS)

    def new_pack(self) -> bytearray:
        """An empty ack pack, for :meth:`pack_ack` (room kept for the bin's header)."""
        return bytearray(_PACK_HEAD)

    def pack_ack(self, pack: bytearray, task: object, root: object, val: object) -> cython.int:
        """Add an ack to ``pack`` (one flush's acks for the acker task ``task``, from :meth:`new_pack`:
        the flushing thread's own, so no other thread sees it until :meth:`send_pack` queues it).
        Returns 1 when the pack is full (the caller sends it and starts another), else 0. An ack
        outside unsigned 64 bits goes as an acker message (:meth:`send_ack`, which raises past
        msgpack's integers)."""
        n: cython.Py_ssize_t = len(pack)
        if cython.compiled:
            r: cython.ulonglong
            v: cython.ulonglong
            if not (_as_u64(root, cython.address(r)) and _as_u64(val, cython.address(v))):
                self.send_ack(task, root, val)
                return 0
            PyByteArray_Resize(pack, n + _ACK_BYTES)
            _put_le(_put_le(cython.cast(cython.p_uchar, PyByteArray_AS_STRING(pack)) + n, r), v)
        else:
            if type(root) is not int or type(val) is not int or not 0 <= root <= MAX_U64 or not 0 <= val <= MAX_U64:
                self.send_ack(task, root, val)
                return 0
            pack += root.to_bytes(8, "little") + val.to_bytes(8, "little")
        return 1 if n + _ACK_BYTES >= _PACK_LIMIT else 0

    def send_pack(self, task: object, pack: bytearray):
        """Queue ``pack``'s acks (if any) as one element of ``task``'s ack pack group."""
        n: cython.Py_ssize_t = len(pack) - _PACK_HEAD
        if n <= 0:
            return
        if cython.compiled:
            # the bin's header goes just before the acks, in the room kept for it: one copy, into bytes
            head: cython.uchar[5]
            end: cython.p_uchar = _put_len(cython.address(head[0]), n, 0xC4)
            h: cython.Py_ssize_t = end - cython.address(head[0])
            p: cython.p_uchar = cython.cast(cython.p_uchar, PyByteArray_AS_STRING(pack)) + _PACK_HEAD - h
            memcpy(p, cython.address(head[0]), h)
            encoded = PyBytes_FromStringAndSize(cython.cast(cython.p_char, p), n + h)
        else:
            encoded = _bin(pack[_PACK_HEAD:])
        self._add(self.ack_pack_groups, task, encoded, ACK_PACKS)

    def send_result(self, task: int, result: tuple) -> None:
        """``result``: ``(outcome, root)``, integers, for a spout task elsewhere."""
        self._append(self.result_groups, task, result, RESULTS)

    def send_control(self, task: int, payload: tuple) -> None:
        """``payload``: four unsigned 64-bit integers, a control message for a spout task elsewhere."""
        self._append(self.control_groups, task, payload, CONTROLS)

    @cython.cfunc
    def _append(self, groups: dict, task: object, item: tuple, kind: cython.int):
        self._add(groups, task, _encode_ints(item), kind)

    @cython.cfunc
    def _add(self, groups: dict, task: object, encoded: bytes, kind: cython.int):
        append = groups.get(task)
        if append is None:
            box = self.outbox_of(task)
            if box is None:
                return
            append = groups[task] = box.group(kind, task).append
        append(encoded)
