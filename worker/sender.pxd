# Cython declarations for sender.py (compiled build only; docs/architecture.md, "Compiled hot path")
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.string cimport memcpy

from gale.topology.tuple cimport Fields, Tuple

cdef extern from "Python.h":
    # declared without an error check: the callers test PyErr_Occurred themselves, and clear it
    int _PyLong_Sign(object v) noexcept
    size_t _PyLong_NumBits(object v) noexcept
    unsigned long long PyLong_AsUnsignedLongLongMask(object v) noexcept
    long long _long_as_i64 "PyLong_AsLongLong"(object v) noexcept
    void* PyErr_Occurred() noexcept
    void PyErr_Clear() noexcept

cdef Py_ssize_t PLAIN_BODY_BYTES
cdef Py_ssize_t _PACK_LIMIT, _ACK_BYTES, _PACK_HEAD

cdef list _body(Tuple tup)
cdef unsigned char* _put_uint(unsigned char* p, unsigned long long v) noexcept
cdef unsigned char* _put_be(unsigned char* p, unsigned long long v, int n) noexcept
cdef bint _as_u64(object v, unsigned long long* out) noexcept
cdef unsigned char* _put_int(unsigned char* p, object v) noexcept
cdef unsigned char* _put_len(unsigned char* p, Py_ssize_t n, unsigned char marker8) noexcept
cdef unsigned char* _put_raw(unsigned char* p, unsigned char* end, const char* data, Py_ssize_t n, bint binary) noexcept
cdef object _encode_body(Tuple tup, Py_ssize_t max_bytes)
cdef bytes _encode_ints(tuple msg)
cdef object _c_body(Tuple tup, Py_ssize_t limit)
cdef object _c_ints(tuple msg)
cdef object _ack_bytes(object root, object val)
cdef unsigned char* _put_le(unsigned char* p, unsigned long long v) noexcept

cdef class TupleSender:
    cdef public object pack
    cdef public Py_ssize_t max_bytes
    cdef public object outbox_of
    cdef public dict groups
    cdef public dict acker_groups
    cdef public dict ack_pack_groups
    cdef public dict result_groups
    cdef public dict control_groups

    cpdef send_ack(self, object task, object root, object val)
    cpdef bytearray new_pack(self)
    cpdef int pack_ack(self, bytearray pack, object task, object root, object val) except -1
    cpdef send_pack(self, object task, bytearray pack)
    cdef _append(self, dict groups, object task, tuple item, int kind)
    cdef _add(self, dict groups, object task, bytes encoded, int kind)
