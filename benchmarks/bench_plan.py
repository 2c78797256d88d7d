"""Scheduling-round planning alone: :func:`gale.nimbus.plan.plan_round` at scale, no I/O.

Run: ``.venv/bin/python -m benchmarks.bench_plan [--sizes 1000:100:100:2000] [--rounds 5] [--profile]``

For each size ``W:S:T[:E]`` (the shapes of ``benchmarks/bench_scale.py``: W workers on S
supervisors with W / (0.9 S) slots each, T topologies, the first with E executors) it plans the
first round (every topology new), then steady rounds in which every executor heartbeats (nothing
changes), then the round after 10% of the supervisors vanished. Prints ``name: value unit`` lines
(milliseconds per round: median of ``--rounds``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
import uuid

from gale.config import defaults
from gale.records import StormBase, SupervisorInfo, SupervisorWorkerHeartbeat, TopologyStatus, encode_executors
from gale.topology.definition import component_parallelism
from gale.nimbus.plan import RoundSnapshot, SchedulingTimeouts, TopologyInputs, plan_round
from gale.nimbus.scheduler import HeartbeatCache
from benchmarks.bench_scale import Size
from benchmarks.scale_topology import scale_topology

NOW = 1_800_000_000.0
CODE = "c" * 64
TIMEOUTS = SchedulingTimeouts(launch_secs=120, timeout_secs=30, orphan_grace_secs=9)


def build(size: Size, executors_per_worker: int = 4):
    conf0 = defaults()
    topologies = {}
    for i, (name, workers, executors) in enumerate(size.plan(executors_per_worker)):
        defn = scale_topology(name, executors, workers).definition
        conf = {**conf0, "topology.workers": workers}
        base = StormBase(name=name, status=TopologyStatus.ACTIVE, num_workers=workers,
                         component_executors=component_parallelism(defn, conf, workers), launch_time_secs=int(NOW))
        tid = f"{name}-{i}-{int(NOW)}"
        topologies[tid] = TopologyInputs(base=base, defn=defn, conf=conf, code_dir=f"/x/{tid}", code_checksum=CODE,
                                         heartbeats={})
    ports = list(range(6700, 6700 + size.slots_per_supervisor()))
    sups = {}
    for _ in range(size.supervisors):
        sid = f"{uuid.uuid4()}-node.example.com"
        sups[sid] = SupervisorInfo(time_secs=int(NOW), hostname="node.example.com", assignment_id=sid, meta=ports)
    return topologies, sups


def snapshot(topologies, sups, assignments, cache, now) -> RoundSnapshot:
    return RoundSnapshot(now=now, topologies=topologies, storm_ids=frozenset(topologies), assignments=assignments,
                         supervisors=sups, cache=cache, timeouts=TIMEOUTS)


def with_beats(assignments, sups, time_secs: int) -> dict[str, SupervisorInfo]:
    """The supervisors, each reporting a heartbeat of every worker the assignments place on it."""
    beats: dict[str, list[SupervisorWorkerHeartbeat]] = {sid: [] for sid in sups}
    for tid, a in assignments.items():
        for w in a.workers:
            if w.node in beats:
                beats[w.node].append(SupervisorWorkerHeartbeat(topology_id=tid, port=w.port, executors=w.executors,
                                                               time_secs=time_secs))
    return {sid: info.model_copy(update={"worker_heartbeats": beats[sid]}) for sid, info in sups.items()}


def timed(fn, rounds: int) -> tuple[float, object]:
    samples, result = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10:10:10,100:10:10,1000:100:100:2000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    for text in args.sizes.split(","):
        size = Size.parse(text)
        topologies, sups = build(size)
        first_ms, plan = timed(lambda: plan_round(snapshot(topologies, sups, {}, HeartbeatCache(), NOW)), args.rounds)
        assignments = {w.topology_id: w.assignment for w in plan.writes}
        cache = plan.cache
        now = NOW + 60
        beating = with_beats(assignments, sups, int(now))
        steady = lambda: plan_round(snapshot(topologies, beating, assignments, cache, now))  # noqa: E731
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(steady)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
        steady_ms, splan = timed(steady, args.rounds)
        assert not splan.writes, f"a steady round wrote {len(splan.writes)} assignments"
        lost = set(list(sups)[: max(1, len(sups) // 10)])
        later = now + 60
        survivors = with_beats(assignments, {k: v for k, v in sups.items() if k not in lost}, int(later))
        loss_ms, lplan = timed(lambda: plan_round(snapshot(topologies, survivors, assignments, splan.cache, later)),
                               args.rounds)
        moved = sum(len(w.moved) for w in lplan.writes)
        print(f"plan_{size.label}_first_round_ms: {first_ms:.1f} ms")
        print(f"plan_{size.label}_steady_round_ms: {steady_ms:.1f} ms")
        print(f"plan_{size.label}_after_10pct_loss_round_ms: {loss_ms:.1f} ms ({moved} executors moved)")


if __name__ == "__main__":
    main()
