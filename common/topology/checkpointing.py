"""The checkpoint wiring a topology with a stateful bolt gets (Storm's ``TopologyBuilder`` does the
same): a ``$checkpointspout`` component emitting ``(txid, action)`` on its ``$checkpoint`` stream,
every bolt declaring a ``$checkpoint`` stream it forwards checkpoints on, and every bolt subscribed
(all grouping) to the ``$checkpoint`` stream of each component it reads from — of the checkpoint
spout in place of a data spout. Pure functions over the definition; nimbus uses
:func:`validate_checkpointing` at submit without importing user code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gale.errors import TopologyError
from gale.topology.definition import ComponentDef, GroupingDef, InputDef, StreamDef, TopologyDef
from gale.topology.state import CHECKPOINT_COMPONENT, CHECKPOINT_FIELDS, CHECKPOINT_STREAM

CHECKPOINT_SPOUT_CLASS = "gale.worker.state.checkpoint_spout:CheckpointSpout"
GUARANTEE = "topology.state.guarantee"
EXACTLY_ONCE = "exactly-once"
#: spouts that cannot go back to a position (RabbitMQ acknowledges what it delivered; a shell spout's
#: subprocess has no rewind in the multi-lang protocol): refused in exactly-once topologies by class
#: path, before anything is written; any other spout class is checked when its worker loads it
NOT_REWINDABLE = {
    "gale.worker.connectors.rabbitmq_spout:RabbitMQSpout": "RabbitMQ cannot redeliver what it acknowledged",
    "gale.worker.multilang.components:ShellSpout": "the multi-lang protocol has no rewind",
}


def add_checkpointing(components: dict[str, ComponentDef]) -> None:
    """Add the checkpoint spout, stream and subscriptions to ``components`` (in place)."""
    if CHECKPOINT_COMPONENT in components:
        return
    fields = list(CHECKPOINT_FIELDS)
    data_components = dict(components)
    components[CHECKPOINT_COMPONENT] = ComponentDef(
        kind="spout", **{"class": CHECKPOINT_SPOUT_CLASS}, parallelism=1, tasks=1,
        streams={CHECKPOINT_STREAM: StreamDef(fields=fields)},
    )
    for comp in data_components.values():
        if comp.kind != "bolt":
            continue
        comp.streams[CHECKPOINT_STREAM] = StreamDef(fields=fields)
        sources: list[str] = []
        for inp in comp.inputs:
            src = CHECKPOINT_COMPONENT if data_components[inp.component].kind == "spout" else inp.component
            if src not in sources:
                sources.append(src)
        comp.inputs.extend(
            InputDef(component=src, stream=CHECKPOINT_STREAM, grouping=GroupingDef(type="all")) for src in sources
        )


def has_checkpointing(defn: TopologyDef) -> bool:
    return CHECKPOINT_COMPONENT in defn.components


def checkpoint_inputs(defn: TopologyDef, component: str) -> list[str]:
    """The components whose ``$checkpoint`` stream ``component`` reads."""
    return [i.component for i in defn.components[component].inputs if i.stream == CHECKPOINT_STREAM]


def data_inputs(defn: TopologyDef, component: str) -> list[InputDef]:
    return [i for i in defn.components[component].inputs if i.stream != CHECKPOINT_STREAM]


def validate_checkpointing(defn: TopologyDef, conf: Mapping[str, Any]) -> None:
    """Refuse a checkpoint interval not below the message timeout (a checkpoint's tuple tree, and
    the inputs whose acks wait for it, would time out before it could commit), and a persistent
    window in a topology without checkpoints (the key set by configuration, not by the builder)."""
    if not has_checkpointing(defn):
        if conf.get(GUARANTEE) == EXACTLY_ONCE:
            raise TopologyError(
                f"{GUARANTEE} is {EXACTLY_ONCE}, but the topology has no stateful bolt: exactly-once is about "
                "managed state (gale.StatefulBolt); without one there is nothing to keep exactly once"
            )
        from gale.topology.windowing import PERSISTENT, WINDOW_KEYS

        persistent = sorted(cid for cid, comp in defn.components.items()
                            if any(comp.conf.get(k) is not None for k in WINDOW_KEYS)
                            and {**conf, **comp.conf}.get(PERSISTENT))
        if persistent:
            raise TopologyError(
                f"windowed bolts ({', '.join(persistent)}) have {PERSISTENT} set by configuration, but the topology "
                "was built without checkpoints: call with_persistence() in the bolt's __init__, so that the builder "
                "adds them (docs/windows.md, \"Persistent windows\")"
            )
        return
    if conf.get(GUARANTEE) == EXACTLY_ONCE:
        validate_exactly_once(defn, conf)
    interval_ms = conf.get("topology.state.checkpoint.interval.ms", 1000)
    timeout_s = conf.get("topology.message.timeout.secs", 30)
    if interval_ms >= timeout_s * 1000:
        raise TopologyError(
            f"topology.state.checkpoint.interval.ms ({interval_ms}) must be below topology.message.timeout.secs "
            f"({timeout_s} s = {timeout_s * 1000} ms): acks of a stateful bolt's inputs wait for the next checkpoint "
            "to commit, and would time out first"
        )


def validate_exactly_once(defn: TopologyDef, conf: Mapping[str, Any]) -> None:
    """What exactly-once needs of a topology (docs/state.md "Exactly-once"), checked at submit."""
    from gale.topology.windowing import PERSISTENT, WINDOW_KEYS

    where = f"{GUARANTEE} {EXACTLY_ONCE}"
    for cid, comp in sorted(defn.components.items()):
        if comp.kind == "spout" and comp.class_path in NOT_REWINDABLE:
            raise TopologyError(
                f"{where}: spout {cid!r} ({comp.class_path.rpartition(':')[2]}) cannot rewind: "
                f"{NOT_REWINDABLE[comp.class_path]}; use at-least-once for this topology"
            )
        if comp.kind == "bolt" and any(comp.conf.get(k) is not None for k in WINDOW_KEYS) \
                and not {**conf, **comp.conf}.get(PERSISTENT):
            raise TopologyError(
                f"{where}: windowed bolt {cid!r} keeps its window in the task's memory, which a rollback to the last "
                "checkpoint cannot restore: call with_persistence() in its __init__ (the window in managed state, "
                "part of every checkpoint; docs/windows.md \"Persistent windows\")")
        if comp.spark:
            raise TopologyError(f"{where}: Spark component {cid!r}: Spark stages are not supported in exactly-once "
                                "topologies yet (docs/state.md \"Not yet\")")
