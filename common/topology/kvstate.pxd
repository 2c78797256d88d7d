# Cython declarations for kvstate.py (compiled build only; docs/architecture.md, "Compiled hot path")
cdef class KeyValueState:
    cdef public dict _data
    cdef public dict _dirty
    cdef public set _deleted
    cdef public object _owns
    cdef public object _packb
