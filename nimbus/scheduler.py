"""Scheduling: executor liveness and Storm's even/default scheduler, as pure functions.

Nothing here does I/O or reads a clock: :func:`gale.nimbus.plan.plan_round` calls
:func:`compute_assignments` with what nimbus read this round (live supervisors, assignments,
heartbeats), which returns the new executor → worker slot placements. Semantics follow Storm
(``docs/storm-model.md`` §5):

* An executor is alive iff it has a start time and either it is younger than the launch grace
  (``nimbus.task.launch.secs``) or nimbus saw its heartbeat's ``time_secs`` change within
  ``nimbus.task.timeout.secs`` (judged by nimbus's own clock, so a zombie that stops updating, or a
  worker with a skewed clock, is not trusted).
* Executors on a supervisor that is no longer registered (its ephemeral znode vanished: ZooKeeper
  session expiry) stay only while their heartbeats keep changing within ``orphan_grace_secs`` (a
  few heartbeat periods): a supervisor restarted on its own does not move healthy workers, while a
  node that died or was cut off with its workers (heartbeats stopped too) has its work moved at the
  first round after its session expired, without waiting for ``nimbus.task.timeout.secs``.
* Slots that hold a dead executor are not offered to anyone this round.
* DefaultScheduler: keep alive slots whose executor counts match the ideal even distribution,
  free the others, then place the remaining executors round-robin over free slots sorted so that
  consecutive picks alternate between nodes (EvenScheduler.sortSlots).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gale.records import ExecutorId

#: Storm's WorkerSlot: (supervisor/node id, port). Not the supervisor's per-port state machine
#: (:class:`gale.supervisor.slot.Slot`).
WorkerSlot = tuple[str, int]


@dataclass
class HeartbeatCache:
    """Per executor: the newest ``time_secs`` seen in its heartbeats and nimbus's time when it
    advanced.

    A beat counts as a sign of life only when its ``time_secs`` is newer than any seen before.
    Beats of one worker come from two places — its supervisor's report (the worker's LocalState
    heartbeat) and, once that supervisor is gone, the worker's own workerbeat — stamped at
    different moments by the same clock: switching from one to the other must not pass for a new
    beat (a dead node's executors would get an extra orphan grace)."""

    entries: dict[str, dict[ExecutorId, tuple[int, float]]] = field(default_factory=dict)

    def update(self, topology_id: str, executor: ExecutorId, hb_time_secs: int, now: float) -> None:
        topo = self.entries.setdefault(topology_id, {})
        seen = topo.get(executor)
        if seen is None or hb_time_secs > seen[0]:
            topo[executor] = (hb_time_secs, now)

    def last_change(self, topology_id: str, executor: ExecutorId) -> float | None:
        seen = self.entries.get(topology_id, {}).get(executor)
        return None if seen is None else seen[1]

    def copy(self) -> HeartbeatCache:
        return HeartbeatCache({tid: dict(execs) for tid, execs in self.entries.items()})

    def forget(self, topology_id: str) -> None:
        self.entries.pop(topology_id, None)

    def retain(self, topology_id: str, executors: Iterable[ExecutorId]) -> None:
        keep = set(executors)
        topo = self.entries.get(topology_id)
        if topo:
            for ex in [e for e in topo if e not in keep]:
                del topo[ex]


def alive_executors(
    topology_id: str,
    placements: Mapping[ExecutorId, WorkerSlot],
    start_times: Mapping[ExecutorId, int],
    cache: HeartbeatCache,
    now: float,
    *,
    launch_secs: float,
    timeout_secs: float,
    live_nodes: set[str],
    orphan_grace_secs: float | None = None,
) -> set[ExecutorId]:
    alive = set()
    launch = max(launch_secs, timeout_secs)
    grace = timeout_secs if orphan_grace_secs is None else min(orphan_grace_secs, timeout_secs)
    for ex, (node, _port) in placements.items():
        if node not in live_nodes:
            changed = cache.last_change(topology_id, ex)
            if changed is not None and now - changed < grace:
                alive.add(ex)
            continue
        start = start_times.get(ex)
        if start is None:
            continue
        if now - start < launch:
            alive.add(ex)
            continue
        changed = cache.last_change(topology_id, ex)
        if changed is not None and now - changed < timeout_secs:
            alive.add(ex)
    return alive


def integer_divided(total: int, parts: int) -> dict[int, int]:
    """Storm's Utils.integerDivided: how many parts get each size (11 over 3 → {4: 2, 3: 1})."""
    if parts <= 0:
        return {}
    base, extra = divmod(total, parts)
    out: dict[int, int] = {}
    if extra:
        out[base + 1] = extra
    if parts - extra:
        out[base] = parts - extra
    return out


def sort_slots(available: Iterable[WorkerSlot]) -> list[WorkerSlot]:
    """Group by node, ports ascending; nodes with more free slots first (ties by id); interleave."""
    by_node: dict[str, list[int]] = {}
    for node, port in available:
        by_node.setdefault(node, []).append(port)
    nodes = sorted(by_node, key=lambda n: (-len(by_node[n]), n))
    columns = [[(n, p) for p in sorted(by_node[n])] for n in nodes]
    out: list[WorkerSlot] = []
    depth = max((len(c) for c in columns), default=0)
    for i in range(depth):
        for col in columns:
            if i < len(col):
                out.append(col[i])
    return out


def bad_slots(alive_assigned: Mapping[WorkerSlot, list[ExecutorId]], num_executors: int, num_workers: int) -> set[WorkerSlot]:
    """Alive slots whose executor counts do not fit the ideal even distribution."""
    if num_workers <= 0:
        return set(alive_assigned)
    distribution = integer_divided(num_executors, num_workers)
    keep: set[WorkerSlot] = set()
    for slot, exs in sorted(alive_assigned.items()):
        n = len(exs)
        if distribution.get(n, 0) > 0:
            distribution[n] -= 1
            keep.add(slot)
    return set(alive_assigned) - keep


def schedule_topology(
    executors: list[ExecutorId],
    num_workers: int,
    alive_placements: Mapping[ExecutorId, WorkerSlot],
    available: Iterable[WorkerSlot],
    live_slots: set[WorkerSlot],
) -> dict[ExecutorId, WorkerSlot]:
    """Storm's DefaultScheduler for one topology; returns every executor's slot (when possible).

    ``alive_placements``: alive executors of this topology and where they run. ``available``: free
    slots (no alive executor of any topology, no dead executor). ``live_slots``: every port of
    every live supervisor.
    """
    held = set(alive_placements.values())
    available = [s for s in available if s not in held]
    alive_assigned: dict[WorkerSlot, list[ExecutorId]] = {}
    for ex, slot in alive_placements.items():
        alive_assigned.setdefault(slot, []).append(ex)
    can_reassign = {s for s in alive_assigned if s in live_slots}
    total = min(num_workers, len(can_reassign) + len(available))
    placements = dict(alive_placements)
    if total > len(alive_assigned) or set(executors) != set(alive_placements):
        for slot in bad_slots(alive_assigned, len(executors), total):
            for ex in alive_assigned.pop(slot):
                placements.pop(ex, None)
            available.append(slot)
    # EvenScheduler
    need = total - len(alive_assigned)
    free = sort_slots(available)[: max(0, need)]
    targets = sorted(alive_assigned) if not free else free
    to_place = sorted(ex for ex in executors if ex not in placements)
    if not to_place:
        return placements
    if not free:
        # no free slot: pack the remaining executors onto the kept slots (over-subscription)
        if not targets:
            return placements
    for i, ex in enumerate(to_place):
        placements[ex] = targets[i % len(targets)]
    return placements


def start_times_for(
    new: Mapping[ExecutorId, WorkerSlot], old: Mapping[ExecutorId, WorkerSlot], old_start: Mapping[ExecutorId, int], now: int
) -> dict[ExecutorId, int]:
    """Old start times, reset to ``now`` for every executor whose slot's executor set changed."""

    def by_slot(placements: Mapping[ExecutorId, WorkerSlot]) -> dict[WorkerSlot, list[ExecutorId]]:
        out: dict[WorkerSlot, list[ExecutorId]] = {}
        for ex, slot in placements.items():
            out.setdefault(slot, []).append(ex)
        return {s: sorted(v) for s, v in out.items()}

    new_slots, old_slots = by_slot(new), by_slot(old)
    changed = {s for s, exs in new_slots.items() if old_slots.get(s) != exs}
    out = {}
    for ex, slot in new.items():
        if slot in changed or ex not in old_start:
            out[ex] = now
        else:
            out[ex] = old_start[ex]
    return out


@dataclass
class TopologyDetails:
    """What scheduling needs to know about one topology this round: Storm's ``TopologyDetails``
    (executors, worker count) with its current ``SchedulerAssignment`` (placements, start times)."""

    topology_id: str
    executors: list[ExecutorId]
    num_workers: int
    placements: dict[ExecutorId, WorkerSlot]  # the current assignment (possibly empty)
    start_times: dict[ExecutorId, int]
    scratch: bool = False  # being rebalanced: its current slots count as free


def compute_assignments(
    topologies: list[TopologyDetails],
    supervisors: Mapping[str, list[int]],
    cache: HeartbeatCache,
    now: float,
    *,
    launch_secs: float,
    timeout_secs: float,
    orphan_grace_secs: float | None = 0.0,
) -> tuple[dict[str, dict[ExecutorId, WorkerSlot]], dict[str, set[ExecutorId]]]:
    """New placements for every topology, plus each topology's dead executors (for metrics/logs).

    ``supervisors``: live supervisor id → its slot ports.
    """
    live_nodes = set(supervisors)
    live_slots = {(node, port) for node, ports in supervisors.items() for port in ports}
    alive: dict[str, dict[ExecutorId, WorkerSlot]] = {}
    dead: dict[str, set[ExecutorId]] = {}
    dead_slots: set[WorkerSlot] = set()
    for t in topologies:
        if t.scratch:
            alive[t.topology_id] = {}
            dead[t.topology_id] = set()
            continue
        live = alive_executors(
            t.topology_id, t.placements, t.start_times, cache, now,
            launch_secs=launch_secs, timeout_secs=timeout_secs, live_nodes=live_nodes,
            orphan_grace_secs=orphan_grace_secs,
        )
        wanted = set(t.executors)
        alive[t.topology_id] = {ex: t.placements[ex] for ex in live if ex in wanted}
        dead[t.topology_id] = {ex for ex in t.placements if ex not in live}
        dead_slots |= {t.placements[ex] for ex in dead[t.topology_id]}
    occupied = {slot for placements in alive.values() for slot in placements.values()}
    # slots no alive executor of any topology holds and no dead one blocks (kept up to date below)
    free = live_slots - occupied - dead_slots
    result: dict[str, dict[ExecutorId, WorkerSlot]] = {}
    for t in sorted(topologies, key=lambda t: t.topology_id):
        mine = alive[t.topology_id]
        mine_slots = set(mine.values())
        needs = (
            len(t.executors) != len(mine) or set(t.executors) != set(mine)
            or len(mine_slots) < min(t.num_workers, len(mine_slots) + len(free))
        )
        if not needs:
            result[t.topology_id] = dict(mine)
            continue
        placements = schedule_topology(t.executors, t.num_workers, mine, sorted(free), live_slots)
        result[t.topology_id] = placements
        used = set(placements.values())
        occupied |= used
        free -= used
    return result, dead
