# Cython declarations for bolt.py (compiled build only; docs/architecture.md, "Compiled hot path"):
# the hot loop reads a Tuple's and its Fields' slots directly
from gale.topology.tuple cimport Fields, Tuple
