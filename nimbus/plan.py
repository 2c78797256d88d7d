"""One scheduling round as a pure function: a snapshot of the cluster in, the writes out.

Nimbus's monitor loop reads a :class:`RoundSnapshot` (storms, assignments, supervisors, each
schedulable topology's definition, code and workerbeats, the heartbeat cache, the time), calls
:func:`plan_round` and applies the returned :class:`RoundPlan` with its fenced writes
(:meth:`gale.nimbus.daemon.Nimbus.mk_assignments`). Nothing here does I/O, reads a clock or
changes its inputs, so a round is tested by building a snapshot and asserting the plan.

A round:

1. folds the workerbeats into a copy of the heartbeat cache: an executor's beat counts only when
   the current assignment places it on the slot that wrote the beat (a zombie with stale stats is
   not trusted), and the cache forgets executors the topology no longer has;
2. judges liveness and places executors (:func:`gale.nimbus.scheduler.compute_assignments`);
3. builds each topology's :class:`~gale.records.Assignment` (start times reset where a slot's
   executors changed, node → host from the live supervisors) and keeps it only when it differs
   from the one in ZooKeeper;
4. lists the assignments of topologies that no longer exist under ``storms`` for deletion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gale.records import Assignment, ExecutorId, StormBase, SupervisorInfo, WorkerHeartbeat
from gale.topology.definition import TopologyDef, TopologyLayout
from gale.nimbus.scheduler import (
    HeartbeatCache, TopologyDetails, WorkerSlot, compute_assignments, start_times_for,
)


@dataclass(frozen=True)
class SchedulingTimeouts:
    """Liveness timeouts of a round (nimbus's configuration)."""

    launch_secs: float  # nimbus.task.launch.secs: grace for executors that just started
    timeout_secs: float  # nimbus.task.timeout.secs: a heartbeat must change within this
    orphan_grace_secs: float  # executors of a vanished supervisor: a few heartbeat periods

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> SchedulingTimeouts:
        return cls(
            launch_secs=float(conf["nimbus.task.launch.secs"]),
            timeout_secs=float(conf["nimbus.task.timeout.secs"]),
            orphan_grace_secs=3.0 * float(conf["task.heartbeat.frequency.secs"]),
        )


@dataclass(frozen=True)
class TopologyInputs:
    """What nimbus read about one topology it can schedule (its code is on this nimbus)."""

    base: StormBase
    defn: TopologyDef
    conf: Mapping[str, Any]  # nimbus's configuration merged with the topology's
    code_dir: str
    code_checksum: str
    heartbeats: Mapping[WorkerSlot, WorkerHeartbeat]  # /workerbeats/<id>/<node>-<port>


@dataclass(frozen=True)
class RoundSnapshot:
    now: float  # nimbus's clock (wall-clock seconds)
    topologies: Mapping[str, TopologyInputs]  # schedulable topologies by id
    storm_ids: frozenset[str]  # every topology under /storms, schedulable here or not
    assignments: Mapping[str, Assignment]  # /assignments as read this round
    supervisors: Mapping[str, SupervisorInfo]  # the live (registered) supervisors
    cache: HeartbeatCache  # nimbus's heartbeat cache before this round (not changed)
    timeouts: SchedulingTimeouts
    scratch: str | None = None  # a topology being rebalanced: planned from scratch


@dataclass(frozen=True)
class AssignmentWrite:
    topology_id: str
    assignment: Assignment
    previous: Assignment | None
    moved: frozenset[ExecutorId]  # executors whose slot changed
    dead: frozenset[ExecutorId]  # executors judged dead this round


@dataclass(frozen=True)
class RoundPlan:
    writes: tuple[AssignmentWrite, ...]  # changed or new assignments, by topology id
    deletions: tuple[str, ...]  # assignments of topologies that no longer exist
    cache: HeartbeatCache  # the heartbeat cache after this round


def observe_heartbeats(
    cache: HeartbeatCache, topology_id: str, placements: Mapping[ExecutorId, WorkerSlot],
    heartbeats: Mapping[WorkerSlot, WorkerHeartbeat], now: float,
) -> None:
    """Record each beat's ``time_secs`` for the executors the assignment places on its slot."""
    for slot, hb in heartbeats.items():
        here = {ex for ex, placed in placements.items() if placed == slot}
        for ex in hb.executors():
            if ex in here:
                cache.update(topology_id, ex, hb.time_secs, now)


def plan_round(snapshot: RoundSnapshot) -> RoundPlan:
    """The assignments to write and delete this round, and the heartbeat cache after it."""
    now = snapshot.now
    cache = snapshot.cache.copy()
    details: list[TopologyDetails] = []
    for tid, topo in sorted(snapshot.topologies.items()):
        layout = TopologyLayout(topo.defn, topo.conf, topo.base.num_workers, topo.base.component_executors)
        old = snapshot.assignments.get(tid)
        placements = old.executors() if old else {}
        starts = old.start_times() if old else {}
        observe_heartbeats(cache, tid, placements, topo.heartbeats, now)
        cache.retain(tid, layout.executors)
        details.append(TopologyDetails(tid, layout.executors, topo.base.num_workers, placements, starts,
                                       scratch=(tid == snapshot.scratch)))
    t = snapshot.timeouts
    new_placements, dead = compute_assignments(
        details, {sid: list(info.meta) for sid, info in snapshot.supervisors.items()}, cache, now,
        launch_secs=t.launch_secs, timeout_secs=t.timeout_secs, orphan_grace_secs=t.orphan_grace_secs,
    )
    writes: list[AssignmentWrite] = []
    for d in details:
        tid = d.topology_id
        topo = snapshot.topologies[tid]
        placements = new_placements.get(tid, {})
        old = snapshot.assignments.get(tid)
        assignment = Assignment.build(
            master_code_dir=topo.code_dir,
            code_checksum=topo.code_checksum,
            node_host=_node_hosts(placements, snapshot.supervisors, old),
            executor_node_port=placements,
            executor_start_time_secs=start_times_for(placements, d.placements, d.start_times, int(now)),
            owner=topo.base.owner,
        )
        if old is None or assignment != old:
            moved = frozenset(ex for ex in placements if d.placements.get(ex) != placements[ex])
            writes.append(AssignmentWrite(tid, assignment, old, moved, frozenset(dead.get(tid, ()))))
    deletions = tuple(sorted(tid for tid in snapshot.assignments if tid not in snapshot.storm_ids))
    return RoundPlan(tuple(writes), deletions, cache)


def _node_hosts(placements: Mapping[ExecutorId, WorkerSlot], supervisors: Mapping[str, SupervisorInfo],
                old: Assignment | None) -> dict[str, str]:
    """node → host for the nodes used: the live supervisor's hostname, else the last one known."""
    out: dict[str, str] = {}
    for node, _port in placements.values():
        info = supervisors.get(node)
        out[node] = info.hostname if info else (old.node_host.get(node, node) if old else node)
    return out
