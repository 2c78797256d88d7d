# Cython declarations for rotating.py (compiled build only; docs/architecture.md, "Compiled hot path")
cdef class RotatingMap:
    cdef list _buckets
    cdef object _on_expire
