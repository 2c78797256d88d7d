# Cython declarations for spout.py (compiled build only; docs/architecture.md, "Compiled hot path"):
# the round reads its collectors' emit counters directly
from gale.worker.runtime.collector cimport SpoutOutputCollector
