# Cython declarations for grouping.py (compiled build only; docs/architecture.md, "Compiled hot path")
from gale.worker.runtime.splitmix cimport splitmix64

cdef class Grouper:
    pass

cdef class ShuffleGrouper(Grouper):
    cdef public list _tasks
    cdef public list _order
    cdef public Py_ssize_t _i
    cdef public object _rng
    cdef public unsigned long long _state

    cdef void _reshuffle(self, list order)

cdef class FieldsGrouper(Grouper):
    cdef public list _tasks
    cdef public list _idx
    cdef public Py_ssize_t _n
    cdef public Py_ssize_t _single
    cdef public bint _builtin

cdef class KeyGroupGrouper(Grouper):
    cdef public list _targets
    cdef public list _idx
    cdef public Py_ssize_t _groups
    cdef public Py_ssize_t _single
    cdef public dict _cache
    cdef public Py_ssize_t _cache_keys
