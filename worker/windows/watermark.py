"""The watermark of one windowed bolt task (Storm's ``WaterMarkEventGenerator``, per input task).

Each input task ``t`` (every task of every component the bolt subscribes to) has the newest
timestamp seen from it, ``latest[t]``, and the time it last sent a tuple, ``seen[t]`` (the tracker's
start for a task not heard from yet). With ``now`` the processing time:

* a task is **active** while ``now - seen[t] < idle_timeout``;
* if some task is active, the candidate is ``min(latest[t] for active t) - lag`` — and there is no
  candidate while an active task has sent nothing yet (it may still send old timestamps);
* if every task is idle, the candidate is ``max(latest) - lag + (now - last arrival)``: event time
  moves on with the clock, so the last windows of a stream that stopped still fire (a task that
  resumes later with older timestamps finds them late: they go to the late-tuple stream or are acked
  and counted, never lost);
* the watermark is the largest candidate so far (it never goes back).

Pure: timestamps and ``now`` are milliseconds given by the caller.
"""

from __future__ import annotations

from collections.abc import Iterable


class WatermarkTracker:
    def __init__(self, input_tasks: Iterable[int], lag_ms: int, idle_timeout_ms: int, now_ms: float):
        self.lag = lag_ms
        self.idle_timeout = idle_timeout_ms
        self.latest: dict[int, int | None] = {t: None for t in input_tasks}
        self.seen: dict[int, float] = dict.fromkeys(self.latest, now_ms)
        self.last_arrival: float | None = None
        self.watermark: int | None = None

    def observe(self, task: int, ts: int, now_ms: float) -> None:
        cur = self.latest.get(task)
        if cur is None or ts > cur:
            self.latest[task] = ts
        self.seen[task] = now_ms
        self.last_arrival = now_ms

    def compute(self, now_ms: float) -> int | None:
        """The watermark at ``now_ms`` (None until there is one)."""
        idle = self.idle_timeout
        seen = self.seen
        active = [t for t in self.latest if now_ms - seen[t] < idle]
        candidate: int | None = None
        if active:
            values = [self.latest[t] for t in active]
            if all(v is not None for v in values):
                candidate = min(values) - self.lag  # type: ignore[type-var]
        else:
            known = [v for v in self.latest.values() if v is not None]
            if known and self.last_arrival is not None:
                candidate = max(known) - self.lag + int(now_ms - self.last_arrival)
        if candidate is not None and (self.watermark is None or candidate > self.watermark):
            self.watermark = candidate
        return self.watermark

    def active_tasks(self, now_ms: float) -> list[int]:
        return sorted(t for t in self.latest if now_ms - self.seen[t] < self.idle_timeout)
