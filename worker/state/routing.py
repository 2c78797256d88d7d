"""Fields grouping into a stateful bolt: hash → key group → task (``gale.topology.keygroups``), so the
task receiving a key's tuples owns the key's state, whatever the bolt's parallelism. The grouper is
on the per-tuple path, so it lives with the compiled groupers (``gale.worker.runtime.grouping``)."""

from __future__ import annotations

from gale.worker.runtime.grouping import CACHE_KEYS, KeyGroupGrouper

__all__ = ["CACHE_KEYS", "KeyGroupGrouper"]
