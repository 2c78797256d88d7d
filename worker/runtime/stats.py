"""Executor statistics: cheap cumulative counters on the hot path, rolled into Storm's windows.

Executors bump plain dict counters (cumulative, all-time). A periodic :meth:`ExecutorStatsCollector.roll`
(from the heartbeat thread) folds the change since the last roll into time buckets per window, so
the 600 s / 10800 s / 86400 s values cost a few dozen small dicts per executor, not a time series.
Latencies are sampled (``topology.stats.sample.rate``) and kept as sum/count pairs.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from gale.records import ExecutorStats

WINDOWS = (600, 10800, 86400)
ALL_TIME = ":all-time"
BUCKETS_PER_WINDOW = 20

Flat = dict[tuple[str, str], float]


def _delta(now: Flat, before: Flat) -> Flat:
    out: Flat = {}
    for k, v in now.items():
        d = v - before.get(k, 0)
        if d:
            out[k] = d
    return out


class RollingWindows:
    """Sums of deltas over sliding windows, with ``BUCKETS_PER_WINDOW`` buckets each."""

    def __init__(self, windows: tuple[int, ...] = WINDOWS, buckets: int = BUCKETS_PER_WINDOW):
        self.windows = windows
        self.bucket_secs = {w: w / buckets for w in windows}
        self._buckets: dict[int, list[tuple[int, Flat]]] = {w: [] for w in windows}

    def add(self, now: float, delta: Flat) -> None:
        for w in self.windows:
            size = self.bucket_secs[w]
            idx = int(now // size)
            buckets = self._buckets[w]
            if not buckets or buckets[-1][0] != idx:
                buckets.append((idx, {}))
            bucket = buckets[-1][1]
            for k, v in delta.items():
                bucket[k] = bucket.get(k, 0) + v
            oldest = int((now - w) // size)
            while buckets and buckets[0][0] <= oldest:
                buckets.pop(0)

    def window(self, w: int) -> Flat:
        out: Flat = {}
        for _, bucket in self._buckets[w]:
            for k, v in bucket.items():
                out[k] = out.get(k, 0) + v
        return out


class ExecutorStatsCollector:
    """Counters of one executor. Hot-path fields are plain dicts bumped by the executor thread."""

    def __init__(self, component: str, kind: str, clock: Any = time):
        self.component = component
        self.kind = kind  # "spout" or "bolt"
        self.clock = clock
        self.start = clock.monotonic()
        # --- hot path (cumulative)
        self.emitted: dict[str, int] = defaultdict(int)
        self.transferred: dict[str, int] = defaultdict(int)
        self.acked: dict[str, int] = defaultdict(int)
        self.failed: dict[str, int] = defaultdict(int)
        self.timed_out: dict[str, int] = defaultdict(int)
        self.executed: dict[str, int] = defaultdict(int)
        self.complete_ms: dict[str, float] = defaultdict(float)
        self.complete_n: dict[str, int] = defaultdict(int)
        self.execute_ms: dict[str, float] = defaultdict(float)
        self.execute_n: dict[str, int] = defaultdict(int)
        self.process_ms: dict[str, float] = defaultdict(float)
        self.process_n: dict[str, int] = defaultdict(int)
        self.errors = 0
        self.extra: dict[str, float] = {}
        #: labelled gauges, name → label → value, replaced whole by their owner (a Kafka spout's
        #: lag per partition, a keyed state's biggest key groups): the latest value is reported
        self.details: dict[str, dict[str, float]] = {}
        #: stream → StreamRoute of the executor; emitted/transferred are counted on the routes
        self.routes: dict[str, Any] = {}
        # --- rolled
        self._last: Flat = {}
        self._rolling = RollingWindows()

    _METRICS = (
        "emitted", "transferred", "acked", "failed", "timed_out", "executed",
        "complete_ms", "complete_n", "execute_ms", "execute_n", "process_ms", "process_n",
    )

    def cumulative(self) -> Flat:
        flat: Flat = {}
        for metric in self._METRICS:
            for key, value in list(getattr(self, metric).items()):
                flat[(metric, key)] = value
        for stream, route in list(self.routes.items()):
            if route.emitted:
                flat[("emitted", stream)] = flat.get(("emitted", stream), 0) + route.emitted
            if route.transferred:
                flat[("transferred", stream)] = flat.get(("transferred", stream), 0) + route.transferred
        return flat

    def roll(self, now: float | None = None) -> None:
        now = self.clock.time() if now is None else now
        current = self.cumulative()
        self._rolling.add(now, _delta(current, self._last))
        self._last = current

    def uptime(self) -> float:
        return max(0.0, self.clock.monotonic() - self.start)

    def to_record(self, *, queue_depth: int = 0, pending: int = 0, busy_secs: float = 0.0) -> ExecutorStats:
        windows: dict[str, Flat] = {str(w): self._rolling.window(w) for w in WINDOWS}
        windows[ALL_TIME] = self.cumulative()

        def counts(metric: str) -> dict[str, dict[str, int]]:
            return {
                w: {k: int(v) for (m, k), v in flat.items() if m == metric}
                for w, flat in windows.items()
            }

        def avgs(sum_metric: str, n_metric: str) -> dict[str, dict[str, float]]:
            out: dict[str, dict[str, float]] = {}
            for w, flat in windows.items():
                out[w] = {
                    k: round(v / flat[(n_metric, k)], 3)
                    for (m, k), v in flat.items()
                    if m == sum_metric and flat.get((n_metric, k))
                }
            return out

        rec = ExecutorStats(
            component=self.component,
            kind=self.kind,
            emitted=counts("emitted"),
            transferred=counts("transferred"),
            acked=counts("acked"),
            failed=counts("failed"),
            queue_depth=queue_depth,
            pending=pending,
            busy_secs=round(busy_secs, 3),
            extra=dict(self.extra, errors=self.errors, timed_out=sum(self.timed_out.values())),
            details={name: dict(values) for name, values in list(self.details.items())},
        )
        if self.kind == "spout":
            rec.complete_ms_avg = avgs("complete_ms", "complete_n")
        else:
            rec.executed = counts("executed")
            rec.execute_ms_avg = avgs("execute_ms", "execute_n")
            rec.process_ms_avg = avgs("process_ms", "process_n")
            rec.capacity = self.capacity(windows["600"])
        return rec

    def capacity(self, last10: Flat) -> float:
        """Storm's capacity: executed × average execute latency / window length (10 min or uptime)."""
        window_ms = min(600.0, max(self.uptime(), 1.0)) * 1000.0
        executed = sum(v for (m, _), v in last10.items() if m == "executed")
        ms = sum(v for (m, _), v in last10.items() if m == "execute_ms")
        n = sum(v for (m, _), v in last10.items() if m == "execute_n")
        if not n:
            return 0.0
        return round(min(executed * (ms / n) / window_ms, 1e6), 4)
