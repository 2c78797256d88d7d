"""The compiled build's reader of plain batches (compiled build only; as Python it reads nothing).

A payload of well-formed TUPLES, ACKERS, ACK_PACKS and RESULTS groups, every value a scalar (str, bytes, int,
float, bool, None), is read straight from its bytes in C: no msgpack list per body, no int object
for an edge id. Anything else — a LOADS report, a single message, a nested or Arrow value, a
message that fails a check — and the fast path gives up on the whole payload before delivering
any of it, and :meth:`BatchDecoder.decode` reads it with msgpack and checks it message by message
(which counts what is invalid). Both read the same tuples: tests/test_wire_fast.py.

:func:`read_fast` is what :meth:`gale.worker.wire.BatchDecoder.decode` calls first; C declarations:
``wire_fast.pxd``.
"""

from __future__ import annotations

from typing import Any

import cython

from gale.topology.tuple import Fields
from gale.worker.runtime.acker import ACK, ACKED, FAIL, FAILED, INIT, RESET, RESET_TIMEOUT
from gale.worker.wire_kinds import ACK_PACK_BYTES, ACK_PACKS, ACKER, ACKERS, MAX_TASK, RESULT, RESULTS, TUPLE, TUPLES


@cython.cclass
class _Reader:
    """A cursor over msgpack bytes (compiled build only). Each read moves past what it read, or
    sets ``bad`` (the bytes end, or hold another type than asked for)."""

    @cython.cfunc
    @cython.exceptval(check=False)
    def _be(self, n: cython.int) -> cython.ulonglong:
        """The next ``n`` bytes, big-endian (the caller checked they are there)."""
        v: cython.ulonglong = 0
        k: cython.int
        for k in range(n):
            v = (v << 8) | self.p[k]
        self.p += n
        return v

    @cython.cfunc
    @cython.exceptval(check=False)
    def header(self) -> cython.Py_ssize_t:
        """An array's length."""
        if self.p >= self.end:
            self.bad = True
            return -1
        b: cython.uchar = self.p[0]
        if b & 0xF0 == 0x90:
            self.p += 1
            return b & 0x0F
        if b == 0xDC and self.end - self.p >= 3:
            self.p += 1
            return cython.cast(cython.Py_ssize_t, self._be(2))
        if b == 0xDD and self.end - self.p >= 5:
            self.p += 1
            return cython.cast(cython.Py_ssize_t, self._be(4))
        self.bad = True
        return -1

    @cython.cfunc
    @cython.exceptval(check=False)
    def bin_header(self) -> cython.Py_ssize_t:
        """A bin's length (its bytes follow, checked to be there)."""
        if self.p >= self.end:
            self.bad = True
            return -1
        b: cython.uchar = self.p[0]
        n: cython.Py_ssize_t = -1
        if 0xC4 <= b <= 0xC6 and self.end - self.p > (1 << (b - 0xC4)):
            self.p += 1
            n = cython.cast(cython.Py_ssize_t, self._be(1 << (b - 0xC4)))
        if n < 0 or self.end - self.p < n:
            self.bad = True
            return -1
        return n

    @cython.cfunc
    @cython.exceptval(check=False)
    def le64(self) -> cython.ulonglong:
        """The next 8 bytes, little-endian (the caller checked they are there)."""
        v: cython.ulonglong = 0
        k: cython.int
        for k in range(7, -1, -1):
            v = (v << 8) | self.p[k]
        self.p += 8
        return v

    @cython.cfunc
    @cython.exceptval(check=False)
    def uint(self) -> cython.ulonglong:
        """A non-negative integer (msgpack writes one as a fixint or uint*, and may as an int*)."""
        if self.p >= self.end:
            self.bad = True
            return 0
        b: cython.uchar = self.p[0]
        if b < 0x80:
            self.p += 1
            return b
        n: cython.int = 0
        signed: cython.bint = False
        if 0xCC <= b <= 0xCF:
            n = 1 << (b - 0xCC)
        elif 0xD0 <= b <= 0xD3:
            n = 1 << (b - 0xD0)
            signed = True
        if n == 0 or self.end - self.p < n + 1:
            self.bad = True
            return 0
        if signed and self.p[1] & 0x80:  # a negative int*
            self.bad = True
            return 0
        self.p += 1
        return self._be(n)

    @cython.cfunc
    def integer(self) -> object:
        """Any msgpack integer, as an int (a lineage: signed or unsigned 64-bit)."""
        if self.p >= self.end:
            self.bad = True
            return None
        b: cython.uchar = self.p[0]
        if b >= 0xE0:  # a negative fixint
            self.p += 1
            return PyLong_FromLongLong(cython.cast(cython.schar, b))
        if 0xD0 <= b <= 0xD3:
            n: cython.int = 1 << (b - 0xD0)
            if self.end - self.p < n + 1:
                self.bad = True
                return None
            self.p += 1
            v: cython.ulonglong = self._be(n)
            if n < 8 and v >> (8 * n - 1):  # sign-extend
                v |= ~cython.cast(cython.ulonglong, 0) << (8 * n)
            return PyLong_FromLongLong(cython.cast(cython.longlong, v))
        u: cython.ulonglong = self.uint()
        return None if self.bad else PyLong_FromUnsignedLongLong(u)

    @cython.cfunc
    def raw(self, n: cython.Py_ssize_t, text: cython.bint) -> object:
        """The next ``n`` bytes as a str (strict UTF-8, as msgpack decodes) or bytes."""
        if n < 0 or self.end - self.p < n:
            self.bad = True
            return None
        start = cython.cast(cython.p_const_char, self.p)
        if text:
            try:
                out = PyUnicode_DecodeUTF8(start, n, cython.NULL)
            except UnicodeDecodeError:
                self.bad = True
                return None
        else:
            out = PyBytes_FromStringAndSize(start, n)
        self.p += n
        return out

    @cython.cfunc
    def text(self) -> object:
        """A str."""
        if self.p >= self.end:
            self.bad = True
            return None
        b: cython.uchar = self.p[0]
        n: cython.Py_ssize_t = -1
        if b & 0xE0 == 0xA0:
            self.p += 1
            n = b & 0x1F
        elif 0xD9 <= b <= 0xDB and self.end - self.p > (1 << (b - 0xD9)):
            self.p += 1
            n = cython.cast(cython.Py_ssize_t, self._be(1 << (b - 0xD9)))
        return self.raw(n, True)

    @cython.cfunc
    def value(self) -> object:
        """A scalar: str, bytes, int, float, bool or None (None also when ``bad``: check it)."""
        if self.p >= self.end:
            self.bad = True
            return None
        b: cython.uchar = self.p[0]
        if b < 0x80 or b >= 0xE0 or 0xCC <= b <= 0xD3:
            return self.integer()
        if b & 0xE0 == 0xA0 or 0xD9 <= b <= 0xDB:
            return self.text()
        if b == 0xC0:
            self.p += 1
            return None
        if b == 0xC2 or b == 0xC3:
            self.p += 1
            return b == 0xC3
        d: cython.double
        f: cython.float
        bits: cython.ulonglong
        half: cython.uint
        if b == 0xCB and self.end - self.p >= 9:
            self.p += 1
            bits = self._be(8)
            memcpy(cython.address(d), cython.address(bits), 8)
            return d
        if b == 0xCA and self.end - self.p >= 5:
            self.p += 1
            half = cython.cast(cython.uint, self._be(4))
            memcpy(cython.address(f), cython.address(half), 4)
            return cython.cast(cython.double, f)
        if 0xC4 <= b <= 0xC6 and self.end - self.p > (1 << (b - 0xC4)):
            self.p += 1
            return self.raw(cython.cast(cython.Py_ssize_t, self._be(1 << (b - 0xC4))), False)
        self.bad = True  # a nested array or map, an ext (Arrow), or a reserved byte
        return None


