# Cython declarations for route.py (compiled build only; docs/architecture.md, "Compiled hot path")
from gale.topology.tuple cimport Fields

cdef class StreamRoute:
    cdef public str stream
    cdef public Fields fields
    cdef public Py_ssize_t n
    cdef public list groupers
    cdef public bint direct
    cdef public frozenset direct_tasks
    cdef public object single
    cdef public object choose
    cdef public Py_ssize_t emitted
    cdef public Py_ssize_t transferred
    cdef public object salt
    cdef public Py_hash_t salt_hash
    cdef public object const
    cdef public object const_queues
    cdef public object single_queue
    cdef public object single_append
