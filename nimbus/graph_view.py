"""The topology page's graph and its state at a glance, from a topology snapshot (no I/O).

``GET /api/v1/topology/<id>/visualization`` (Storm UI's route) answers :func:`visualization`:
every component with what it is (spout, bolt, stateful, windowed, shell, Spark, the checkpoint
spout), where the drawing puts it (:mod:`gale.nimbus.graph_layout`), its figures for the window
(capacity, failed, errors) and whether it backpressures; every subscription as an edge with the
cumulative counts the page turns into live rates (tuples/s between two polls, as the live chart
does); and the labelled gauges the workers report per component (:func:`component_details`): a
Kafka spout's lag per partition and a keyed state's ten biggest key groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gale.records import ExecutorStats
from gale.stats_summary import component_summary
from gale.topology.state import CHECKPOINT_COMPONENT

from gale.nimbus.graph_layout import NODE_H, NODE_W, layout

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.storm_api.build import TopologySnapshot

#: labelled gauges whose per-component value is the sum over executors (each label — a partition,
#: a key group — belongs to one task); the page draws them
KAFKA_LAG = "kafka_lag"
KEYGROUP_KEYS = "state_keygroup_keys"
KEYGROUP_BYTES = "state_keygroup_bytes"
TOP_KEY_GROUPS = 10


def is_system_stream(stream: str) -> bool:
    """Streams Gale sends itself (``$checkpoint``, ``__tick``...), not the topology's data."""
    return stream.startswith(("$", "__"))


def component_kind(snap: TopologySnapshot, component: str) -> dict[str, Any]:
    """What a component is, for the drawing: ``kind`` (spout/bolt), ``label`` and the flags."""
    if component == CHECKPOINT_COMPONENT:
        return {"kind": "spout", "label": "checkpoint spout", "body": "checkpoint", "stateful": False,
                "windowed": False, "checkpoint": True}
    comp = snap.defn.components.get(component)
    if comp is None:  # the acker (sys=1)
        return {"kind": "bolt", "label": "acker", "body": "system", "stateful": False, "windowed": False,
                "checkpoint": False}
    body = "spark" if comp.spark else (comp.body or ("window" if comp.windowed else "python"))
    windowed = body == "window"
    if comp.kind == "spout":
        label = "spout" if body == "python" else f"{body} spout"
    elif body == "spark":
        label = "Spark stage"
    elif body == "shell":
        label = "shell bolt"
    elif windowed:
        label = "stateful windowed bolt" if comp.stateful else "windowed bolt"
    else:
        label = "stateful bolt" if comp.stateful else "bolt"
    return {"kind": comp.kind, "label": label, "body": body, "stateful": comp.stateful, "windowed": windowed,
            "checkpoint": False}


def merge_details(stats: Iterable[ExecutorStats]) -> dict[str, dict[str, float]]:
    """Executors' labelled gauges summed per name and label."""
    out: dict[str, dict[str, float]] = {}
    for st in stats:
        for name, values in st.details.items():
            merged = out.setdefault(name, {})
            for label, v in values.items():
                merged[label] = merged.get(label, 0.0) + v
    return out


def component_details(stats: Iterable[ExecutorStats]) -> dict[str, Any]:
    """``kafkaLag``: ``[{partition: "topic/p", lag}]`` by partition; ``keyGroups``: the
    ``TOP_KEY_GROUPS`` key groups with the most bytes, ``[{keyGroup, keys, bytes}]``."""
    details = merge_details(stats)
    out: dict[str, Any] = {}
    lag = details.get(KAFKA_LAG)
    if lag:
        out["kafkaLag"] = [{"partition": p, "lag": int(v)} for p, v in sorted(lag.items(), key=_partition_order)]
    sizes, keys = details.get(KEYGROUP_BYTES, {}), details.get(KEYGROUP_KEYS, {})
    if sizes or keys:
        groups = sorted(set(sizes) | set(keys), key=lambda g: (-sizes.get(g, 0), -keys.get(g, 0), _int(g)))
        out["keyGroups"] = [{"keyGroup": _int(g), "keys": int(keys.get(g, 0)), "bytes": int(sizes.get(g, 0))}
                            for g in groups[:TOP_KEY_GROUPS]]
        out["keyGroupsReported"] = len(groups)
    return out


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def _partition_order(item: tuple[str, float]) -> tuple[str, int]:
    topic, _, p = item[0].rpartition("/")
    return topic, _int(p)