@cython.cfunc
def _fast_groups(decoder: object, payload: bytes) -> object:
    """``([(task, messages), ...], messages seen)`` of a payload the fast path can read, where every
    group passes the checks :meth:`BatchDecoder.decode` makes; else None."""
    r: _Reader = _Reader.__new__(_Reader)
    r.p = cython.cast(cython.p_const_uchar, PyBytes_AS_STRING(payload))
    r.end = r.p + len(payload)
    r.bad = False
    roles: dict = decoder.roles
    streams: dict = decoder._fields
    spout_tasks = decoder.spout_tasks  # an INIT must name one (None: not checked)
    groups: list = []
    seen: cython.Py_ssize_t = 0
    count: cython.Py_ssize_t
    i: cython.Py_ssize_t
    j: cython.Py_ssize_t
    width: cython.Py_ssize_t
    n_fields: cython.Py_ssize_t
    root: cython.ulonglong
    edge: cython.ulonglong
    a: cython.ulonglong
    b: cython.ulonglong
    c: cython.ulonglong
    d: cython.ulonglong
    fields: Fields
    while r.p < r.end:
        size: cython.Py_ssize_t = r.header()
        kind: cython.ulonglong = r.uint()
        task: cython.ulonglong = r.uint()
        if r.bad or task > MAX_TASK:
            return None
        task_obj = PyLong_FromUnsignedLongLong(task)
        role = roles.get(task_obj)
        if size == 6 and kind == TUPLES:
            component = r.text()
            stream = r.text()
            source_task: cython.ulonglong = r.uint()
            count = r.header()
            if r.bad or role != TUPLE or source_task > MAX_TASK:
                return None
            entry = streams.get((task_obj, component, stream))
            if entry is None:
                entry = decoder._stream(task_obj, component, stream)
                if type(entry) is str:
                    return None
            fields = entry[0]
            n_fields = entry[1]
            source = PyLong_FromUnsignedLongLong(source_task)
            tuples: list = []
            for i in range(count):
                width = r.header()
                if r.header() != n_fields or (width != 4 and width != 2):
                    return None
                values: list = [None] * n_fields  # made at its size (appends grew it)
                for j in range(n_fields):
                    values[j] = r.value()
                lineage = r.integer()
                if width == 4:
                    root = r.uint()
                    edge = r.uint()
                    if r.bad:
                        return None
                    tuples.append(_make(values, fields, source, None, PyLong_FromUnsignedLongLong(root), edge,
                                        lineage))
                else:
                    if r.bad:
                        return None
                    tuples.append(_make(values, fields, source, None, None, 0, lineage))
        elif size == 3 and kind == ACKERS:
            count = r.header()
            if r.bad or role != ACKER or count & 3:
                return None
            count >>= 2
            tuples = []
            for i in range(count):
                a = r.uint()
                b = r.uint()
                c = r.uint()
                d = r.uint()
                if r.bad or (a != INIT and a != ACK and a != FAIL and a != RESET) or d > MAX_TASK:
                    return None
                spout = PyLong_FromUnsignedLongLong(d)
                if a == INIT and spout_tasks is not None and spout not in spout_tasks:
                    return None
                tuples.append((PyLong_FromUnsignedLongLong(a), PyLong_FromUnsignedLongLong(b),
                               PyLong_FromUnsignedLongLong(c), spout))
        elif size == 3 and kind == ACK_PACKS:
            count = r.header()
            if r.bad or role != ACKER:
                return None
            tuples = []
            ack = ACK
            zero = 0
            for i in range(count):
                width = r.bin_header()
                if r.bad or width % ACK_PACK_BYTES:
                    return None
                for j in range(width // ACK_PACK_BYTES):
                    root = r.le64()
                    a = r.le64()
                    tuples.append((ack, PyLong_FromUnsignedLongLong(root), PyLong_FromUnsignedLongLong(a), zero))
            count = len(tuples)
        elif size == 3 and kind == RESULTS:
            count = r.header()
            if r.bad or role != RESULT or count & 1:
                return None
            count >>= 1
            tuples = []
            for i in range(count):
                a = r.uint()
                b = r.uint()
                if r.bad or (a != ACKED and a != FAILED and a != RESET_TIMEOUT):
                    return None
                tuples.append((PyLong_FromUnsignedLongLong(a), PyLong_FromUnsignedLongLong(b)))
        else:  # a LOADS report, a single message or something malformed: msgpack and the checks
            return None
        seen += count
        if count:
            groups.append((task_obj, tuples))
    return groups, seen


def read_fast(decoder: Any, payload: bytes) -> tuple[list, int] | None:
    """What the fast path reads from ``payload`` (``([(task, messages), ...], seen)``), or None
    where it gives the payload to msgpack — always None as Python (for tests and diagnosis)."""
    if cython.compiled:
        return _fast_groups(decoder, payload)
    return None
