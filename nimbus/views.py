"""Read models for the CLI, the HTTP API and the UI, built from cluster state (no writes).

Ages and staleness are judged by nimbus's clock (``nimbus.clock``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gale.config_keys import SECRET_KEYS
from gale.records import ExecutorStats, executor_key
from gale.stats_summary import component_summary, stream_summary
from gale.topology.definition import ACKER_COMPONENT, TopologyTasks

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.daemon import Nimbus


#: the error list a worker reports its own setup failures to (not a component's)
WORKER_ERRORS = "__worker"


def _uptime(launch: int, now: float) -> int:
    return max(0, int(now - launch))


def cluster_summary(nimbus: Nimbus) -> dict[str, Any]:
    state = nimbus.state
    supervisors = state.supervisor_infos()
    assignments = state.assignments()
    used: dict[str, set[int]] = {}
    for a in assignments.values():
        for node, port in a.executors().values():
            used.setdefault(node, set()).add(port)
    sups = []
    for sid, info in sorted(supervisors.items()):
        ports = sorted(info.meta)
        busy = sorted(used.get(sid, set()) & set(ports))
        sups.append({
            "id": sid, "host": info.hostname, "uptime_secs": info.uptime_secs, "slots": len(ports),
            "used_slots": len(busy), "free_slots": len(ports) - len(busy), "ports": ports, "used_ports": busy,
            "version": info.gale_version, "metrics_port": info.server_port, "last_heartbeat_secs": info.time_secs,
            "logviewer": f"{info.logviewer_host or info.hostname}:{info.logviewer_port}" if info.logviewer_port else None,
        })
    nimbuses = [
        {"address": addr, "host": s.host, "port": s.port, "leader": s.is_leader, "uptime_secs": s.uptime_secs,
         "version": s.gale_version, "epoch": s.leader_epoch}
        for addr, s in sorted(state.nimbus_summaries().items())
    ]
    return {
        "nimbuses": nimbuses,
        "leader": nimbus.leader.current_leader() if nimbus.leader else None,
        "supervisors": sups,
        "slots_total": sum(s["slots"] for s in sups),
        "slots_used": sum(s["used_slots"] for s in sups),
        "slots_free": sum(s["free_slots"] for s in sups),
        "topologies": topology_list(nimbus),
    }


def topology_list(nimbus: Nimbus) -> list[dict[str, Any]]:
    state = nimbus.state
    assignments = state.assignments()
    out = []
    for tid, base in sorted(state.storm_bases().items()):
        a = assignments.get(tid)
        placements = a.executors() if a else {}
        out.append({
            "id": tid, "name": base.name, "status": base.status.value, "uptime_secs": _uptime(base.launch_time_secs, nimbus.clock.time()),
            "workers": len(set(placements.values())), "requested_workers": base.num_workers,
            "executors": len(placements), "tasks": sum(e - s + 1 for s, e in placements),
            "launch_time_secs": base.launch_time_secs, "owner": base.owner,
        })
    return out


def executor_stats(nimbus: Nimbus, topology_id: str) -> dict[str, tuple[ExecutorStats, str, int, dict[str, Any]]]:
    """executor key → (stats, node, port, worker info) from the workerbeats the assignment trusts."""
    state = nimbus.state
    a = state.assignment(topology_id)
    if a is None:
        return {}
    placements = {executor_key(ex): slot for ex, slot in a.executors().items()}
    out = {}
    stale_after = float(nimbus.config.nimbus_task_timeout_secs)
    now = nimbus.clock.time()
    for (node, port), hb in state.worker_heartbeats(topology_id).items():
        if now - hb.time_secs > stale_after:
            continue  # a dead worker's last beat: its executors are not running
        worker = {"host": hb.host or a.node_host.get(node, node), "port": port, "pid": hb.pid,
                  "worker_id": hb.worker_id, "uptime_secs": hb.uptime_secs, "log": hb.log_path,
                  "heartbeat_secs": hb.time_secs, "metrics_port": hb.metrics_port}
        for key, st in hb.executor_stats.items():
            # only what the assignment places on this slot (defeats zombies with stale stats)
            if placements.get(key) == (node, port):
                out[key] = (st, node, port, worker)
    return out


def topology_detail(nimbus: Nimbus, topology_id: str, window: str = ":all-time") -> dict[str, Any]:
    state = nimbus.state
    base = state.storm_base(topology_id)
    if base is None:
        from gale.errors import NotFoundError

        raise NotFoundError(f"no topology {topology_id!r}")
    a = state.assignment(topology_id)
    defn, config = nimbus.definition(topology_id)
    conf = config.to_dict()
    layout = TopologyTasks.of(defn, conf, base)
    stats = executor_stats(nimbus, topology_id)
    summary = component_summary([s for s, *_ in stats.values()], window)
    placements = a.executors() if a else {}
    components = {}
    for comp in sorted(layout.component_executors):
        execs = []
        for ex in layout.component_executors[comp]:
            key = executor_key(ex)
            slot = placements.get(ex)
            st = stats.get(key)
            host = a.node_host.get(slot[0], slot[0]) if (a and slot) else None
            execs.append({
                "id": key, "tasks": list(range(ex[0], ex[1] + 1)), "node": slot[0] if slot else None,
                "host": host, "port": slot[1] if slot else None, "running": st is not None,
                "stats": _executor_view(st[0], window) if st else None,
                "worker": st[3] if st else None,
            })
        kind = "acker" if comp == ACKER_COMPONENT else defn.components[comp].kind
        comp_summary = summary.get(comp, {})
        components[comp] = {
            "kind": kind,
            "executors": len(layout.component_executors[comp]),
            "tasks": len(layout.component_tasks(comp)),
            "running_executors": sum(1 for e in execs if e["running"]),
            "stats": comp_summary,
            "streams": stream_summary([s for s, *_ in stats.values()], comp, window),
            "executor_list": execs,
            "errors": [e.model_dump() for e in state.errors(topology_id, comp)] if comp != ACKER_COMPONENT else [],
            "spark": bool(defn.components[comp].spark) if comp in defn.components else False,
        }
    workers = {}
    for key, (st, node, port, worker) in stats.items():
        workers.setdefault(f"{node}:{port}", {**worker, "node": node, "executors": []})["executors"].append(key)
    return {
        "id": topology_id, "name": base.name, "status": base.status.value,
        "uptime_secs": _uptime(base.launch_time_secs, nimbus.clock.time()), "launch_time_secs": base.launch_time_secs,
        "requested_workers": base.num_workers, "workers": len(set(placements.values())),
        "executors": len(placements), "executors_running": len(stats), "tasks": len(layout.task_to_component),
        "message_timeout_secs": config.topology_message_timeout_secs,
        "pending_action": base.topology_action_options.model_dump() if base.topology_action_options else None,
        "components": components, "worker_list": sorted(workers.values(), key=lambda w: (w["node"], w["port"])),
        # why a worker could not start (e.g. its slot port taken), reported by the worker itself
        "worker_errors": [e.model_dump() for e in state.errors(topology_id, WORKER_ERRORS)],
        "window": window,
        "conf": {k: v for k, v in conf.items() if k.startswith("topology.") and k not in SECRET_KEYS},
    }


def _executor_view(st: ExecutorStats, window: str) -> dict[str, Any]:
    return component_summary([st], window)[st.component]


def component_detail(nimbus: Nimbus, topology_id: str, component: str, window: str = ":all-time") -> Mapping[str, Any]:
    detail = topology_detail(nimbus, topology_id, window)
    comp = detail["components"].get(component)
    if comp is None:
        from gale.errors import NotFoundError

        raise NotFoundError(f"topology {topology_id} has no component {component!r}")
    return {"topology": topology_id, "name": detail["name"], "component": component, **comp}
