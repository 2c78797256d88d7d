# Cython declarations for delivery.py (compiled build only; docs/architecture.md, "Compiled hot path")
from gale.worker.sender cimport TupleSender, _as_u64

cdef class Delivery:
    cdef public dict queues
    cdef public list acker_tasks
    cdef public Py_ssize_t n_ackers
    cdef public object remote_tuple
    cdef public object remote_acker
    cdef public object remote_result
    cdef public object remote_control
    cdef public object single_acker
    cdef public TupleSender sender

    cdef inline _put(self, object task, object item, object remote)

cdef Py_ssize_t _tree_index(object root, Py_ssize_t n) except? -1
