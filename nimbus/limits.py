"""What one topology may ask of nimbus, checked by arithmetic before anything is built — pure.

A submit or a rebalance names counts: workers, and per component executors and tasks. Nimbus turns
them into an executor list, task ranges and an assignment; a count of a million (or 10^30) would
make it build millions of objects before any check could refuse them. :func:`check_counts`
refuses, from the counts alone and in microseconds, a topology over nimbus's bounds:

* ``nimbus.slots.perTopology`` — workers (Storm's key; Gale's default 1,000);
* ``nimbus.executors.perTopology`` — executors, ackers included (Storm's key; default 20,000);
* ``nimbus.tasks.perTopology`` — tasks, ackers included (default 20,000): every worker keeps
  routing state for every task of its topology;
* ``nimbus.assignment.max.bytes`` — an executor takes at least :data:`MIN_EXECUTOR_BYTES` of the
  assignment znode, so one with more executors than fit cannot be written (the exact bound, which
  builds the worst-case assignment, is computed afterwards for what passes here).

The bounds are nimbus's own configuration, never the topology's: a topology cannot raise them.
"""

from __future__ import annotations

from collections.abc import Mapping

from gale.config_keys import Config
from gale.errors import TopologyError
from gale.topology.definition import ACKER_COMPONENT, TopologyDef, num_ackers

#: the fewest bytes an executor adds to an assignment record (its ``start-end`` token and a comma)
MIN_EXECUTOR_BYTES = 4


def check_counts(name: str, action: str, nimbus: Config, topology: Config, defn: TopologyDef, num_workers: int,
                 component_executors: Mapping[str, int] | None = None,
                 component_tasks: Mapping[str, int] | None = None) -> None:
    """Refuse (:class:`TopologyError`, naming the count, its bound and the key) a topology whose
    workers, executors or tasks are over nimbus's bounds. ``component_executors`` /
    ``component_tasks``: the counts a rebalance asks for, over the definition's."""
    executors_of = dict(component_executors or {})
    tasks_of = dict(component_tasks or {})

    def refuse(what: str, n: int, bound: int, key: str) -> None:
        raise TopologyError(f"{action} refused: topology {name!r} asks for {n:,} {what}, more than {key} "
                            f"({bound:,}) allows; ask for fewer, or raise {key} in nimbus's configuration")

    if num_workers > nimbus.nimbus_slots_perTopology:
        refuse("workers", num_workers, nimbus.nimbus_slots_perTopology, "nimbus.slots.perTopology")
    ackers = num_ackers(topology, num_workers)
    executors = tasks = ackers
    for cid, comp in defn.components.items():
        if cid == ACKER_COMPONENT:
            continue
        n_tasks = int(tasks_of.get(cid, comp.tasks))
        n_executors = min(int(executors_of.get(cid, comp.parallelism)), n_tasks)
        tasks += n_tasks
        executors += n_executors
    if executors > nimbus.nimbus_executors_perTopology:
        refuse("executors", executors, nimbus.nimbus_executors_perTopology, "nimbus.executors.perTopology")
    if tasks > nimbus.nimbus_tasks_perTopology:
        refuse("tasks", tasks, nimbus.nimbus_tasks_perTopology, "nimbus.tasks.perTopology")
    limit = nimbus.nimbus_assignment_max_bytes
    if executors * MIN_EXECUTOR_BYTES > limit:
        raise TopologyError(
            f"{action} refused: the assignment of topology {name!r} ({executors:,} executors) needs at least "
            f"{executors * MIN_EXECUTOR_BYTES:,} bytes in ZooKeeper, more than nimbus.assignment.max.bytes "
            f"({limit:,} bytes); use fewer executors — see docs/scaling.md")
