"""Rebalance to a new task count (Gale; Storm fixes a component's tasks at submit) — pure decisions.

``nimbus rebalance NAME -e COMP=N`` keeps Storm's meaning while ``N`` is at most the component's
task count (``N`` executors share the same tasks); with ``N`` above it the component gets ``N``
tasks (and ``N`` executors). ``-t COMP=N`` sets the task count itself, up or down (the executors
become at most ``N``). Task ids are numbered in sorted component order, so a new task count shifts
the ids of every component sorted after it: every worker of the topology restarts on the new
layout (the worker compares the StormBase's task counts with its own), and tuples in flight to old
task ids time out and replay (at-least-once).

What is keyed by task survives only where it does not depend on the ids:

* **keyed state** (a ``StatefulBolt`` whose every data input is a fields grouping) is stored per
  key group, so task index ``i`` of ``n`` loads the key groups it owns
  (``gale.topology.keygroups.owned_groups``) whatever ``n`` is: its task count may change, up to
  the key groups (``topology.state.key.groups``) — more tasks would own none;
* **per-task state** (a ``StatefulBolt`` with another grouping, a persistent windowed bolt) is
  stored per task index and cannot be split or merged: changing its task count is refused;
* the checkpoint spout runs exactly one task: refused;
* a spout of an exactly-once topology keeps its source position per task index: refused;
* per-task state of *other* components is stored by task index, not id, and is unaffected; spout
  pending maps, acker trees and executor stats live in the workers, which restart anyway.

Everything is decided here before nimbus writes anything to ZooKeeper.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gale.config_keys import Config
from gale.errors import TopologyError
from gale.topology.checkpointing import EXACTLY_ONCE, data_inputs
from gale.topology.definition import ACKER_COMPONENT, TopologyDef
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.topology.windowing import sets_window


@dataclass(frozen=True)
class RescalePlan:
    executors: dict[str, int]  # the executor counts to store in the rebalance options
    tasks: dict[str, int]  # the task counts that change (component → new count)


def current_tasks(defn: TopologyDef, component_tasks: Mapping[str, int], component: str) -> int:
    """A component's task count now: a previous rebalance's, else its definition's."""
    return int(component_tasks.get(component, defn.components[component].tasks))


def component_config(defn: TopologyDef, config: Config, component: str) -> tuple[Config, Config]:
    """A component's own configuration, and its effective one (the topology's ``config`` with the
    component's over it)."""
    where = f"configuration of component {component!r}"
    own_conf = defn.components[component].conf
    return (Config.resolve(own_conf, where=where, allow_user_keys=True),
            config.with_overrides(own_conf, where=where))


def state_kind(defn: TopologyDef, config: Config, component: str) -> str | None:
    """``"keyed"``, ``"per-task"`` or None (no state) for a component, from the definition."""
    comp = defn.components[component]
    own, effective = component_config(defn, config, component)
    if sets_window(own) and effective.topology_bolts_window_persistent:
        return "per-task"  # a persistent window's buffer: per task whatever the grouping
    if not comp.stateful:
        return None
    inputs = data_inputs(defn, component)
    return "keyed" if inputs and all(i.grouping.type == "fields" for i in inputs) else "per-task"


def key_groups(defn: TopologyDef, config: Config, component: str) -> int:
    return component_config(defn, config, component)[1].topology_state_key_groups


def _count(what: str, comp: str, n: Any) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TopologyError(f"rebalance: {what} for {comp!r} must be an integer >= 1, got {n!r}")
    return n


def check_task_count(defn: TopologyDef, config: Config, component: str, old: int, new: int) -> None:
    """Refuse a task count change the component's state cannot follow (``old`` != ``new``)."""
    if component == CHECKPOINT_COMPONENT:
        raise TopologyError(
            f"rebalance: {component!r} (the checkpoint spout) runs exactly one task; its task count cannot change")
    comp = defn.components[component]
    if comp.kind == "spout" and component_config(defn, config, component)[1].topology_state_guarantee == EXACTLY_ONCE:
        raise TopologyError(
            f"rebalance: spout {component!r} is a source of an exactly-once topology: each of its tasks keeps its "
            f"source position in the checkpoint by task index, so its task count cannot change from {old} to {new}; "
            "rebalance it within its tasks (-e COMPONENT=N with N <= its tasks)"
        )
    kind = state_kind(defn, config, component)
    if kind == "per-task":
        raise TopologyError(
            f"rebalance: component {component!r} has per-task state (a stateful bolt whose inputs are not all "
            "fields groupings, or a persistent window): its state is stored per task index and cannot be split "
            f"or merged, so its task count cannot change from {old} to {new}; rebalance it within its {old} tasks "
            "(-e COMPONENT=N with N <= its tasks), or key its state with a fields grouping (docs/state.md)"
        )
    if kind == "keyed":
        groups = key_groups(defn, config, component)
        if new > groups:
            raise TopologyError(
                f"rebalance: component {component!r} has keyed state in {groups} key groups "
                f"(topology.state.key.groups): it can have at most {groups} tasks, not {new} "
                "(a task beyond the key groups would own no key)"
            )


def plan_rescale(defn: TopologyDef, config: Config, component_executors: Mapping[str, int],
                 component_tasks: Mapping[str, int], executors: Mapping[str, Any],
                 tasks: Mapping[str, Any] | None = None) -> RescalePlan:
    """Validate a rebalance's executor and task counts against the definition and the topology's
    StormBase (``component_executors``, and the task counts earlier rebalances set,
    ``component_tasks``) and decide the new counts. Raises TopologyError naming the component and
    the problem; nothing is decided in part."""
    tasks = dict(tasks or {})
    for comp in [*executors, *tasks]:
        if comp not in defn.components:
            hint = " (the acker's executors follow the workers)" if comp == ACKER_COMPONENT else ""
            raise TopologyError(f"rebalance: unknown component {comp!r}{hint}; components: {sorted(defn.components)}")
    new_executors: dict[str, int] = {}
    new_tasks: dict[str, int] = {}
    for comp, n in tasks.items():
        new_tasks[comp] = _count("the task count", comp, n)
    for comp, n in executors.items():
        n = _count("executors", comp, n)
        have = new_tasks.get(comp, current_tasks(defn, component_tasks, comp))
        if n > have:
            if comp in new_tasks:
                raise TopologyError(
                    f"rebalance: component {comp!r} would have {have} tasks; it cannot run {n} executors "
                    "(each executor needs at least one task)")
            new_tasks[comp] = n  # Gale: -e above the task count grows the tasks
        new_executors[comp] = n
    changed: dict[str, int] = {}
    for comp, n in sorted(new_tasks.items()):
        old = current_tasks(defn, component_tasks, comp)
        if n == old:
            continue
        check_task_count(defn, config, comp, old, n)
        changed[comp] = n
    for comp, n in new_tasks.items():
        if comp not in new_executors:
            # -t alone: the executors the component has now, at most its new task count
            now = component_executors.get(comp, defn.components[comp].parallelism)
            new_executors[comp] = min(n, int(now))
    return RescalePlan(executors=new_executors, tasks=changed)
