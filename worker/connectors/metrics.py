"""Connector counters shown in the executor's statistics (``extra``; summed per component in the UI).

A task bumps its own counters from the executor thread only (the executor's ``extra`` dict is read
by the stats thread; every key is created up front so its size never changes while it is read).

Note: the runtime has no public hook for component-defined counters yet, so this reaches the
executor's stats through the collector (``collector._executor.stats.extra``), in this one place.
Outside a Gale executor (a collector without one) the counters are kept on the task only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class TaskCounters:
    def __init__(self, collector: Any, names: Iterable[str]):
        stats = getattr(getattr(collector, "_executor", None), "stats", None)
        self._extra: dict[str, float] = stats.extra if stats is not None else {}
        #: this task's own values
        self.values: dict[str, float] = {}
        for name in names:
            self.values[name] = 0
            self._extra.setdefault(name, 0)

    def incr(self, name: str, n: float = 1) -> None:
        if n:
            self.values[name] += n
            self._extra[name] = self._extra.get(name, 0) + n

    def __getitem__(self, name: str) -> float:
        return self.values[name]
