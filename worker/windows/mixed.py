"""Pure cores of Storm's mixed windows: a count length with a duration sliding interval, and a duration
length with a count sliding interval (actions as in :mod:`.core`).

Both see tuples in *entering order*: arrival order with processing time; with event time, timestamp
order as the watermark passes them (a tuple with ``ts < W`` is late, as for count windows).

* :class:`CountEveryDuration` — "the last ``length`` tuples, every ``slide`` ms": for every multiple
  ``t`` of ``slide`` that the watermark reaches (``t <= W``), the window is the last ``length``
  entered tuples with ``ts < t``; it fires if it holds a tuple that entered since the last firing.
  ``start``/``end`` are ``t - slide`` and ``t``. A tuple expires once ``length`` newer tuples are
  before a boundary that fired.
* :class:`DurationEveryCount` — "the tuples of the last ``length`` ms, every ``slide`` tuples": when
  the ``slide``-th tuple since the last firing enters, with timestamp ``t``, the window is the
  entered tuples with ``t - length < ts <= t`` (``[t + 1 - length, t + 1)``). A tuple expires once a
  window's reference time ``t`` is ``length`` past it.
"""

from __future__ import annotations

from typing import Any

from gale.worker.windows.core import Expire, Fire, _diff, _Entering
from gale.worker.windows.store import Entry, WindowStore


class CountEveryDuration(_Entering):
    """The last ``length`` tuples every ``slide`` ms; see the module docstring."""

    def _enter(self, entry: Entry) -> list[Any]:
        self.queue.append(entry)
        return []

    def advance(self, watermark: int) -> list[Any]:
        previous = self.watermark
        if previous is not None and watermark <= previous:
            return []
        self.watermark = watermark
        actions = self._release(watermark) if self.event_time else []
        slide, length = self.slide, self.length
        q = list(self.queue)  # entering order is timestamp order
        lowest = previous - previous % slide + slide if previous is not None else None
        # the window only changes at the boundary just above a tuple: only those can fire
        bounds = sorted({e.ts - e.ts % slide + slide for e in q})
        i = dropped = 0
        for t in bounds:
            if t > watermark:
                break
            if lowest is not None and t < lowest:
                continue
            while i < len(q) and q[i].ts < t:
                i += 1
            window = q[max(0, i - length):i]
            if not window or (len(window) == len(self._prev) and not _diff(window, self._prev)):
                continue
            new, expired = _diff(window, self._prev), _diff(self._prev, window)
            self._set_prev(window)
            actions.append(Fire(t - slide, t, window, new, expired))
            if i - length > dropped:  # older than the last ``length`` before a fired boundary
                gone = q[dropped:i - length]
                dropped = i - length
                self._remove(gone)
                actions.append(Expire(gone))
        for _ in range(dropped):
            self.queue.popleft()
        self._save()
        return actions

    def restore(self) -> None:
        self._restore_queue()


class DurationEveryCount(_Entering):
    """The tuples of the last ``length`` ms every ``slide`` tuples; see the module docstring."""

    def __init__(self, length: int, slide: int, event_time: bool = False, store: WindowStore | None = None):
        super().__init__(length, slide, event_time, store)
        self.count = 0  # tuples entered since the last firing

    def _enter(self, entry: Entry) -> list[Any]:
        self.queue.append(entry)
        self.count += 1
        if self.count < self.slide:
            return []
        self.count = 0
        t = entry.ts
        window = [e for e in self.queue if t - self.length < e.ts <= t]
        new, expired = _diff(window, self._prev), _diff(self._prev, window)
        self._set_prev(window)
        actions: list[Any] = [Fire(t + 1 - self.length, t + 1, window, new, expired)]
        gone = []
        while self.queue and self.queue[0].ts <= t - self.length:
            gone.append(self.queue.popleft())
        if gone:
            self._remove(gone)
            actions.append(Expire(gone))
        self._save()
        return actions

    def advance(self, watermark: int) -> list[Any]:
        if self.watermark is not None and watermark <= self.watermark:
            return []
        self.watermark = watermark
        actions = self._release(watermark) if self.event_time else []
        self._save()
        return actions

    def restore(self) -> None:
        prev = set(self._restore_queue())
        self.count = sum(1 for e in self.queue if e.seq not in prev)
