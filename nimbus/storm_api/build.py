"""Storm UI's REST shapes built from Gale's cluster state: one read (:func:`gather`), pure builders.

:func:`gather` reads everything one response needs from ZooKeeper once (the topology's base,
assignment, definition, the executor stats of fresh workerbeats, errors); the ``*_view`` functions
turn that :class:`TopologySnapshot` into Storm's field names and meanings
(``docs/storm-model.md`` §8, from Storm's ``docs/STORM-UI-REST-API.md``):

* emitted — tuples emitted; transferred — emitted tuples sent to at least one bolt;
* acked / failed — for spouts tuple *trees* (completed / failed or timed out), for bolts tuples;
* completeLatency — spouts: mean ms from emit to the tree's completion (0 without acking);
* executeLatency — bolts: mean ms in ``execute()`` (sampled, ``topology.stats.sample.rate``);
* processLatency — bolts: mean ms from receipt to ack (sampled);
* capacity — executed × mean execute latency / the last 10 minutes (or the uptime, when shorter);
  about 1.0 means the bolt is saturated;
* windows ``600``, ``10800``, ``86400`` and ``:all-time``; latencies and capacity are strings with
  three decimals, as Storm returns them.

System components (``__acker``) and system streams (``__tick`` ...) are left out unless ``sys``.
Resource fields (memory, CPU) are present for compatibility and are 0: Gale schedules by slots.
Gale adds a few fields of its own (``workerLogPath``, ``pid``, ``supervisorId`` ...), camelCase too.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gale.config_keys import SECRET_KEYS, Config
from gale.errors import NotFoundError
from gale.records import GALE_VERSION, Assignment, ErrorInfo, ExecutorStats, StormBase, executor_key
from gale.stats_summary import WINDOWS, component_summary
from gale.topology.definition import ACKER_COMPONENT, TopologyDef, TopologyTasks
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.nimbus.storm_api.links import error_log_link, log_viewer_link, worker_log_file

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.daemon import Nimbus



# ----------------------------------------------------------------------------- formatting


def pretty_secs(secs: float) -> str:
    """Storm's ``prettyUptimeSec``: ``"5m 58s"``, ``"3h 0m 0s"``, ``"1d 0h 0m 0s"``."""
    secs = max(0, int(secs))
    parts = [(secs // 86400, "d"), (secs % 86400 // 3600, "h"), (secs % 3600 // 60, "m"), (secs % 60, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{n}{unit}" for n, unit in parts)


def window_hint(window: str) -> str:
    return "All time" if window == ":all-time" else pretty_secs(int(window))


def f3(value: float) -> str:
    """Latencies and capacity, as Storm returns them: a string with three decimals."""
    return f"{float(value):.3f}"


def executor_label(key: str) -> str:
    """Gale's ``"1-4"`` → Storm's ``"[1-4]"``."""
    return f"[{key}]"


def encoded(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def is_system(name: str) -> bool:
    return name.startswith("__")


# ----------------------------------------------------------------------------- reading


@dataclass
class TopologySnapshot:
    """Everything about one topology that a Storm-shaped response needs, read once."""

    id: str
    base: StormBase
    assignment: Assignment | None
    defn: TopologyDef
    config: Config  # the effective configuration: nimbus's, then the topology's
    layout: TopologyTasks
    #: executor key → (stats, node, port, worker info) from fresh workerbeats (see gale.nimbus.views)
    stats: dict[str, tuple[ExecutorStats, str, int, dict[str, Any]]]
    errors: dict[str, list[ErrorInfo]] = field(default_factory=dict)
    replication: int = 1
    now: float = field(default_factory=time.time)

    @property
    def placements(self) -> dict[tuple[int, int], tuple[str, int]]:
        return self.assignment.executors() if self.assignment else {}

    def kind(self, component: str) -> str:
        if component == ACKER_COMPONENT:
            return "bolt"
        return self.defn.components[component].kind

    def components(self, sys: bool) -> list[str]:
        return sorted(c for c in self.layout.component_executors if sys or not is_system(c))

    def component_stats(self, component: str, sys: bool = True) -> list[ExecutorStats]:
        """The component's live executors' stats (without system streams unless ``sys``)."""
        out = [st for st, *_ in self.stats.values() if st.component == component]
        return out if sys else [strip_system(st) for st in out]


def gather(nimbus: Nimbus, name_or_id: str, *, components: Iterable[str] | None = None) -> TopologySnapshot:
    """Read one topology (by id or name). Errors are read for ``components`` (default: all)."""
    from gale.nimbus import views

    state = nimbus.state
    tid = nimbus.topology_id(name_or_id)
    base = state.storm_base(tid)
    if base is None:
        raise NotFoundError(f"no topology {name_or_id!r} (it was removed); list them with GET /api/v1/topology/summary")
    defn, config = nimbus.definition(tid)
    layout = TopologyTasks.of(defn, config.to_dict(), base)
    wanted = sorted(layout.component_executors) if components is None else list(components)
    errors = {c: state.errors(tid, c) for c in wanted if c != ACKER_COMPONENT}
    try:
        replication = max(1, len(state.blob_holders(tid)))
    except Exception:  # noqa: BLE001 - a count for display only
        replication = 1
    return TopologySnapshot(
        id=tid, base=base, assignment=state.assignment(tid), defn=defn, config=config, layout=layout,
        stats=views.executor_stats(nimbus, tid), errors=errors, replication=replication,
    )


# ----------------------------------------------------------------------------- aggregation


def per_stream(stats: Iterable[ExecutorStats], window: str, sys: bool) -> dict[str, dict[str, dict[str, float]]]:
    """metric → stream key → value over executors: counts summed, ``*_ms_avg`` weighted by their counts.

    Spout keys are output streams; bolt ``acked``/``failed``/``executed`` and latencies are keyed
    by input ``component:stream``.
    """
    counts = ("emitted", "transferred", "acked", "failed", "executed")
    weights = {"complete_ms_avg": "acked", "process_ms_avg": "acked", "execute_ms_avg": "executed"}
    out: dict[str, dict[str, float]] = {m: {} for m in (*counts, *weights)}
    wsum: dict[str, dict[str, float]] = {m: {} for m in weights}
    for st in stats:
        for metric in counts:
            for key, n in getattr(st, metric).get(window, {}).items():
                if sys or not _system_key(key):
                    out[metric][key] = out[metric].get(key, 0) + n
        for metric, weight in weights.items():
            w = getattr(st, weight).get(window, {})
            for key, avg in getattr(st, metric).get(window, {}).items():
                if not (sys or not _system_key(key)):
                    continue
                n = w.get(key, 0)
                out[metric][key] = out[metric].get(key, 0.0) + avg * n
                wsum[metric][key] = wsum[metric].get(key, 0) + n
    for metric in weights:
        for key, total in list(out[metric].items()):
            n = wsum[metric].get(key, 0)
            out[metric][key] = total / n if n else 0.0
    return out


def _system_key(key: str) -> bool:
    return any(is_system(part) for part in key.split(":"))


_STREAM_MAPS = ("emitted", "transferred", "acked", "failed", "complete_ms_avg", "executed", "process_ms_avg",
                "execute_ms_avg")


def strip_system(st: ExecutorStats) -> ExecutorStats:
    """A copy without system streams (``__tick``, ``__system:__tick`` ...), as Storm's UI without ``sys``."""
    def keep(m: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        return {w: {k: v for k, v in d.items() if not _system_key(k)} for w, d in m.items()}

    return st.model_copy(update={name: keep(getattr(st, name)) for name in _STREAM_MAPS})


def split_input(key: str, inputs: Mapping[str, tuple[str, str]]) -> tuple[str, str]:
    """A bolt's input key ``component:stream`` → (component, stream)."""
    if key in inputs:
        return inputs[key]
    component, _, stream = key.rpartition(":")
    return (component, stream) if component else (key, "default")


def input_keys(defn: TopologyDef, component: str) -> dict[str, tuple[str, str]]:
    comp = defn.components.get(component)
    if comp is None:
        return {}
    return {f"{i.component}:{i.stream}": (i.component, i.stream) for i in comp.inputs}


def topology_totals(snap: TopologySnapshot, window: str, sys: bool = False) -> dict[str, Any]:
    """Storm's topologyStats entry: emitted/transferred of every component, acked/failed/latency of spouts."""
    comps = snap.components(sys)
    summary = component_summary([st for c in comps for st in snap.component_stats(c, sys)], window)
    emitted = sum(c["emitted"] for c in summary.values())
    transferred = sum(c["transferred"] for c in summary.values())
    spouts = [c for c in summary.values() if c["kind"] == "spout"]
    acked = sum(c["acked"] for c in spouts)
    failed = sum(c["failed"] for c in spouts)
    latency = sum(c["complete_latency_ms"] * c["acked"] for c in spouts) / acked if acked else 0.0
    return {"window": window, "windowPretty": window_hint(window), "emitted": emitted, "transferred": transferred,
            "acked": acked, "failed": failed, "completeLatency": f3(latency)}


def _error_fields(snap: TopologySnapshot, component: str) -> dict[str, Any]:
    errs = snap.errors.get(component) or []
    if not errs:
        return {"lastError": "", "errorHost": "", "errorPort": None, "errorTime": None, "errorLapsedSecs": None,
                "errorWorkerLogLink": "", "errorLogViewerLink": ""}
    e = errs[0]
    return {"lastError": e.error, "errorHost": e.host, "errorPort": e.port, "errorTime": e.error_time_secs,
            "errorLapsedSecs": max(0, int(snap.now - e.error_time_secs)),
            "errorWorkerLogLink": _log_for(snap, e.host, e.port), "errorLogViewerLink": error_log_link(snap, e)}


def _log_for(snap: TopologySnapshot, host: str, port: int) -> str:
    for _st, _node, p, worker in snap.stats.values():
        if p == port and worker.get("host") == host and worker.get("log"):
            return worker["log"]
    return ""


def component_row(snap: TopologySnapshot, component: str, window: str, sys: bool = False) -> dict[str, Any]:
    """A ``spouts[]`` or ``bolts[]`` entry of the topology page."""
    s = component_summary(snap.component_stats(component, sys), window).get(component, {})
    common = {
        "executors": len(snap.layout.component_executors[component]),
        "tasks": len(snap.layout.component_tasks(component)),
        "emitted": s.get("emitted", 0), "transferred": s.get("transferred", 0),
        "acked": s.get("acked", 0), "failed": s.get("failed", 0),
        "requestedMemOnHeap": 0.0, "requestedMemOffHeap": 0.0, "requestedCpu": 0.0,
        **_error_fields(snap, component),
    }
    if snap.kind(component) == "spout":
        return {"spoutId": component, "encodedSpoutId": encoded(component), **common,
                "completeLatency": f3(s.get("complete_latency_ms", 0.0))}
    return {"boltId": component, "encodedBoltId": encoded(component), **common, "executed": s.get("executed", 0),
            "executeLatency": f3(s.get("execute_latency_ms", 0.0)),
            "processLatency": f3(s.get("process_latency_ms", 0.0)), "capacity": f3(s.get("capacity", 0.0))}


# ----------------------------------------------------------------------------- workers


def worker_slots(snap: TopologySnapshot) -> list[dict[str, Any]]:
    """One entry per assigned slot: where, which executors, and the live worker's details if it beats."""
    slots: dict[tuple[str, int], dict[str, Any]] = {}
    for ex, (node, port) in sorted(snap.placements.items()):
        entry = slots.setdefault((node, port), {"node": node, "port": port, "executors": [], "components": {}})
        key = executor_key(ex)
        entry["executors"].append(key)
        comp = snap.layout.executor_to_component.get(ex, "?")
        entry["components"][comp] = entry["components"].get(comp, 0) + (ex[1] - ex[0] + 1)
    live: dict[tuple[str, int], dict[str, Any]] = {}
    for _st, node, port, worker in snap.stats.values():
        live[(node, port)] = worker
    host_of = snap.assignment.node_host if snap.assignment else {}
    out = []
    for (node, port), entry in sorted(slots.items()):
        worker = live.get((node, port))
        entry["host"] = (worker or {}).get("host") or host_of.get(node, node)
        entry["worker"] = worker
        out.append(entry)
    return out


def _worker_stats(snap: TopologySnapshot, executors: list[str], window: str, sys: bool) -> dict[str, Any]:
    stats = [st if sys else strip_system(st) for st in (snap.stats[k][0] for k in executors if k in snap.stats)
             if sys or not is_system(st.component)]
    summary = component_summary(stats, window)
    totals = {m: sum(c[m] for c in summary.values()) for m in ("emitted", "transferred", "executed")}
    spouts = [c for c in summary.values() if c["kind"] == "spout"]
    bolts = [c for c in summary.values() if c["kind"] == "bolt"]
    acked = sum(c["acked"] for c in spouts)
    return {
        **totals,
        "acked": acked, "failed": sum(c["failed"] for c in spouts),
        "boltAcked": sum(c["acked"] for c in bolts), "boltFailed": sum(c["failed"] for c in bolts),
        "completeLatency": f3(sum(c["complete_latency_ms"] * c["acked"] for c in spouts) / acked if acked else 0.0),
        "capacity": f3(max((c["capacity"] for c in bolts), default=0.0)),
        "queueDepth": sum(c["queue_depth"] for c in summary.values()),
        "pending": sum(c["pending"] for c in spouts),
        "errors": sum(c["errors"] for c in summary.values()),
    }


def worker_view(snap: TopologySnapshot, slot: Mapping[str, Any], window: str | None = None, sys: bool = False) -> dict[str, Any]:
    """Storm's ``workers[]`` entry (plus Gale's fields; ``stats`` for the window when given)."""
    worker = slot["worker"] or {}
    uptime = int(worker.get("uptime_secs", 0)) if worker else 0
    out = {
        "supervisorId": slot["node"], "host": slot["host"], "port": slot["port"],
        "topologyId": snap.id, "topologyName": snap.base.name,
        "executorsTotal": len(slot["executors"]), "componentNumTasks": dict(sorted(slot["components"].items())),
        "uptime": pretty_secs(uptime), "uptimeSeconds": uptime,
        "workerLogLink": worker.get("log", ""), "workerLogPath": worker.get("log", ""),
        "logViewerLink": log_viewer_link(snap.id, slot["node"], slot["port"]),
        "logFile": worker_log_file(snap.id, slot["port"]),
        "assignedMemOnHeap": 0.0, "assignedMemOffHeap": 0.0, "assignedCpu": 0.0,
        "running": bool(worker), "pid": worker.get("pid"), "workerId": worker.get("worker_id"),
        "metricsPort": worker.get("metrics_port"),
        "heartbeatAgeSecs": max(0, int(snap.now - worker["heartbeat_secs"])) if worker.get("heartbeat_secs") else None,
    }
    if window is not None:
        out["stats"] = _worker_stats(snap, slot["executors"], window, sys)
    return out


def gale_workers(snap: TopologySnapshot, window: str) -> list[dict[str, Any]]:
    """Gale's per-worker view (``GET /api/v1/topologies/{name}/workers``), snake_case."""
    out = []
    for slot in worker_slots(snap):
        w = slot["worker"] or {}
        s = _worker_stats(snap, slot["executors"], window, sys=True)
        out.append({
            "node": slot["node"], "host": slot["host"], "port": slot["port"], "running": bool(w),
            "pid": w.get("pid"), "worker_id": w.get("worker_id"), "uptime_secs": w.get("uptime_secs"),
            "log": w.get("log", ""), "metrics_port": w.get("metrics_port"), "heartbeat_secs": w.get("heartbeat_secs"),
            "executors": slot["executors"], "components": slot["components"], "window": window,
            "stats": {
                "emitted": s["emitted"], "transferred": s["transferred"], "executed": s["executed"],
                "spout_acked": s["acked"], "spout_failed": s["failed"], "bolt_acked": s["boltAcked"],
                "bolt_failed": s["boltFailed"], "complete_latency_ms": float(s["completeLatency"]),
                "capacity": float(s["capacity"]), "queue_depth": s["queueDepth"], "pending": s["pending"],
                "errors": s["errors"],
            },
        })
    return out


# ----------------------------------------------------------------------------- pages


def topology_view(snap: TopologySnapshot, window: str, sys: bool = False) -> dict[str, Any]:
    """``GET /api/v1/topology/<id>``."""
    placements = snap.placements
    comps = snap.components(sys)
    return {
        "id": snap.id, "encodedId": encoded(snap.id), "name": snap.base.name, "owner": snap.base.owner,
        "status": snap.base.status.value, "uptime": pretty_secs(snap.now - snap.base.launch_time_secs),
        "uptimeSeconds": max(0, int(snap.now - snap.base.launch_time_secs)),
        "tasksTotal": len(snap.layout.task_to_component), "workersTotal": len(set(placements.values())),
        "executorsTotal": len(placements), "executorsRunning": len(snap.stats),
        "requestedWorkers": snap.base.num_workers,
        "msgTimeout": snap.config.topology_message_timeout_secs,
        "window": window, "windowHint": window_hint(window), "replicationCount": snap.replication,
        **debug_fields(snap, snap.id),
        "schedulerDisplayResource": False, "assignedMemOnHeap": 0.0, "assignedMemOffHeap": 0.0,
        "assignedTotalMem": 0.0, "assignedCpu": 0.0, "requestedMemOnHeap": 0.0, "requestedMemOffHeap": 0.0,
        "requestedTotalMem": 0.0, "requestedCpu": 0.0,
        "pendingAction": snap.base.topology_action_options.model_dump() if snap.base.topology_action_options else None,
        "topologyStats": [topology_totals(snap, w, sys) for w in WINDOWS],
        "spouts": [component_row(snap, c, window, sys) for c in comps if snap.kind(c) == "spout"],
        "bolts": [component_row(snap, c, window, sys) for c in comps if snap.kind(c) == "bolt"],
        "workers": [worker_view(snap, s) for s in worker_slots(snap)],
        "configuration": {k: v for k, v in sorted(snap.config.to_dict().items())
                          if k.startswith("topology.") and k not in SECRET_KEYS},
        "checkpoints": topology_checkpoints(snap),
    }


def debug_fields(snap: TopologySnapshot, key: str) -> dict[str, Any]:
    """Storm's ``debug``/``samplingPct`` of the topology (``key``: its id) or a component (its own
    entry, else the topology's) from the StormBase's debug options."""
    debug = snap.base.component_debug
    options = debug.get(key) or debug.get(snap.id)
    enabled = bool(options and options.enable)
    return {"debug": enabled, "samplingPct": options.samplingpct if enabled else 0.0}


def topology_checkpoints(snap: TopologySnapshot) -> dict[str, Any] | None:
    """Gale's extension of the topology page: a stateful topology's checkpoints (docs/state.md)."""
    if CHECKPOINT_COMPONENT not in snap.defn.components:
        return None
    summaries = {c: component_summary(snap.component_stats(c, True), ":all-time").get(c, {})
                 for c in snap.defn.components}
    return checkpoint_view(summaries, snap.now)


def checkpoint_view(summaries: Mapping[str, Mapping[str, Any]], now: float) -> dict[str, Any]:
    """Checkpoint figures from the components' all-time summaries (their ``extra`` counters)."""
    cp = summaries.get(CHECKPOINT_COMPONENT, {}).get("extra", {})
    committed_at = cp.get("checkpoint_commit_time_secs")
    return {
        "txid": int(cp.get("checkpoint_txid_max", 0)),
        "committed": int(cp.get("checkpoints_committed", 0)),
        "failures": int(cp.get("checkpoint_failures", 0)),
        "lastDurationMs": f3(cp.get("checkpoint_duration_ms", 0.0)),
        "lastCommitTime": committed_at,
        "lastCommitAgeSecs": max(0, int(now - committed_at)) if committed_at else None,
        "stateBytesWritten": int(sum(s.get("extra", {}).get("state_bytes_written", 0) for s in summaries.values())),
        "rollbacks": int(cp.get("checkpoint_rollbacks", 0)),
        "generation": int(cp.get("checkpoint_generation", 0)),
    }


def topology_metrics_view(snap: TopologySnapshot, window: str, sys: bool = False) -> dict[str, Any]:
    """``GET /api/v1/topology/<id>/metrics``: per-stream values of every component."""
    spouts, bolts = [], []
    for comp in snap.components(sys):
        m = per_stream(snap.component_stats(comp, sys), window, sys)

        def out_rows(metric: str, fmt=lambda v: int(v)) -> list[dict[str, Any]]:
            return [{"stream_id": k, "value": fmt(v)} for k, v in sorted(m[metric].items())]

        if snap.kind(comp) == "spout":
            spouts.append({"id": comp, "emitted": out_rows("emitted"), "transferred": out_rows("transferred"),
                           "acked": out_rows("acked"), "failed": out_rows("failed"),
                           "complete_ms_avg": out_rows("complete_ms_avg", f3)})
        else:
            inputs = input_keys(snap.defn, comp)

            def in_rows(metric: str, fmt=lambda v: int(v)) -> list[dict[str, Any]]:
                rows = []
                for key, v in sorted(m[metric].items()):
                    c, s = split_input(key, inputs)
                    rows.append({"component_id": c, "stream_id": s, "value": fmt(v)})
                return rows

            bolts.append({"id": comp, "emitted": out_rows("emitted"), "transferred": out_rows("transferred"),
                          "acked": in_rows("acked"), "failed": in_rows("failed"),
                          "process_ms_avg": in_rows("process_ms_avg", f3), "executed": in_rows("executed"),
                          "executed_ms_avg": in_rows("execute_ms_avg", f3)})
    return {"window": window, "windowHint": window_hint(window), "spouts": spouts, "bolts": bolts}


def component_view(snap: TopologySnapshot, component: str, window: str, sys: bool = False) -> dict[str, Any]:
    """``GET /api/v1/topology/<id>/component/<component>``."""
    if component not in snap.layout.component_executors:
        raise NotFoundError(f"topology {snap.id} has no component {component!r}; its components: "
                            f"{', '.join(snap.components(sys=True))}")
    kind = snap.kind(component)
    stats = snap.component_stats(component, sys)
    out: dict[str, Any] = {
        "id": component, "encodedId": encoded(component), "name": snap.base.name, "user": snap.base.owner,
        "topologyId": snap.id, "encodedTopologyId": encoded(snap.id), "topologyStatus": snap.base.status.value,
        "componentType": kind, "executors": len(snap.layout.component_executors[component]),
        "tasks": len(snap.layout.component_tasks(component)), "window": window, "windowHint": window_hint(window),
        **debug_fields(snap, component), "eventLogLink": "", "profilingAndDebuggingCapable": True,
        "profileActionEnabled": True, "profilerActive": [], "schedulerDisplayResource": False,
        "requestedMemOnHeap": 0.0, "requestedMemOffHeap": 0.0, "requestedCpu": 0.0,
        "componentErrors": [
            {"errorTime": e.error_time_secs, "errorHost": e.host, "errorPort": e.port, "error": e.error,
             "errorLapsedSecs": max(0, int(snap.now - e.error_time_secs)),
             "errorWorkerLogLink": _log_for(snap, e.host, e.port), "errorLogViewerLink": error_log_link(snap, e)}
            for e in snap.errors.get(component, [])
        ],
    }
    summaries = {w: component_summary(stats, w).get(component, {}) for w in WINDOWS}
    if kind == "spout":
        out["spoutSummary"] = [
            {"window": w, "windowPretty": window_hint(w), "emitted": s.get("emitted", 0),
             "transferred": s.get("transferred", 0), "acked": s.get("acked", 0), "failed": s.get("failed", 0),
             "completeLatency": f3(s.get("complete_latency_ms", 0.0))}
            for w, s in summaries.items()
        ]
    else:
        out["boltStats"] = [
            {"window": w, "windowPretty": window_hint(w), "emitted": s.get("emitted", 0),
             "transferred": s.get("transferred", 0), "executed": s.get("executed", 0), "acked": s.get("acked", 0),
             "failed": s.get("failed", 0), "executeLatency": f3(s.get("execute_latency_ms", 0.0)),
             "processLatency": f3(s.get("process_latency_ms", 0.0)), "capacity": f3(s.get("capacity", 0.0))}
            for w, s in summaries.items()
        ]
    m = per_stream(stats, window, sys)
    outputs = sorted(set(m["emitted"]) | set(m["transferred"]) | (set(m["acked"]) if kind == "spout" else set()))
    out["outputStats"] = []
    for stream in outputs:
        row: dict[str, Any] = {"stream": stream, "emitted": int(m["emitted"].get(stream, 0)),
                               "transferred": int(m["transferred"].get(stream, 0))}
        if kind == "spout":
            row.update(acked=int(m["acked"].get(stream, 0)), failed=int(m["failed"].get(stream, 0)),
                       completeLatency=f3(m["complete_ms_avg"].get(stream, 0.0)))
        out["outputStats"].append(row)
    if kind == "bolt":
        inputs = input_keys(snap.defn, component)
        keys = sorted(set(m["executed"]) | set(m["acked"]) | set(m["failed"]))
        out["inputStats"] = []
        for key in keys:
            c, s = split_input(key, inputs)
            out["inputStats"].append({
                "component": c, "encodedComponentId": encoded(c), "stream": s,
                "executed": int(m["executed"].get(key, 0)), "acked": int(m["acked"].get(key, 0)),
                "failed": int(m["failed"].get(key, 0)), "executeLatency": f3(m["execute_ms_avg"].get(key, 0.0)),
                "processLatency": f3(m["process_ms_avg"].get(key, 0.0)),
            })
    out["executorStats"] = executor_rows(snap, component, window, sys)
    return out


def executor_rows(snap: TopologySnapshot, component: str, window: str, sys: bool = False) -> list[dict[str, Any]]:
    placements = snap.placements
    starts = snap.assignment.start_times() if snap.assignment else {}
    host_of = snap.assignment.node_host if snap.assignment else {}
    kind = snap.kind(component)
    rows = []
    for ex in snap.layout.component_executors[component]:
        key = executor_key(ex)
        node, port = placements.get(ex, (None, None))
        live = snap.stats.get(key)
        st, worker = (live[0] if sys else strip_system(live[0]), live[3]) if live else (None, {})
        s = component_summary([st], window).get(component, {}) if st else {}
        started = starts.get(ex)
        uptime = max(0, int(snap.now - started)) if (started and live) else 0
        row: dict[str, Any] = {
            "id": executor_label(key), "encodedId": encoded(executor_label(key)), "tasks": ex[1] - ex[0] + 1,
            "supervisorId": node, "host": worker.get("host") or (host_of.get(node, node) if node else None),
            "port": port, "uptime": pretty_secs(uptime), "uptimeSeconds": uptime, "running": live is not None,
            "emitted": s.get("emitted", 0), "transferred": s.get("transferred", 0), "acked": s.get("acked", 0),
            "failed": s.get("failed", 0), "queueDepth": s.get("queue_depth", 0),
            "workerLogLink": worker.get("log", ""), "workerLogPath": worker.get("log", ""),
            "logViewerLink": log_viewer_link(snap.id, node, port, f'"executor": "{key}"'),
            "pid": worker.get("pid"),
        }
        if kind == "spout":
            row.update(completeLatency=f3(s.get("complete_latency_ms", 0.0)), pending=s.get("pending", 0))
        else:
            row.update(executed=s.get("executed", 0), executeLatency=f3(s.get("execute_latency_ms", 0.0)),
                       processLatency=f3(s.get("process_latency_ms", 0.0)), capacity=f3(s.get("capacity", 0.0)))
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- cluster


def supervisor_rows(cluster: Mapping[str, Any], now: float) -> list[dict[str, Any]]:
    """``supervisors[]`` from :func:`gale.nimbus.views.cluster_summary`'s supervisors."""
    return [{
        "id": s["id"], "host": s["host"], "uptime": pretty_secs(s["uptime_secs"]), "uptimeSeconds": s["uptime_secs"],
        "slotsTotal": s["slots"], "slotsUsed": s["used_slots"], "slotsFree": s["free_slots"],
        "totalMem": 0.0, "totalCpu": 0.0, "usedMem": 0.0, "usedCpu": 0.0, "version": s["version"],
        "ports": s["ports"], "usedPorts": s["used_ports"], "metricsPort": s["metrics_port"],
        "heartbeatAgeSecs": max(0, int(now - s["last_heartbeat_secs"])),
    } for s in cluster["supervisors"]]


def cluster_view(cluster: Mapping[str, Any], nimbus_uptime: int) -> dict[str, Any]:
    """``GET /api/v1/cluster/summary``."""
    tops = cluster["topologies"]
    return {
        "stormVersion": GALE_VERSION, "galeVersion": GALE_VERSION,
        "nimbusUptime": pretty_secs(nimbus_uptime), "nimbusUptimeSeconds": nimbus_uptime,
        "supervisors": len(cluster["supervisors"]), "topologies": len(tops),
        "slotsTotal": cluster["slots_total"], "slotsUsed": cluster["slots_used"], "slotsFree": cluster["slots_free"],
        "executorsTotal": sum(t["executors"] for t in tops), "tasksTotal": sum(t["tasks"] for t in tops),
        "schedulerDisplayResource": False, "totalMem": 0.0, "totalCpu": 0.0, "availMem": 0.0, "availCpu": 0.0,
        "memAssignedPercentUtil": 0.0, "cpuAssignedPercentUtil": 0.0,
    }


def topology_summary_row(t: Mapping[str, Any], replication: int) -> dict[str, Any]:
    return {
        "id": t["id"], "encodedId": encoded(t["id"]), "name": t["name"], "owner": t["owner"], "status": t["status"],
        "uptime": pretty_secs(t["uptime_secs"]), "uptimeSeconds": t["uptime_secs"], "tasksTotal": t["tasks"],
        "workersTotal": t["workers"], "executorsTotal": t["executors"], "replicationCount": replication,
        "requestedWorkers": t["requested_workers"],
        "requestedMemOnHeap": 0.0, "requestedMemOffHeap": 0.0, "requestedTotalMem": 0.0, "requestedCpu": 0.0,
        "assignedMemOnHeap": 0.0, "assignedMemOffHeap": 0.0, "assignedTotalMem": 0.0, "assignedCpu": 0.0,
        "schedulerInfo": None,
    }


def nimbus_rows(cluster: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{
        "host": n["host"], "port": n["port"], "status": "Leader" if n["leader"] else "Not a Leader",
        "nimbusUpTime": pretty_secs(n["uptime_secs"]), "nimbusUpTimeSeconds": n["uptime_secs"],
        "nimbusLogLink": "", "version": n["version"],
    } for n in cluster["nimbuses"]]


def safe_conf(config: Config) -> dict[str, Any]:
    """A config without secrets (API token, ZooKeeper credentials, topology secrets)."""
    return {k: ("<hidden>" if k in SECRET_KEYS and v else v) for k, v in sorted(config.to_dict().items())}
