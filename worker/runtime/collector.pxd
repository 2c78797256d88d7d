# Cython declarations for collector.py (compiled build only; docs/architecture.md, "Compiled hot path")
from gale.topology.tuple cimport Fields, Tuple
from gale.worker.runtime.route cimport StreamRoute
from gale.worker.runtime.splitmix cimport splitmix64
from gale.worker.runtime.tuplehash cimport hash3, hash3h

cdef class _Collector:
    cdef public object _rand
    cdef public object _executor
    cdef public object _runtime
    cdef public object task
    cdef public str component
    cdef public dict _routes
    cdef public StreamRoute _default_route
    cdef public object _stats
    cdef public object _send_tuple
    cdef public object _send_remote
    cdef public object _queue_of
    cdef public object _send_acker
    cdef public object _acker_task
    cdef public bint _acking
    cdef public object _acker_queue
    cdef public object _acker_append
    cdef public object _capture
    cdef public bint _c_rand
    cdef public unsigned long long _rng

    cdef unsigned long long _new_id(self) except? 0

cdef class SpoutOutputCollector(_Collector):
    cdef public object _pending
    cdef public object _pending_put
    cdef public object _clock
    cdef public object _monotonic
    cdef public object _steer
    cdef public dict _message_salts
    cdef public object _generation
    cdef public Py_ssize_t _emitted

    cpdef object _message_lineage(self, str stream, object msg_id)
    cpdef list _emit(self, StreamRoute route, list targets, object values, object msg_id)

cdef class BoltOutputCollector(_Collector):
    cdef public object auto_anchor
    cdef public object _perf
    cdef public object _ack_buf
    cdef public Fields _acked_fields
    cdef public Py_ssize_t _acked_run
    cdef public bint _hold
