# Cython declarations for acker.py (compiled build only; docs/architecture.md, "Compiled hot path")
cdef class _Tree:
    cdef public unsigned long long val
    cdef public unsigned long long task
    cdef public bint failed
    cdef public int gen
