"""Connector counters shown in the executor's statistics (``extra``; summed per component in the UI).

A task bumps its own counters from the executor thread only (the executor's ``extra`` dict is read
by the stats thread; every key is created up front so its size never changes while it is read).

Counters go through the collector's public ``declare_metrics``/``incr_metric``; a collector
without them (a test double) keeps the counters on the task only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class TaskCounters:
    def __init__(self, collector: Any, names: Iterable[str]):
        names = list(names)
        self._collector = collector
        self._incr = getattr(collector, "incr_metric", None)
        declare = getattr(collector, "declare_metrics", None)
        if declare is not None:
            declare(names)
        #: this task's own values
        self.values: dict[str, float] = {name: 0 for name in names}

    def incr(self, name: str, n: float = 1) -> None:
        if n:
            self.values[name] += n
            if self._incr is not None:
                self._incr(name, n)

    def set_details(self, name: str, values: dict[str, float]) -> None:
        """Replace a labelled gauge of the task (e.g. the lag per partition) in the executor's stats."""
        set_details = getattr(self._collector, "set_details", None)
        if set_details is not None:
            set_details(name, values)

    def __getitem__(self, name: str) -> float:
        return self.values[name]
