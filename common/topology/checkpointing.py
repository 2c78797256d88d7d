"""The checkpoint wiring a topology with a stateful bolt gets (Storm's ``TopologyBuilder`` does the
same): a ``$checkpointspout`` component emitting ``(txid, action)`` on its ``$checkpoint`` stream,
every bolt declaring a ``$checkpoint`` stream it forwards checkpoints on, and every bolt subscribed
(all grouping) to the ``$checkpoint`` stream of each component it reads from — of the checkpoint
spout in place of a data spout. Pure functions over the definition; what may be combined with
checkpoints is :mod:`gale.topology.composition`'s (nimbus checks it at submit without importing user
code).
"""

from __future__ import annotations

from gale.topology.definition import ComponentDef, GroupingDef, InputDef, StreamDef, TopologyDef
from gale.topology.state import CHECKPOINT_COMPONENT, CHECKPOINT_FIELDS, CHECKPOINT_STREAM

CHECKPOINT_SPOUT_CLASS = "gale.worker.state.checkpoint_spout:CheckpointSpout"
GUARANTEE = "topology.state.guarantee"
EXACTLY_ONCE = "exactly-once"


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
