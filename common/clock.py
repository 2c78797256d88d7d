"""Clocks: the real one and a simulated one for tests of timeouts without sleeping."""

from __future__ import annotations

import threading
import time as _time


class RealClock:
    """Wall-clock ``time()`` and ``monotonic()`` from the time module."""

    time = staticmethod(_time.time)
    monotonic = staticmethod(_time.monotonic)
    perf_counter = staticmethod(_time.perf_counter)
    sleep = staticmethod(_time.sleep)


REAL_CLOCK = RealClock()


class SimulatedClock:
    """Time moves only when a test calls :meth:`advance`."""

    def __init__(self, start: float = 1_700_000_000.0):
        self._now = start
        self._mono = 1000.0
        self._lock = threading.Lock()

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def perf_counter(self) -> float:
        return self._mono

    def advance(self, secs: float) -> None:
        with self._lock:
            self._now += secs
            self._mono += secs

    def sleep(self, secs: float) -> None:
        self.advance(secs)
