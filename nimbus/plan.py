"""One scheduling round as a pure function: a snapshot of the cluster in, the writes out.

Nimbus's monitor loop reads a :class:`RoundSnapshot` (storms, assignments, supervisors, each
schedulable topology's definition, code and workerbeats, the heartbeat cache, the time), calls
:func:`plan_round` and applies the returned :class:`RoundPlan` with its fenced writes
(:meth:`gale.nimbus.daemon.Nimbus.mk_assignments`). Nothing here does I/O, reads a clock or
changes its inputs, so a round is tested by building a snapshot and asserting the plan.

A round:

1. folds the heartbeats into a copy of the heartbeat cache: each supervisor's batch of its
   workers' heartbeats (``SupervisorInfo.worker_heartbeats``, as Storm 2's supervisors send theirs
   to nimbus) and, for slots whose supervisor is gone or whose reports stopped
   (:func:`workerbeats_wanted`), the workers' own workerbeats. An executor's
   beat counts only when the current assignment places it on the slot the beat comes from (a
   zombie with stale stats is not trusted), and the cache forgets executors the topology no
   longer has. The round reads one znode per supervisor for liveness, not one per worker;
2. judges liveness and places executors (:func:`gale.nimbus.scheduler.compute_assignments`);
3. builds each topology's :class:`~gale.records.Assignment` (start times reset where a slot's
   executors changed, node → host from the live supervisors) only when something in it changed,
   and keeps it when it differs from the one in ZooKeeper;
4. lists the assignments of topologies that no longer exist under ``storms`` for deletion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gale.config_keys import Config
from gale.records import Assignment, ExecutorId, StormBase, SupervisorInfo, WorkerHeartbeat, decode_executors
from gale.topology.definition import TopologyDef, TopologyTasks
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
    def from_config(cls, config: Config) -> SchedulingTimeouts:
        return cls(
            launch_secs=float(config.nimbus_task_launch_secs),
            timeout_secs=float(config.nimbus_task_timeout_secs),
            orphan_grace_secs=3.0 * config.task_heartbeat_frequency_secs,
        )


@dataclass(frozen=True)
class TopologyInputs:
    """What nimbus read about one topology it can schedule (its code is on this nimbus)."""

    base: StormBase
    defn: TopologyDef
    #: nimbus's configuration merged with the topology's, as the mapping
    #: :meth:`~gale.topology.definition.TopologyTasks.of` reads
    conf: Mapping[str, Any]
    code_dir: str
    code_checksum: str
    #: /workerbeats/<id>/<node>-<port> of the slots the supervisors' reports do not vouch for
    #: (:func:`workerbeats_wanted`): the live supervisors report their workers' heartbeats themselves
    heartbeats: Mapping[WorkerSlot, WorkerHeartbeat]


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


#: per topology: slot → (heartbeat time_secs, the executors the beat names)
SlotBeats = dict[str, dict[WorkerSlot, tuple[int, list[ExecutorId]]]]


def collect_beats(supervisors: Mapping[str, SupervisorInfo],
                  topologies: Mapping[str, TopologyInputs]) -> SlotBeats:
    """Every heartbeat of the round by topology and slot: the supervisors' batches, and the
    workerbeats read (:func:`workerbeats_wanted`); where both speak of a slot, the newer beat."""
    out: SlotBeats = {}
    for tid, topo in topologies.items():
        for slot, hb in topo.heartbeats.items():
            out.setdefault(tid, {})[slot] = (hb.time_secs, hb.executors())
    for node, info in supervisors.items():
        for wb in info.worker_heartbeats:
            beats = out.setdefault(wb.topology_id, {})
            have = beats.get((node, wb.port))
            if have is None or wb.time_secs >= have[0]:
                beats[(node, wb.port)] = (wb.time_secs, wb.executor_ids())
    return out


def workerbeats_wanted(assignments: Mapping[str, Assignment], supervisors: Mapping[str, SupervisorInfo],
                       cache: HeartbeatCache) -> dict[str, list[WorkerSlot]]:
    """The slots whose workerbeats a round should read, by topology: those the supervisors'
    reports cannot vouch for — the slot's supervisor is not registered (a node lost, or a
    supervisor restarting while its workers run), or it reports no beat for the slot newer than
    the one nimbus has seen (its reports stopped: the node froze or died and its session has not
    expired yet). Reading them while the supervisor's znode still exists gives nimbus a
    baseline, so when the node's session expires its executors move at the next round rather than
    one orphan grace later; a healthy cluster reads none."""
    reported: dict[tuple[str, WorkerSlot], int] = {}
    for node, info in supervisors.items():
        for wb in info.worker_heartbeats:
            reported[(wb.topology_id, (node, wb.port))] = wb.time_secs
    out: dict[str, list[WorkerSlot]] = {}
    for tid, a in sorted(assignments.items()):
        seen = cache.entries.get(tid, {})
        for w in a.workers:
            slot = (w.node, w.port)
            if w.node in supervisors:
                t = reported.get((tid, slot))
                first = decode_executors(w.executors)[:1]
                last = seen.get(first[0]) if first else None
                if t is not None and (last is None or t > last[0]):
                    continue  # the supervisor vouches for it this round
            if slot not in out.get(tid, []):
                out.setdefault(tid, []).append(slot)
    return out


def observe_heartbeats(
    cache: HeartbeatCache, topology_id: str, placements: Mapping[ExecutorId, WorkerSlot],
    beats: Mapping[WorkerSlot, tuple[int, list[ExecutorId]]], now: float,
) -> None:
    """Record each beat's ``time_secs`` for the executors the assignment places on its slot."""
    if not beats:
        return
    by_slot: dict[WorkerSlot, set[ExecutorId]] = {}
    for ex, slot in placements.items():
        by_slot.setdefault(slot, set()).add(ex)
    for slot, (time_secs, executors) in beats.items():
        here = by_slot.get(slot)
        if not here:
            continue
        for ex in executors:
            if ex in here:
                cache.update(topology_id, ex, time_secs, now)


