# Cython declarations for gate.py (compiled build only; docs/architecture.md, "Compiled hot path")
from gale.topology.tuple cimport Fields, Tuple
