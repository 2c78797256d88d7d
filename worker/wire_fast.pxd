# Cython declarations for wire_fast.py (compiled build only; docs/architecture.md, "Compiled hot path")
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcpy

from gale.topology.tuple cimport Fields, Tuple, _make

cdef class _Reader:
    cdef const unsigned char* p
    cdef const unsigned char* end
    cdef bint bad

    cdef unsigned long long _be(self, int n) noexcept
    cdef Py_ssize_t header(self) noexcept
    cdef Py_ssize_t bin_header(self) noexcept
    cdef unsigned long long le64(self) noexcept
    cdef unsigned long long uint(self) noexcept
    cdef object integer(self)
    cdef object raw(self, Py_ssize_t n, bint text)
    cdef object text(self)
    cdef object value(self)

cdef object _fast_groups(object decoder, bytes payload)
