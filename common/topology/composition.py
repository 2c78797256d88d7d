"""How Gale's capabilities compose: every combination of component kinds and guarantees either works
or is refused here, at submit, with the component and the reason named (``docs/architecture.md``,
"What composes"). Pure over the definition and the effective configuration: nimbus runs it without
importing user code, ``TopologyBuilder.create_topology`` and ``LocalCluster`` run it too, so a
combination that cannot work never reaches a worker.

The kinds: spouts (Python, shell; rewindable or not) and bolts whose body is a Python bolt, a window
(in memory, or persistent: ``with_persistence()``), a shell subprocess or a Spark stage, any of them
stateful when it is a ``StatefulBolt``. The guarantees: acking off (``topology.acker.executors: 0``),
acking on, managed state at least once, managed state exactly once. What is refused, and why:

* **managed state without the acker** — checkpoints are tuple trees: a checkpoint commits when its
  tree completes, and a stateful task's inputs are acknowledged only then;
* **a bolt both stateful and windowed** — a window keeps its state through ``with_persistence()``;
* **exactly-once with a spout that cannot rewind** (a shell spout, RabbitMQ, a spout class without
  ``position()``/``rewind()``) — a rollback must take the source back to the checkpoint;
* **exactly-once with a window kept in memory** — a rollback to the last checkpoint cannot restore
  it (and its tuples' trees stay open until the window expires, so the sources could never drain);
* **a checkpoint interval not below the message timeout** — the checkpoint's tree, and the inputs
  whose acks wait for it, would time out first;
* **exactly-once without a stateful bolt** (or a transactional sink), and **a persistent window or a
  transactional sink without checkpoints** — the first has nothing to keep exactly once, the others
  lost the checkpoints the builder adds;
* **a sink configured for exactly-once** (``TransactionalSink(guarantee="exactly-once")``) **in an
  at-least-once topology**, and **a bolt both a sink and stateful or windowed**.

Everything else composes: shell bolts and Spark stages upstream of, downstream of and between
stateful bolts under both guarantees, persistent windows feeding stateful bolts, and so on
(``tests/test_combinations_*.py`` runs every combination).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gale.config import as_config
from gale.config_keys import Config
from gale.errors import TopologyError
from gale.topology.checkpointing import EXACTLY_ONCE, GUARANTEE, has_checkpointing
from gale.topology.definition import ComponentDef, TopologyDef
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.topology.windowing import PERSISTENT

#: spouts that cannot go back to a position, by class path, with the reason (a definition built by
#: Gale's builder also records ``rewindable`` for any class)
NOT_REWINDABLE = {
    "gale.worker.connectors.rabbitmq_spout:RabbitMQSpout": "RabbitMQ cannot redeliver what it acknowledged",
    "gale.worker.multilang.components:ShellSpout": "the multi-lang protocol has no rewind",
}


def windowed(comp: ComponentDef) -> bool:
    return comp.kind == "bolt" and comp.windowed


def persistent(comp: ComponentDef, config: Config) -> bool:
    """A persistent window: its own configuration over the topology's says so."""
    return windowed(comp) and config.with_overrides(comp.conf, where="component configuration").\
        topology_bolts_window_persistent


def describe(comp: ComponentDef, conf: Config) -> str:
    """What a component is, in the words of the refusals (``a StatefulBolt``, ``a shell spout``, ...)."""
    if comp.kind == "spout":
        return "a shell spout" if comp.body == "shell" else "a spout"
    if comp.stateful:
        return "a StatefulBolt"
    if comp.sink:
        return "a TransactionalSink"
    if windowed(comp):
        return "a persistent window" if persistent(comp, conf) else "a window kept in memory"
    return {"shell": "a shell bolt", "spark": "a Spark component"}.get(comp.body or "python", "a bolt")