def backpressure(stats: Iterable[ExecutorStats], high_water: int) -> bool:
    """Whether an executor of the component holds more than the receive buffer
    (``topology.executor.receive.buffer.size``) in its queue: the worker pauses its spouts."""
    return any(st.queue_depth > high_water for st in stats)


def visualization(snap: TopologySnapshot, window: str, sys: bool = False) -> dict[str, Any]:
    """``GET /api/v1/topology/<id>/visualization``: nodes, edges and the drawing's size."""
    comps = snap.components(sys)
    high_water = int(snap.config.topology_executor_receive_buffer_size)
    edges = []
    for comp in comps:
        definition = snap.defn.components.get(comp)
        for inp in (definition.inputs if definition is not None else []):
            system = is_system_stream(inp.stream)
            # the checkpoint stream passes through every bolt of a stateful topology: drawn from
            # the checkpoint spout only (every hop with sys=1), and never shapes the layout
            if inp.component in comps and (sys or not system or inp.component == CHECKPOINT_COMPONENT):
                edges.append((inp.component, comp, inp.stream, inp.grouping.type))
    drawing = layout(comps, [(a, b) for a, b, s, _g in edges if not is_system_stream(s)])
    all_time = {c: snap.component_stats(c, sys) for c in comps}
    nodes = []
    for comp in comps:
        stats = all_time[comp]
        s = component_summary(stats, window).get(comp, {})
        total = component_summary(stats, ":all-time").get(comp, {})
        placed = drawing.nodes[comp]
        errors = snap.errors.get(comp) or []
        nodes.append({
            "id": comp, **component_kind(snap, comp),
            "x": placed.x, "y": placed.y, "layer": placed.layer,
            "executors": len(snap.layout.component_executors[comp]), "tasks": len(snap.layout.component_tasks(comp)),
            "running": len(stats),
            "capacity": float(s.get("capacity", 0.0)), "failed": int(s.get("failed", 0)),
            "acked": int(s.get("acked", 0)), "emitted": int(s.get("emitted", 0)),
            "executeLatency": float(s.get("execute_latency_ms", 0.0)),
            "completeLatency": float(s.get("complete_latency_ms", 0.0)),
            "errors": int(s.get("errors", 0)), "lastError": errors[0].error.strip().splitlines()[-1] if errors else "",
            "queueDepth": int(s.get("queue_depth", 0)), "backpressure": backpressure(stats, high_water),
            "totals": {"emitted": int(total.get("emitted", 0)), "executed": int(total.get("executed", 0)),
                       "acked": int(total.get("acked", 0)), "failed": int(total.get("failed", 0))},
            "details": component_details(stats),
        })
    edge_rows = []
    for source, target, stream, grouping in edges:
        emitted = sum(st.emitted.get(":all-time", {}).get(stream, 0) for st in all_time[source])
        executed = sum(st.executed.get(":all-time", {}).get(f"{source}:{stream}", 0) for st in all_time[target])
        edge_rows.append({"source": source, "target": target, "stream": stream, "grouping": grouping,
                          "emitted": int(emitted), "executed": int(executed), "system": is_system_stream(stream),
                          "back": (source, target) in drawing.back_edges})
    return {"id": snap.id, "name": snap.base.name, "window": window, "highWater": high_water,
            "width": drawing.width, "height": drawing.height, "nodeWidth": NODE_W, "nodeHeight": NODE_H,
            "layers": drawing.layers, "nodes": nodes, "edges": edge_rows}

