"""A Bytewax dataflow as a Gale topology (pure over the :class:`~gale.bytewax.plan.FlowPlan`).

Each core step is a component named by its step id, with the dataflow's worker count as its
parallelism: an ``input`` is a spout (its tasks own the source's partitions), every other core step
a bolt. Items travel in batches: one tuple carries a list of items, as a Bytewax batch does. Each
stream a step writes gets one Gale stream per step reading it (``<port>><consumer>``), with the
fields ``route`` and ``batch``; every subscription is a fields grouping on ``route``, and the
writing task chooses the receiving task itself (``gale.worker.bytewax.routing``):

* into a ``stateful_batch`` — by the items' keys (the task owning the key; with recovery, by the key
  groups of Gale's keyed state, so a key's state lives where its items go);
* into an ``output`` of a ``FixedPartitionedSink`` — by the partition the key maps to;
* into a ``redistribute`` — spread over all its tasks;
* anything else — a task in the same worker (Bytewax runs such steps where the items are).

The end of a bounded input travels on the same streams, as a batch of ``None`` from each task to each
receiving task.

With recovery (``topology.bytewax.recovery``; ``run_main``'s ``recovery_config``) the stateful steps and
the outputs of partitioned sinks are stateful bolts (their snapshots in Gale's managed state), the
sources' positions are part of every checkpoint, and the guarantee is exactly-once when every input
is a ``FixedPartitionedSource`` (which can rewind); with a ``DynamicSource`` it is
``topology.state.guarantee`` (at least once by default; exactly-once is refused, naming the input).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gale.bytewax.plan import FlowPlan, plan_flow
from gale.config_keys import Config
from gale.errors import ConfigError, TopologyError
from gale.topology.checkpointing import EXACTLY_ONCE, GUARANTEE, add_checkpointing
from gale.topology.composition import validate_composition
from gale.topology.definition import ComponentDef, GroupingDef, InputDef, StreamDef, Topology, TopologyDef, validate

WORKER = "gale.worker.bytewax.components"
FIELDS = ["route", "batch"]
#: how often a stateful step looks for due notifications (``notify_at``), seconds
NOTIFY_PERIOD = 0.05
RECOVERY = "topology.bytewax.recovery"
WORKERS = "topology.workers"


def route_kind(consumer: Any) -> str:
    """How a writer picks the receiving task of ``consumer`` (a :class:`CoreStep`)."""
    if consumer.kind == "stateful_batch":
        return "key"
    if consumer.kind == "output" and consumer.sink == "fixed":
        return "part"
    if consumer.kind == "redistribute":
        return "spread"
    return "local"


def stateful(step: Any, recovery: bool) -> bool:
    """Whether a core step keeps managed state: the stateful steps and the partitioned sinks, with recovery."""
    return recovery and (step.kind == "stateful_batch" or (step.kind == "output" and step.sink == "fixed"))


def class_path(step: Any, recovery: bool) -> str:
    if step.kind == "input":
        return f"{WORKER}:{'FixedInput' if step.source == 'fixed' else 'DynamicInput'}"
    if step.kind == "stateful_batch":
        return f"{WORKER}:{'ManagedStateful' if recovery else 'Stateful'}"
    if step.kind == "output" and step.sink == "fixed":
        return f"{WORKER}:{'ManagedPartitionedOutput' if recovery else 'PartitionedOutput'}"
    return f"{WORKER}:Step"


def edges_of(plan: FlowPlan, recovery: bool) -> dict[str, list[dict[str, Any]]]:
    """Per writing step: its edges — one Gale stream per (port, reading step, reading) — in order."""
    out: dict[str, list[dict[str, Any]]] = {s.step_id: [] for s in plan.steps}
    for step in plan.steps:
        for port, sid in step.outputs.items():
            for consumer in plan.consumers(sid):
                for k in range(consumer.inputs.count(sid)):
                    stream = f"{port}>{consumer.step_id}" + (f"#{k}" if k else "")
                    out[step.step_id].append({
                        "stream": stream, "port": port, "to": consumer.step_id, "route": route_kind(consumer),
                        "keygroups": stateful(consumer, recovery),
                    })
    return out


def build_definition(plan: FlowPlan, flow_ref: str, conf: Mapping[str, Any] | None = None,
                     name: str | None = None, keep_conf: bool = True) -> TopologyDef:
    """The topology definition of ``plan``; ``flow_ref``: ``module:attribute`` where a worker finds the
    dataflow ("" when the classes are bound to it in this process); ``conf``: the configuration it is
    built with (``topology.workers`` is the dataflow's worker count), kept as the topology's own unless
    ``keep_conf`` is false (a file loaded for submit: the submit adds its overrides itself, and the
    cluster's configuration is not the topology's)."""
    conf = dict(conf or {})
    own: dict[str, Any] = dict(conf) if keep_conf else {}
    try:
        config = Config.resolve(conf, where="topology configuration", allow_user_keys=True)
    except ConfigError as exc:
        raise TopologyError(str(exc)) from None
    recovery = config.topology_bytewax_recovery
    workers = int(config.topology_workers)
    if recovery and all(s.source == "fixed" for s in plan.steps if s.kind == "input"):
        own[GUARANTEE] = conf[GUARANTEE] = EXACTLY_ONCE  # every source can rewind: a consistent cut
    edges = edges_of(plan, recovery)
    components: dict[str, ComponentDef] = {}
    for step in plan.steps:
        inputs = []
        for producer in plan.steps:
            for edge in edges[producer.step_id]:
                if edge["to"] == step.step_id:
                    inputs.append(InputDef(component=producer.step_id, stream=edge["stream"],
                                           grouping=GroupingDef(type="fields", fields=["route"])))
        comp_conf: dict[str, Any] = {}
        if step.kind == "stateful_batch":
            comp_conf["topology.tick.tuple.freq.secs"] = NOTIFY_PERIOD
        components[step.step_id] = ComponentDef(
            kind="spout" if step.kind == "input" else "bolt",
            **{"class": class_path(step, recovery)},
            kwargs={"flow": flow_ref, "step": step.step_id, "edges": edges[step.step_id],
                    "inputs": [[i.component, i.stream] for i in inputs]},
            parallelism=workers, tasks=workers, conf=comp_conf,
            streams={e["stream"]: StreamDef(fields=list(FIELDS)) for e in edges[step.step_id]},
            inputs=inputs, stateful=stateful(step, recovery), body="python",
            rewindable=(step.source == "fixed") if step.kind == "input" else None,
        )
    if recovery:
        add_checkpointing(components)
    defn = TopologyDef(name=name or plan.flow_id, conf=own, components=components)
    validate(defn)
    validate_composition(defn, conf)
    return defn


def flow_topology(flow: Any, flow_ref: str, conf: Mapping[str, Any] | None = None, name: str | None = None,
                  keep_conf: bool = True) -> Topology:
    """A :class:`Topology` running ``flow`` (its classes imported by path in the workers)."""
    return Topology(build_definition(plan_flow(flow), flow_ref, conf, name, keep_conf))


def is_flow_definition(defn: TopologyDef) -> bool:
    """Whether a topology definition runs a Bytewax dataflow (its components are this module's)."""
    return any(comp.class_path.startswith(WORKER + ":") for comp in defn.components.values())