def plan_round(snapshot: RoundSnapshot) -> RoundPlan:
    """The assignments to write and delete this round, and the heartbeat cache after it."""
    now = snapshot.now
    cache = snapshot.cache.copy()
    beats = collect_beats(snapshot.supervisors, snapshot.topologies)
    details: list[TopologyDetails] = []
    for tid, topo in sorted(snapshot.topologies.items()):
        layout = TopologyTasks.of(topo.defn, topo.conf, topo.base)
        old = snapshot.assignments.get(tid)
        placements = old.executors() if old else {}
        starts = old.start_times() if old else {}
        observe_heartbeats(cache, tid, placements, beats.get(tid, {}), now)
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
        starts = start_times_for(placements, d.placements, d.start_times, int(now))
        hosts = _node_hosts(placements, snapshot.supervisors, old)
        if (old is not None and placements == d.placements and starts == d.start_times and hosts == old.node_host
                and (old.master_code_dir, old.code_checksum, old.owner) == (topo.code_dir, topo.code_checksum,
                                                                             topo.base.owner)):
            continue  # nothing changed: no record to build
        assignment = Assignment.build(
            master_code_dir=topo.code_dir,
            code_checksum=topo.code_checksum,
            node_host=hosts,
            executor_node_port=placements,
            executor_start_time_secs=starts,
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


def assignment_size_bound(executors: list[ExecutorId], num_workers: int, *, code_dir: str, owner: str = "",
                          node_id_len: int = 64, host_len: int = 64) -> int:
    """The most bytes the assignment of ``executors`` over ``num_workers`` workers can take in
    ZooKeeper: the size of its record when every worker runs on its own node whose id and host
    name have the longest lengths given, on a five-digit port, and the even scheduler's
    round-robin placement splits every run of executors (one ``start-end`` token each)."""
    workers = max(1, min(num_workers, len(executors)))
    nodes = [str(i).rjust(node_id_len, "n") for i in range(workers)]  # distinct, each node_id_len long
    placements = {ex: (nodes[i % workers], 65535) for i, ex in enumerate(sorted(executors))}
    bound = Assignment.build(
        master_code_dir=code_dir, code_checksum="0" * 64, node_host={n: "h" * host_len for n in nodes},
        executor_node_port=placements, executor_start_time_secs={ex: 9_999_999_999 for ex in placements},
        owner=owner,
    )
    return len(bound.encode())
