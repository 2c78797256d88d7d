"""The nimbus scheduler (pure): liveness, even distribution, reassignment — no I/O, no sleeps."""

import pytest

from gale.nimbus.scheduler import (
    HeartbeatCache,
    TopologyDetails,
    bad_slots,
    compute_assignments,
    integer_divided,
    schedule_topology,
    sort_slots,
    start_times_for,
)

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

EXECS = [(1, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 10)]
SUPS = {"a": [6700, 6701], "b": [6700, 6701], "c": [6700]}
T = dict(launch_secs=120, timeout_secs=30)


def test_integer_divided_and_sort_slots():
    assert integer_divided(11, 3) == {4: 2, 3: 1}
    assert integer_divided(6, 3) == {2: 3}
    slots = [("b", 6701), ("a", 6700), ("c", 6700), ("b", 6700), ("a", 6701)]
    # nodes with more free slots first (ties by id), interleaved
    assert sort_slots(slots) == [("a", 6700), ("b", 6700), ("c", 6700), ("a", 6701), ("b", 6701)]


def test_new_topology_spreads_over_nodes():
    snap = TopologyDetails("t", EXECS, 3, {}, {})
    placements, dead = compute_assignments([snap], SUPS, HeartbeatCache(), 1000, **T)
    slots = set(placements["t"].values())
    assert len(slots) == 3
    assert {n for n, _ in slots} == {"a", "b", "c"}
    per_slot = sorted(list(placements["t"].values()).count(s) for s in slots)
    assert per_slot == [2, 2, 2]
    assert dead == {"t": set()}


def _running(now):
    snap = TopologyDetails("t", EXECS, 2, {}, {})
    placements, _ = compute_assignments([snap], {"a": [1, 2], "b": [1, 2]}, HeartbeatCache(), now, **T)
    p = placements["t"]
    starts = start_times_for(p, {}, {}, now)
    return p, starts


def test_alive_placements_are_kept():
    p, starts = _running(1000)
    cache = HeartbeatCache()
    for ex in p:
        cache.update("t", ex, 1200, 1200)
    snap = TopologyDetails("t", EXECS, 2, p, starts)
    again, _ = compute_assignments([snap], {"a": [1, 2], "b": [1, 2]}, cache, 1210, **T)
    assert again["t"] == p


def test_dead_executors_move_after_timeout_not_before():
    p, starts = _running(1000)
    sups = {"a": [1, 2], "b": [1, 2]}
    cache = HeartbeatCache()
    dead_slot = next(iter(p.values()))
    for ex, slot in p.items():
        cache.update("t", ex, 1150, 1150)
    # the executors of one slot stop heartbeating at t=1150; the others keep going
    for ex, slot in p.items():
        if slot != dead_slot:
            cache.update("t", ex, 1175, 1175)
            cache.update("t", ex, 1190, 1190)
    snap = TopologyDetails("t", EXECS, 2, p, starts)
    early, dead = compute_assignments([snap], sups, cache, 1170, **T)  # 20 s of silence < 30 s timeout
    assert early["t"] == p and dead["t"] == set()
    late, dead = compute_assignments([snap], sups, cache, 1185, **T)  # 35 s of silence
    moved = {ex for ex in p if p[ex] == dead_slot}
    assert dead["t"] == moved
    assert all(late["t"][ex] != dead_slot for ex in moved)  # the dead slot is not reused this round
    assert all(late["t"][ex] == p[ex] for ex in p if ex not in moved)


def test_stale_heartbeat_time_does_not_count_as_alive():
    """A zombie that keeps writing the same time_secs is dead by nimbus's own clock."""
    p, starts = _running(1000)
    cache = HeartbeatCache()
    for now in (1130, 1140, 1150, 1170):
        for ex in p:
            cache.update("t", ex, 1130, now)  # time_secs never changes
    snap = TopologyDetails("t", EXECS, 2, p, starts)
    _, dead = compute_assignments([snap], {"a": [1, 2], "b": [1, 2]}, cache, 1170, **T)
    assert dead["t"] == set(p)


def test_new_executors_get_launch_grace():
    p, starts = _running(1000)
    snap = TopologyDetails("t", EXECS, 2, p, starts)
    same, dead = compute_assignments([snap], {"a": [1, 2], "b": [1, 2]}, HeartbeatCache(), 1100, **T)
    assert same["t"] == p and dead["t"] == set()
    _, dead = compute_assignments([snap], {"a": [1, 2], "b": [1, 2]}, HeartbeatCache(), 1121, **T)
    assert dead["t"] == set(p)


