"""A scheduling round as a pure function (gale.nimbus.plan): snapshot in, writes and deletions out.
No ZooKeeper, no clock: each test builds a snapshot and asserts the plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gale.config import defaults
from gale.records import (
    Assignment, ExecutorStats, StormBase, SupervisorInfo, SupervisorWorkerHeartbeat, TopologyStatus, WorkerHeartbeat,
    encode_executors, executor_key,
)
from gale.topology.builder import TopologyBuilder
from gale.topology.definition import component_parallelism
from gale.nimbus.plan import RoundSnapshot, SchedulingTimeouts, TopologyInputs, plan_round, workerbeats_wanted
from gale.nimbus.scheduler import HeartbeatCache
from tests.topologies import Identity, ListSpout

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

NOW = 1_800_000_000.0
T = SchedulingTimeouts(launch_secs=120, timeout_secs=30, orphan_grace_secs=9)
CODE = "c" * 64


def topology(workers: int = 2, owner: str = "ana") -> TopologyInputs:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout, 2)
    b.set_bolt("split", Identity, 2).shuffle_grouping("words")
    conf = {**defaults(), "topology.workers": workers, "topology.acker.executors": 1}
    defn = b.create_topology(name="t", conf={"topology.workers": workers}).definition
    base = StormBase(name="t", status=TopologyStatus.ACTIVE, num_workers=workers,
                     component_executors=component_parallelism(defn, conf, workers), launch_time_secs=int(NOW),
                     owner=owner)
    # executors: __acker (1,1), split (2,2) (3,3), words (4,4) (5,5)
    return TopologyInputs(base=base, defn=defn, conf=conf, code_dir="/nimbus/stormdist/t-1", code_checksum=CODE,
                          heartbeats={})


def supervisors(*nodes: str, ports=(6700, 6701)) -> dict[str, SupervisorInfo]:
    return {n: SupervisorInfo(time_secs=int(NOW), hostname=f"host-{n}", assignment_id=n, meta=list(ports))
            for n in nodes}


def snapshot(topologies=None, assignments=None, sups=None, now=NOW, cache=None, storm_ids=None, **kw) -> RoundSnapshot:
    topologies = {"t-1": topology()} if topologies is None else topologies
    return RoundSnapshot(
        now=now, topologies=topologies, storm_ids=frozenset(topologies if storm_ids is None else storm_ids),
        assignments=assignments or {}, supervisors=supervisors("a", "b") if sups is None else sups,
        cache=cache or HeartbeatCache(), timeouts=T, **kw,
    )


def beat(tid: str, placements: dict, slot: tuple[str, int], time_secs: int, executors=None) -> WorkerHeartbeat:
    """The workerbeat of ``slot``: stats for the executors placed there (or ``executors``)."""
    mine = executors if executors is not None else [ex for ex, s in placements.items() if s == slot]
    return WorkerHeartbeat(storm_id=tid, time_secs=time_secs, uptime_secs=1,
                           executor_stats={executor_key(ex): ExecutorStats(component="c", kind="bolt") for ex in mine})


def beats(tid: str, a: Assignment, time_secs: int) -> dict:
    placements = a.executors()
    return {slot: beat(tid, placements, slot, time_secs) for slot in set(placements.values())}


def reporting(a: Assignment, time_secs: int, *nodes: str, skip=(), executors=None) -> dict[str, SupervisorInfo]:
    """Supervisors ``nodes`` (default a, b), each reporting the heartbeats of the workers ``a``
    places on it (as read from their LocalState), except the slots in ``skip``."""
    sups = supervisors(*(nodes or ("a", "b")))
    out = {}
    for node, info in sups.items():
        hbs = [SupervisorWorkerHeartbeat(topology_id="t-1", port=port, time_secs=time_secs,
                                         executors=encode_executors(executors if executors is not None else exs))
               for port, exs in a.executors_on(node).items() if (node, port) not in skip]
        out[node] = info.model_copy(update={"worker_heartbeats": hbs})
    return out


def first_assignment() -> Assignment:
    plan = plan_round(snapshot())
    return plan.writes[0].assignment


# ----------------------------------------------------------------------------- tests


def test_new_topology_gets_a_complete_assignment():
    plan = plan_round(snapshot())
    assert [w.topology_id for w in plan.writes] == ["t-1"] and plan.deletions == ()
    w = plan.writes[0]
    a = w.assignment
    assert w.previous is None and w.dead == frozenset()
    assert set(a.executors()) == {(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)}
    slots = set(a.executors().values())
    assert len(slots) == 2 and {n for n, _ in slots} == {"a", "b"}  # spread over both nodes
    assert a.node_host == {"a": "host-a", "b": "host-b"}
    assert set(a.start_times().values()) == {int(NOW)}
    assert (a.master_code_dir, a.code_checksum, a.owner) == ("/nimbus/stormdist/t-1", CODE, "ana")


def test_unchanged_world_writes_nothing_and_the_inputs_stay_untouched():
    a = first_assignment()
    cache = HeartbeatCache()
    topo = replace(topology(), heartbeats=beats("t-1", a, int(NOW) + 5))
    snap = snapshot({"t-1": topo}, {"t-1": a}, now=NOW + 5, cache=cache)
    plan = plan_round(snap)
    assert plan.writes == () and plan.deletions == ()
    # the beats went into the plan's cache, not into the snapshot's
    assert cache.entries == {}
    assert plan.cache.last_change("t-1", (2, 2)) == NOW + 5
    assert plan_round(snap) == plan  # a pure function: same snapshot, same plan


def test_silent_executors_move_after_the_timeout_not_before():
    a = first_assignment()
    placements = a.executors()
    dead_slot = placements[(1, 1)]
    # every worker beats at launch + 150 s (past the 120 s launch grace); then one slot goes silent
    t1 = NOW + 150
    topo = replace(topology(), heartbeats=beats("t-1", a, int(t1)))
    cache = plan_round(snapshot({"t-1": topo}, {"t-1": a}, now=t1)).cache
    alive = {s: b for s, b in beats("t-1", a, int(t1) + 25).items() if s != dead_slot}
    silent = {**alive, dead_slot: topo.heartbeats[dead_slot]}  # same time_secs as before: not a change
    topo2 = replace(topo, heartbeats=silent)

    early = plan_round(snapshot({"t-1": topo2}, {"t-1": a}, now=t1 + 25, cache=cache))
    assert early.writes == ()  # 25 s of silence < nimbus.task.timeout.secs

    late = plan_round(snapshot({"t-1": topo2}, {"t-1": a}, now=t1 + 31, cache=early.cache))
    (w,) = late.writes
    moved = {ex for ex, s in placements.items() if s == dead_slot}
    assert w.dead == moved and w.moved == moved and w.previous == a
    new = w.assignment.executors()
    assert all(new[ex] != dead_slot for ex in moved)  # the dead slot is not reused this round
    assert all(new[ex] == placements[ex] for ex in placements if ex not in moved)
    # the moved executors start over; the others keep their start times
    starts = w.assignment.start_times()
    assert all(starts[ex] == int(t1 + 31) for ex in moved)
    assert all(starts[ex] == int(NOW) for ex in placements if ex not in moved and new[ex] not in set(new[m] for m in moved))


def test_a_beat_from_another_slot_does_not_keep_an_executor_alive():
    """A zombie worker still writing stats for executors that now run elsewhere is not trusted."""
    a = first_assignment()
    placements = a.executors()
    slot_of_1 = placements[(1, 1)]
    other = next(s for s in set(placements.values()) if s != slot_of_1)
    t1 = NOW + 150
    # only the *other* slot beats, and it claims every executor
    topo = replace(topology(), heartbeats={other: beat("t-1", placements, other, int(t1), executors=list(placements))})
    plan = plan_round(snapshot({"t-1": topo}, {"t-1": a}, now=t1))
    assert plan.cache.last_change("t-1", (1, 1)) is None
    (w,) = plan.writes
    assert w.dead == {ex for ex, s in placements.items() if s == slot_of_1}


def test_assignments_of_removed_topologies_are_deleted_and_unschedulable_ones_kept():
    a = first_assignment()
    # "gone" has no /storms node; "no-code" has one, but this nimbus cannot read its code
    snap = snapshot({}, {"gone": a, "no-code": a}, storm_ids={"no-code"})
    plan = plan_round(snap)
    assert plan.deletions == ("gone",) and plan.writes == ()


def test_vanished_supervisor_keeps_its_host_while_its_workers_still_beat():
    a = first_assignment()
    t1 = NOW + 150
    topo = replace(topology(), heartbeats=beats("t-1", a, int(t1)))
    cache = plan_round(snapshot({"t-1": topo}, {"t-1": a}, now=t1)).cache
    # supervisor "a" restarts: its znode is gone for a moment, its workers keep beating
    topo2 = replace(topo, heartbeats=beats("t-1", a, int(t1) + 3))
    plan = plan_round(snapshot({"t-1": topo2}, {"t-1": a}, sups=supervisors("b"), now=t1 + 3, cache=cache))
    assert plan.writes == ()
    # its workers go silent too: after the orphan grace their executors move to "b"
    later = plan_round(snapshot({"t-1": topo2}, {"t-1": a}, sups=supervisors("b"), now=t1 + 13, cache=plan.cache))
    (w,) = later.writes
    assert {n for n, _ in w.assignment.executors().values()} == {"b"}
    assert w.assignment.node_host == {"b": "host-b"}


def test_rebalance_replans_from_scratch_and_forgets_removed_executors():
    a = first_assignment()
    t1 = NOW + 150
    topo = replace(topology(), heartbeats=beats("t-1", a, int(t1)))
    cache = plan_round(snapshot({"t-1": topo}, {"t-1": a}, now=t1)).cache
    assert cache.last_change("t-1", (5, 5)) == t1
    # rebalanced to one worker and one "words" executor: (4, 5) replaces (4, 4) and (5, 5)
    base = topo.base.model_copy(update={"num_workers": 1,
                                        "component_executors": {**topo.base.component_executors, "words": 1}})
    topo1 = replace(topo, base=base)
    plan = plan_round(snapshot({"t-1": topo1}, {"t-1": a}, now=t1 + 1, cache=cache, scratch="t-1"))
    (w,) = plan.writes
    assert len(set(w.assignment.executors().values())) == 1
    assert (4, 5) in w.assignment.executors()
    assert plan.cache.last_change("t-1", (5, 5)) is None  # not an executor of the topology any more


def test_two_topologies_never_share_a_slot():
    snap = snapshot({"t-1": topology(), "t-2": topology(workers=1)}, sups=supervisors("a", "b", ports=(6700, 6701)))
    plan = plan_round(snap)
    by_id = {w.topology_id: set(w.assignment.executors().values()) for w in plan.writes}
    assert len(by_id["t-1"]) == 2 and len(by_id["t-2"]) == 1
    assert not by_id["t-1"] & by_id["t-2"]


# ----------------------------------------------------------------------------- heartbeats from supervisors


def test_supervisor_reported_heartbeats_keep_executors_alive_without_workerbeats():
    """Live supervisors report their workers' heartbeats in their own znode: the round needs no
    workerbeat to keep every executor where it is, long after the launch grace."""
    a = first_assignment()
    cache = HeartbeatCache()
    for t in (NOW + 150, NOW + 175, NOW + 200):
        plan = plan_round(snapshot({"t-1": topology()}, {"t-1": a}, sups=reporting(a, int(t)), now=t, cache=cache))
        assert plan.writes == ()
        cache = plan.cache
    assert cache.last_change("t-1", (1, 1)) == NOW + 200


def test_a_worker_its_supervisor_reports_stale_moves_after_the_timeout():
    """A hung worker: its supervisor keeps reporting the last LocalState time it wrote; nimbus
    moves its executors once that time has not changed for nimbus.task.timeout.secs (30 s)."""
    a = first_assignment()
    placements = a.executors()
    hung = placements[(1, 1)]
    t1 = NOW + 150
    cache = plan_round(snapshot({"t-1": topology()}, {"t-1": a}, sups=reporting(a, int(t1)), now=t1)).cache
    stale = {**reporting(a, int(t1) + 29, skip={hung})}
    frozen = reporting(a, int(t1), hung[0])[hung[0]].worker_heartbeats
    stale[hung[0]] = stale[hung[0]].model_copy(update={"worker_heartbeats": [
        *stale[hung[0]].worker_heartbeats, *[b for b in frozen if b.port == hung[1]]]})
    early = plan_round(snapshot({"t-1": topology()}, {"t-1": a}, sups=stale, now=t1 + 29, cache=cache))
    assert early.writes == ()
    late = plan_round(snapshot({"t-1": topology()}, {"t-1": a}, sups=stale, now=t1 + 31, cache=early.cache))
    (w,) = late.writes
    assert w.dead == {ex for ex, s in placements.items() if s == hung}


def test_a_supervisor_reporting_executors_of_another_slot_is_not_trusted():
    """A report names a port: executors the assignment places on another slot do not count."""
    a = first_assignment()
    placements = a.executors()
    t1 = NOW + 150
    every = list(placements)
    sups = reporting(a, int(t1), executors=every)  # each worker claims every executor
    plan = plan_round(snapshot({"t-1": topology()}, {"t-1": a}, sups=sups, now=t1))
    assert plan.writes == ()
    for ex, (node, port) in placements.items():
        assert plan.cache.last_change("t-1", ex) == t1  # counted once, from its own slot
    # only "b" reports (claiming everything): what runs on "a" is not kept alive by it
    only_b = {"a": supervisors("a")["a"], "b": reporting(a, int(t1) + 31, executors=every)["b"]}
    later = plan_round(snapshot({"t-1": topology()}, {"t-1": a}, sups=only_b, now=t1 + 31, cache=plan.cache))
    (w,) = later.writes
    assert w.dead == {ex for ex, s in placements.items() if s[0] == "a"}


def test_a_dead_nodes_last_workerbeat_does_not_pass_for_a_new_beat():
    """The node dies with its workers: its supervisor's last report said time T, the workers' own
    last workerbeats say a bit earlier. When the supervisor's znode goes, the round reads those
    workerbeats (orphaned slots): an older time is not a sign of life, so the executors move as
    soon as the orphan grace since T is over — not one grace later."""
    a = first_assignment()
    placements = a.executors()
    t1 = NOW + 150
    cache = plan_round(snapshot({"t-1": topology()}, {"t-1": a}, sups=reporting(a, int(t1)), now=t1)).cache
    on_a = {s for s in set(placements.values()) if s[0] == "a"}
    stale = {slot: beat("t-1", placements, slot, int(t1) - 2) for slot in on_a}  # written before the report
    topo = replace(topology(), heartbeats=stale)
    plan = plan_round(snapshot({"t-1": topo}, {"t-1": a}, sups=reporting(a, int(t1) + 10, "b"), now=t1 + 10,
                               cache=cache))
    (w,) = plan.writes
    assert w.dead == {ex for ex, s in placements.items() if s in on_a}
    # a worker whose supervisor died but which still beats keeps its executors (a newer workerbeat)
    alive = {slot: beat("t-1", placements, slot, int(t1) + 8) for slot in on_a}
    kept = plan_round(snapshot({"t-1": replace(topology(), heartbeats=alive)}, {"t-1": a},
                               sups=reporting(a, int(t1) + 10, "b"), now=t1 + 10, cache=cache))
    assert kept.writes == ()


def test_workerbeats_are_wanted_only_where_the_supervisors_do_not_vouch():
    a = first_assignment()
    slots = sorted(set(a.executors().values()))
    t1 = NOW + 150
    cache = plan_round(snapshot({"t-1": topology()}, {"t-1": a}, sups=reporting(a, int(t1)), now=t1)).cache
    # every supervisor reports a newer beat for every slot: no workerbeat to read
    assert workerbeats_wanted({"t-1": a}, reporting(a, int(t1) + 5), cache) == {}
    # "a" reports nothing newer (its reports stopped): its slots are wanted; so are a gone node's
    stalled = {**reporting(a, int(t1) + 5, "b"), "a": reporting(a, int(t1), "a")["a"]}
    on_a = sorted(s for s in slots if s[0] == "a")
    assert workerbeats_wanted({"t-1": a}, stalled, cache) == {"t-1": on_a}
    assert workerbeats_wanted({"t-1": a}, reporting(a, int(t1) + 5, "b"), cache) == {"t-1": on_a}
    # a slot its supervisor does not report at all (its worker has not beaten yet, or died)
    quiet = reporting(a, int(t1) + 5, skip={slots[0]})
    assert workerbeats_wanted({"t-1": a}, quiet, cache) == {"t-1": [slots[0]]}


def test_a_node_that_dies_moves_at_the_first_round_after_its_session_expires():
    """Rounds every 10 s; the node dies at t1+2 (its supervisor reported t1, its workers last
    wrote workerbeats at t1+2); its session expires 20 s later. The round while it is still
    registered reads its workerbeats (its reports stopped); the first round after expiry moves
    its executors — not a round later."""
    a = first_assignment()
    placements = a.executors()
    on_a = {s for s in set(placements.values()) if s[0] == "a"}
    t1 = NOW + 150
    cache = plan_round(snapshot({"t-1": topology()}, {"t-1": a}, sups=reporting(a, int(t1)), now=t1)).cache
    last = {slot: beat("t-1", placements, slot, int(t1) + 2) for slot in on_a}
    # t1+10: "a" still registered, its report unchanged; its workerbeats are read
    frozen = {**reporting(a, int(t1) + 10, "b"), "a": reporting(a, int(t1), "a")["a"]}
    wanted = workerbeats_wanted({"t-1": a}, frozen, cache)
    assert set(wanted["t-1"]) == on_a
    r2 = plan_round(snapshot({"t-1": replace(topology(), heartbeats=last)}, {"t-1": a}, sups=frozen, now=t1 + 10,
                             cache=cache))
    assert r2.writes == ()
    # t1+20: "a" still registered (expiry at t1+22): nothing moves before the task timeout
    r3 = plan_round(snapshot({"t-1": replace(topology(), heartbeats=last)}, {"t-1": a}, sups=frozen, now=t1 + 20,
                             cache=r2.cache))
    assert r3.writes == ()
    # t1+30: its znode is gone; the same last workerbeats: dead now
    gone = reporting(a, int(t1) + 30, "b")
    r4 = plan_round(snapshot({"t-1": replace(topology(), heartbeats=last)}, {"t-1": a}, sups=gone, now=t1 + 30,
                             cache=r3.cache))
    (w,) = r4.writes
    assert w.dead == {ex for ex, s in placements.items() if s in on_a}
