# Cython declarations for tuple.py (compiled build only; see docs/architecture.md, "Compiled hot path")
cimport cython
cdef class Fields:
    cdef public tuple names
    cdef public dict _index
    cdef public str source_key
    cdef public str component
    cdef public str stream

@cython.freelist(512)
cdef class Tuple:
    cdef public object values
    cdef public Fields fields
    cdef public object task
    cdef public object _mid
    cdef public object _root
    cdef public unsigned long long _edge
    cdef public unsigned long long ack_val
    cdef public double _st
    cdef public object lineage
    cdef public Py_ssize_t _emits

cdef Tuple _make(object values, Fields fields, object task, object mid, object root, unsigned long long edge,
                 object lineage)