def test_vanished_supervisor_work_moves_to_others():
    snap0 = TopologyDetails("t", EXECS, 2, {}, {})
    sups = {"a": [1], "b": [1], "c": [1]}
    p, _ = compute_assignments([snap0], sups, HeartbeatCache(), 1000, **T)
    p = p["t"]
    starts = start_times_for(p, {}, {}, 1000)
    gone = next(iter(p.values()))[0]
    left = {k: v for k, v in sups.items() if k != gone}
    snap = TopologyDetails("t", EXECS, 2, p, starts)
    after, dead = compute_assignments([snap], left, HeartbeatCache(), 1001, **T)
    assert all(node != gone for node, _ in after["t"].values())
    assert len(set(after["t"].values())) == 2
    assert dead["t"] == {ex for ex, (n, _) in p.items() if n == gone}


def test_all_supervisors_gone_means_empty_assignment():
    p, starts = _running(1000)
    snap = TopologyDetails("t", EXECS, 2, p, starts)
    after, _ = compute_assignments([snap], {}, HeartbeatCache(), 1001, **T)
    assert after["t"] == {}


def test_two_topologies_never_share_a_slot():
    sups = {"a": [1, 2], "b": [1, 2]}
    snaps = [TopologyDetails("t1", EXECS, 2, {}, {}), TopologyDetails("t2", [(1, 2), (3, 4)], 2, {}, {})]
    p, _ = compute_assignments(snaps, sups, HeartbeatCache(), 1000, **T)
    assert not set(p["t1"].values()) & set(p["t2"].values())
    assert len(set(p["t1"].values())) == 2 and len(set(p["t2"].values())) == 2


def test_more_workers_than_slots_then_slots_added():
    snap = TopologyDetails("t", EXECS, 4, {}, {})
    p, _ = compute_assignments([snap], {"a": [1]}, HeartbeatCache(), 1000, **T)
    assert set(p["t"].values()) == {("a", 1)}
    starts = start_times_for(p["t"], {}, {}, 1000)
    snap = TopologyDetails("t", EXECS, 4, p["t"], starts)
    p2, _ = compute_assignments([snap], {"a": [1], "b": [1, 2], "c": [1]}, HeartbeatCache(), 1001, **T)
    assert len(set(p2["t"].values())) == 4


def test_rebalance_scratch_replans_from_scratch():
    p, starts = _running(1000)
    snap = TopologyDetails("t", EXECS, 1, p, starts, scratch=True)
    after, _ = compute_assignments([snap], {"a": [1, 2], "b": [1, 2]}, HeartbeatCache(), 1001, **T)
    assert len(set(after["t"].values())) == 1


def test_bad_slots_and_start_times():
    alive = {("a", 1): [(1, 1), (2, 2), (3, 3)], ("b", 1): [(4, 4)]}
    assert bad_slots(alive, 4, 2) == {("a", 1), ("b", 1)}  # ideal is 2+2
    assert bad_slots({("a", 1): [(1, 1), (2, 2)], ("b", 1): [(3, 3), (4, 4)]}, 4, 2) == set()
    old = {(1, 1): ("a", 1), (2, 2): ("a", 1), (3, 3): ("b", 1)}
    new = {(1, 1): ("a", 1), (2, 2): ("a", 1), (3, 3): ("c", 1)}
    st = start_times_for(new, old, {(1, 1): 5, (2, 2): 5, (3, 3): 5}, 99)
    assert st == {(1, 1): 5, (2, 2): 5, (3, 3): 99}


def test_schedule_topology_places_everything_round_robin():
    placements = schedule_topology(EXECS, 3, {}, [("a", 1), ("b", 1), ("c", 1), ("a", 2)], {("a", 1)})
    assert set(placements) == set(EXECS)
    assert len(set(placements.values())) == 3


def test_vanished_supervisor_with_heartbeating_workers_keeps_them():
    """A supervisor restarting on its own: its node is gone for a moment, its workers still beat."""
    snap0 = TopologyDetails("t", EXECS, 2, {}, {})
    sups = {"a": [1], "b": [1]}
    p, _ = compute_assignments([snap0], sups, HeartbeatCache(), 1000, **T)
    p = p["t"]
    starts = start_times_for(p, {}, {}, 1000)
    cache = HeartbeatCache()
    for ex in p:
        cache.update("t", ex, 1198, 1198)
    snap = TopologyDetails("t", EXECS, 2, p, starts)
    kept, dead = compute_assignments([snap], {"b": [1]}, cache, 1200, **T, orphan_grace_secs=9)
    assert kept["t"] == p and dead["t"] == set()
    # once its heartbeats stop for longer than the grace, the work moves
    moved, dead = compute_assignments([snap], {"b": [1]}, cache, 1210, **T, orphan_grace_secs=9)
    assert all(node == "b" for node, _ in moved["t"].values())
    assert dead["t"] == {ex for ex, (n, _) in p.items() if n == "a"}