def validate_composition(defn: TopologyDef, conf: Config | Mapping[str, Any]) -> None:
    """Raise :class:`TopologyError` naming the component and the combination that cannot work
    (module docstring); ``conf``: the effective configuration (defaults, cluster, topology, overrides)."""
    conf = as_config(conf, "topology configuration")
    components = {cid: comp for cid, comp in sorted(defn.components.items()) if cid != CHECKPOINT_COMPONENT}
    for cid, comp in components.items():
        if comp.stateful and windowed(comp):
            raise TopologyError(
                f"component {cid!r} is both a StatefulBolt and a windowed bolt: a window keeps its state with "
                "with_persistence() (docs/windows.md, \"Persistent windows\")")
        if comp.sink and (comp.stateful or windowed(comp)):
            raise TopologyError(
                f"component {cid!r} is both a TransactionalSink and {'a StatefulBolt' if comp.stateful else 'a window'}: "
                "a sink writes what it is sent; keep the state or the window in a bolt before it (docs/sinks.md)")
    if not has_checkpointing(defn):
        _without_checkpoints(components, conf)
        return
    stateful = [f"{cid!r} ({describe(comp, conf)})" for cid, comp in components.items()
                if comp.stateful or persistent(comp, conf) or comp.sink]
    if conf.topology_acker_executors == 0:
        raise TopologyError(
            f"components {', '.join(stateful)} keep managed state, which needs the acker: a checkpoint commits when "
            "its tuple tree completes, and their inputs are acknowledged only then; topology.acker.executors is 0 "
            "(acking off) — leave it unset (one acker per worker) or above 0")
    interval_ms = conf.topology_state_checkpoint_interval_ms
    timeout_s = conf.topology_message_timeout_secs
    if interval_ms >= timeout_s * 1000:
        raise TopologyError(
            f"topology.state.checkpoint.interval.ms ({interval_ms}) must be below topology.message.timeout.secs "
            f"({timeout_s} s = {timeout_s * 1000} ms): acks of a stateful bolt's inputs wait for the next checkpoint "
            "to commit, and would time out first"
        )
    if conf.topology_state_guarantee == EXACTLY_ONCE:
        _exactly_once(components, conf)
    else:
        _sinks_at_least_once(components, conf)


def _sinks_at_least_once(components: Mapping[str, ComponentDef], conf: Config) -> None:
    """A sink that asked for exactly-once in a topology that gives at-least-once."""
    for cid, comp in components.items():
        if comp.sink == EXACTLY_ONCE:
            raise TopologyError(
                f"sink {cid!r} ({comp.class_path.rpartition(':')[2]}) is configured for {EXACTLY_ONCE}, but the topology's "
                f"{GUARANTEE} is {conf.topology_state_guarantee}: its records could be written twice after a failure — "
                f"set {GUARANTEE}: {EXACTLY_ONCE} (with sources that can rewind), or build the sink with "
                "guarantee=None to accept at-least-once (docs/sinks.md)")


def _without_checkpoints(components: Mapping[str, ComponentDef], conf: Config) -> None:
    if conf.topology_state_guarantee == EXACTLY_ONCE:
        raise TopologyError(
            f"{GUARANTEE} is {EXACTLY_ONCE}, but the topology has no stateful bolt: exactly-once is about "
            "managed state (gale.StatefulBolt); without one there is nothing to keep exactly once"
        )
    sinks = sorted(cid for cid, comp in components.items() if comp.sink)
    if sinks:
        raise TopologyError(
            f"transactional sinks ({', '.join(sinks)}) commit with the checkpoint, but the topology has no checkpoints: "
            "build it with gale.TopologyBuilder, which adds them for a TransactionalSink (docs/sinks.md)")
    lost = sorted(cid for cid, comp in components.items() if persistent(comp, conf))
    if lost:
        raise TopologyError(
            f"windowed bolts ({', '.join(lost)}) have {PERSISTENT} set by configuration, but the topology "
            "was built without checkpoints: call with_persistence() in the bolt's __init__, so that the builder "
            "adds them (docs/windows.md, \"Persistent windows\")"
        )


def _exactly_once(components: Mapping[str, ComponentDef], conf: Config) -> None:
    """What exactly-once needs of a topology (docs/state.md "Exactly-once")."""
    where = f"{GUARANTEE} {EXACTLY_ONCE}"
    for cid, comp in components.items():
        if comp.kind == "spout":
            name = comp.class_path.rpartition(":")[2]
            reason = NOT_REWINDABLE.get(comp.class_path)
            if reason is None and comp.body == "shell":
                reason = NOT_REWINDABLE["gale.worker.multilang.components:ShellSpout"]
            if reason is None and comp.rewindable is False:
                reason = "its class does not override position() and rewind() (docs/state.md, \"Exactly-once\")"
            if reason is not None:
                raise TopologyError(f"{where}: spout {cid!r} ({name}) cannot rewind: {reason}; a rollback must take "
                                    "every source back to the checkpoint — use at-least-once for this topology")
        elif windowed(comp) and not persistent(comp, conf):
            raise TopologyError(
                f"{where}: windowed bolt {cid!r} keeps its window in the task's memory, which a rollback to the last "
                "checkpoint cannot restore: call with_persistence() in its __init__ (the window in managed state, "
                "part of every checkpoint; docs/windows.md \"Persistent windows\")")
