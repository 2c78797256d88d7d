# Cython declarations for outbox.py (compiled build only; docs/architecture.md, "Compiled hot path")
from gale.topology.tuple cimport Fields, Tuple

cdef list _body(Tuple tup)
cdef bint _plain(object values, Py_ssize_t max_bytes) noexcept

cdef class TupleSender:
    cdef public object pack
    cdef public Py_ssize_t max_bytes
    cdef public object outbox_of
    cdef public dict groups
    cdef public dict acker_groups
    cdef public dict result_groups

    cdef _append(self, dict groups, object task, object item, int kind)
