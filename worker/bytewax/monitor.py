"""What a run in this process learns from its Bytewax components: which tasks reached the end of their
input, whether a source aborted, the first user error. ``run_main`` puts a :class:`RunMonitor` in the
worker's resources (``context.resources[MONITOR]``); components in a cluster worker have none and
report the same in their statistics (``bytewax_ended_tasks``) and errors."""

from __future__ import annotations

import threading
from typing import Any

#: the resource name of the monitor
MONITOR = "bytewax.monitor"


class RunMonitor:
    """Written by executor threads, read by the thread waiting for the run (a condition wakes it)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.ended_tasks: set[int] = set()
        self.aborted_tasks: set[int] = set()
        self.error: tuple[str, BaseException] | None = None
        #: set by the run: every input stops asking its partitions for items
        self.halted = False

    def ended(self, step_id: str, task: int) -> None:
        with self.cond:
            self.ended_tasks.add(task)
            self.cond.notify_all()

    def aborted(self, step_id: str, task: int) -> None:
        with self.cond:
            self.aborted_tasks.add(task)
            self.cond.notify_all()

    def failed(self, step_id: str, exc: BaseException) -> None:
        with self.cond:
            if self.error is None:
                self.error = (step_id, exc)
            self.cond.notify_all()

    def wait(self, predicate: Any, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)
