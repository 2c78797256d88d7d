"""Aggregating executor statistics per component and per topology (for the CLI, API and UI)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gale.records import ExecutorStats

WINDOWS = ("600", "10800", "86400", ":all-time")


def _sum(m: Mapping[str, Mapping[str, float]], window: str) -> float:
    return sum(m.get(window, {}).values())


def _weighted(avg: Mapping[str, Mapping[str, float]], weights: Mapping[str, Mapping[str, float]], window: str) -> tuple[float, float]:
    """(sum of avg × weight, total weight) over streams of one executor."""
    total = 0.0
    weight = 0.0
    w = weights.get(window, {})
    for key, value in avg.get(window, {}).items():
        n = w.get(key, 0)
        total += value * n
        weight += n
    return total, weight


_LEVEL_SUFFIXES = ("_avg", "_max", "_secs", "_ms", "_ready")


def _is_level(key: str) -> bool:
    """Extras that are levels (latest value, average, maximum), not counters to sum."""
    return key.endswith(_LEVEL_SUFFIXES) or key in ("spark_ready",)


def component_summary(stats: Iterable[ExecutorStats], window: str = ":all-time") -> dict[str, dict[str, Any]]:
    """component → {kind, executors, emitted, transferred, acked, failed, complete_latency_ms,
    execute_latency_ms, process_latency_ms, capacity, queue_depth, pending, errors, busy_secs}."""
    out: dict[str, dict[str, Any]] = {}
    acc: dict[str, dict[str, float]] = {}
    for st in stats:
        c = out.setdefault(
            st.component,
            {
                "kind": st.kind, "executors": 0, "emitted": 0, "transferred": 0, "acked": 0, "failed": 0,
                "executed": 0, "complete_latency_ms": 0.0, "execute_latency_ms": 0.0,
                "process_latency_ms": 0.0, "capacity": 0.0, "queue_depth": 0, "pending": 0, "errors": 0,
                "busy_secs": 0.0, "extra": {},
            },
        )
        a = acc.setdefault(st.component, {"cl": 0.0, "cw": 0.0, "el": 0.0, "ew": 0.0, "pl": 0.0, "pw": 0.0})
        c["executors"] += 1
        c["emitted"] += int(_sum(st.emitted, window))
        c["transferred"] += int(_sum(st.transferred, window))
        c["acked"] += int(_sum(st.acked, window))
        c["failed"] += int(_sum(st.failed, window))
        c["executed"] += int(_sum(st.executed, window))
        c["capacity"] = max(c["capacity"], st.capacity)
        c["queue_depth"] += st.queue_depth
        c["pending"] += st.pending
        c["errors"] += int(st.extra.get("errors", 0))
        c["busy_secs"] = max(c["busy_secs"], st.busy_secs)
        for k, v in st.extra.items():
            if k == "errors":
                continue
            if _is_level(k):
                # averages, maxima, durations and flags do not add up across executors
                c["extra"][k] = max(c["extra"].get(k, v), v)
            else:
                c["extra"][k] = c["extra"].get(k, 0) + v
        t, w = _weighted(st.complete_ms_avg, st.acked, window)
        a["cl"] += t
        a["cw"] += w
        t, w = _weighted(st.execute_ms_avg, st.executed, window)
        a["el"] += t
        a["ew"] += w
        t, w = _weighted(st.process_ms_avg, st.acked, window)
        a["pl"] += t
        a["pw"] += w
    for comp, c in out.items():
        a = acc[comp]
        c["complete_latency_ms"] = round(a["cl"] / a["cw"], 3) if a["cw"] else 0.0
        c["execute_latency_ms"] = round(a["el"] / a["ew"], 3) if a["ew"] else 0.0
        c["process_latency_ms"] = round(a["pl"] / a["pw"], 3) if a["pw"] else 0.0
    return dict(sorted(out.items()))


def stream_summary(stats: Iterable[ExecutorStats], component: str, window: str = ":all-time") -> dict[str, dict[str, int]]:
    """stream → {emitted, transferred} for one component's output streams."""
    out: dict[str, dict[str, int]] = {}
    for st in stats:
        if st.component != component:
            continue
        for metric in ("emitted", "transferred"):
            for stream, n in getattr(st, metric).get(window, {}).items():
                out.setdefault(stream, {"emitted": 0, "transferred": 0})[metric] += n
    return out


def format_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
    """A fixed-width table of :func:`component_summary` for terminals."""
    cols = [
        ("component", 18), ("kind", 5), ("exec", 4), ("emitted", 10), ("transferred", 11), ("acked", 10),
        ("failed", 8), ("complete_ms", 11), ("execute_ms", 10), ("capacity", 8),
    ]
    lines = ["  ".join(name.ljust(w) if i == 0 else name.rjust(w) for i, (name, w) in enumerate(cols))]
    for comp, c in summary.items():
        row = [
            comp[:18].ljust(18), c["kind"][:5].rjust(5), str(c["executors"]).rjust(4), str(c["emitted"]).rjust(10),
            str(c["transferred"]).rjust(11), str(c["acked"]).rjust(10), str(c["failed"]).rjust(8),
            f"{c['complete_latency_ms']:.3f}".rjust(11), f"{c['execute_latency_ms']:.3f}".rjust(10),
            f"{c['capacity']:.3f}".rjust(8),
        ]
        lines.append("  ".join(row))
    return "\n".join(lines)
