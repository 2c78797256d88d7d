"""Which faults a run injects, in what order and with what parameters (pure: no I/O, no clock).

* :func:`bounded_plan`: every fault kind exactly once, in a fixed order, each after the cluster is
  healthy again. :func:`bounded_ensemble_plan`: the ZooKeeper ensemble's faults (leader, follower,
  whole ensemble) once each, for a cluster on three ZooKeeper servers. :func:`bounded_eo_plan`: the
  exactly-once workload's faults (:data:`EO_KINDS`) once each, the worker kill twice (the counting
  worker, a Kafka spout's, the checkpoint spout's) and Redis's twice (mid-prepare, mid-commit).
  :func:`bounded_pg_plan`: the PostgreSQL workload's (:data:`PG_KINDS`), with the sink's worker
  killed mid-prepare and mid-commit and PostgreSQL killed mid-commit. The partition goes first, while the namespaced node surely hosts executors; the
  slow bolt goes last, so convergence includes draining the backlog it built up.
* :func:`soak_steps`: the random faults of a soak, from a seeded :class:`random.Random` — the same
  seed gives the same sequence of kinds and parameters (each fault's targets come from a generator
  seeded from it too, so they repeat when the cluster's state does). Kinds are dealt from shuffled
  "bags" holding every kind once, so every kind comes up once per ``len(KINDS)`` faults. A soak
  keeps drawing steps until its duration is used up. Some steps do not wait for the cluster to be
  healthy (they land on a cluster still recovering from the previous fault) and some *overlap* the
  fault still running, when the two touch disjoint parts of the cluster (:data:`RESOURCES`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

KINDS = (
    "partition",
    "worker_kill",
    "supervisor_session_expiry",
    "worker_session_expiry",
    "nimbus_leader_kill",
    "zk_restart",
    "supervisor_kill",
    "slow_bolt",
)

#: faults of a ZooKeeper ensemble (a run with zookeepers > 1 deals these instead of zk_restart)
ENSEMBLE_KINDS = ("zk_leader_kill", "zk_follower_kill", "zk_ensemble_restart")


#: faults of the exactly-once workload (Kafka → keyed count, state in Redis): the process faults and
#: Redis's own kill -9 (no partition, session expiry or slow bolt: those test the acker's timeouts)
EO_KINDS = ("worker_kill", "supervisor_kill", "nimbus_leader_kill", "zk_restart", "redis_kill")
#: faults of the PostgreSQL workload (Kafka → keyed count → PostgreSQL sink): the exactly-once ones and
#: PostgreSQL's own kill -9
PG_KINDS = EO_KINDS + ("postgres_kill",)


def kinds_for(zookeepers: int) -> tuple[str, ...]:
    """The fault kinds of a run on ``zookeepers`` ZooKeeper servers."""
    if zookeepers <= 1:
        return KINDS
    return tuple(k for k in KINDS if k != "zk_restart") + ENSEMBLE_KINDS


#: what each fault holds while it runs; two faults overlap only if they share nothing (a worker
#: frozen by one must not be killed by another, a ZooKeeper restart would hide a session expiry, ...)
RESOURCES: dict[str, frozenset[str]] = {
    "partition": frozenset({"supervisors", "workers"}),
    "worker_kill": frozenset({"workers"}),
    "supervisor_session_expiry": frozenset({"supervisors", "zookeeper"}),
    "worker_session_expiry": frozenset({"workers", "zookeeper"}),
    "nimbus_leader_kill": frozenset({"nimbus"}),
    "zk_restart": frozenset({"zookeeper", "supervisors"}),
    "supervisor_kill": frozenset({"supervisors", "workers"}),
    "slow_bolt": frozenset({"bolt"}),
    "zk_leader_kill": frozenset({"zookeeper"}),
    "zk_follower_kill": frozenset({"zookeeper"}),
    "zk_ensemble_restart": frozenset({"zookeeper", "supervisors"}),
    "redis_kill": frozenset({"redis"}),
    "postgres_kill": frozenset({"postgres"}),
}
MAX_CONCURRENT = 2


@dataclass(frozen=True)
class Step:
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    #: pause before the fault (after the cluster is healthy, when waited for); a bounded run ends it
    #: early, once the workload made progress since the cluster was healthy
    gap_secs: float = 3.0
    wait_healthy: bool = True  # wait until the cluster is healthy first (only when no fault is running)
    overlap: bool = False  # start while the previous fault still runs, if their resources are disjoint
    seed: int = 0  # of the fault's own generator (its targets)


#: a slow bolt must last two message timeouts and more: the spout expires a pending tuple between
#: 1x and 2x topology.message.timeout.secs after its emit (two rotating buckets, as in Storm), so a
#: shorter slowdown may end before any pending tuple expires
SLOW_MIN_SECS = 25.0


def bounded_plan() -> list[Step]:
    params: dict[str, dict[str, Any]] = {
        # the partition and the supervisor kill hold at least until the node's work moved (the injector
        # waits for that, up to nimbus.task.timeout.secs + 20 s): 6-7 s on a quiet host; the minimum is
        # the soak's shortest
        "partition": {"hold_secs": 8.0},
        "worker_kill": {"count": 1},
        "supervisor_session_expiry": {"index": 0},
        "worker_session_expiry": {},
        "nimbus_leader_kill": {"down_secs": 8.0},
        "zk_restart": {"down_secs": 3.0},
        "supervisor_kill": {"index": 1, "down_secs": 8.0},
        "slow_bolt": {"hold_secs": 25.0, "delay_secs": 1.0},
    }
    return [Step(kind, params[kind], seed=n) for n, kind in enumerate(KINDS)]


def bounded_ensemble_plan() -> list[Step]:
    """The ensemble's faults once each: a follower first (the quorum holds), then the leader
    (an election), then every member at once."""
    params: dict[str, dict[str, Any]] = {
        "zk_follower_kill": {"down_secs": 8.0},
        "zk_leader_kill": {"down_secs": 8.0},
        "zk_ensemble_restart": {"down_secs": 3.0},
    }
    return [Step(kind, params[kind], seed=100 + n) for n, kind in enumerate(params)]


def bounded_eo_plan() -> list[Step]:
    """Each exactly-once fault once: kill -9 of the worker counting, of a worker reading Kafka, of
    the worker with the checkpoint spout (it drives the epochs); Redis killed while the stateful
    tasks stage a checkpoint and while they commit one; a supervisor with its workers, the leader
    nimbus, ZooKeeper."""
    steps = [
        ("worker_kill", {"count": 1, "component": "count"}),
        ("worker_kill", {"count": 1, "component": "kafka"}),
        ("worker_kill", {"count": 1, "component": "$checkpointspout"}),
        ("redis_kill", {"down_secs": 5.0, "phase": "PREPARING"}),
        ("redis_kill", {"down_secs": 5.0, "phase": "COMMITTING"}),
        ("supervisor_kill", {"index": 1, "down_secs": 8.0}),
        ("nimbus_leader_kill", {"down_secs": 5.0}),
        ("zk_restart", {"down_secs": 3.0}),
    ]
    return [Step(kind, params, seed=200 + n) for n, (kind, params) in enumerate(steps)]


def bounded_pg_plan() -> list[Step]:
    """The PostgreSQL workload's faults, as many as :func:`bounded_eo_plan` has: kill -9 of the sink's
    worker while the checkpoint is PREPARING (the sink prepares its transaction) and while it is
    COMMITTING (the sink commits it), PostgreSQL killed while COMMITTING, the counting worker,
    Redis (the checkpoint record) mid-commit, a supervisor, the leader nimbus, ZooKeeper."""
    steps = [
        ("worker_kill", {"count": 1, "component": "pg", "phase": "PREPARING"}),
        ("worker_kill", {"count": 1, "component": "pg", "phase": "COMMITTING"}),
        ("postgres_kill", {"down_secs": 5.0, "phase": "COMMITTING"}),
        ("worker_kill", {"count": 1, "component": "count"}),
        ("redis_kill", {"down_secs": 5.0, "phase": "COMMITTING"}),
        ("supervisor_kill", {"index": 1, "down_secs": 8.0}),
        ("nimbus_leader_kill", {"down_secs": 5.0}),
        ("zk_restart", {"down_secs": 3.0}),
    ]
    return [Step(kind, params, seed=300 + n) for n, (kind, params) in enumerate(steps)]


def soak_steps(rng: random.Random, kinds: tuple[str, ...] = KINDS) -> Iterator[Step]:
    """Endless random steps; the same ``rng`` state gives the same steps."""
    while True:
        bag = list(kinds)
        rng.shuffle(bag)
        for kind in bag:
            yield soak_step(rng, kind)


def soak_step(rng: random.Random, kind: str) -> Step:
    r = lambda lo, hi: round(rng.uniform(lo, hi), 1)  # noqa: E731
    params: dict[str, Any] = {
        "partition": lambda: {"hold_secs": r(8, 40)},
        "worker_kill": lambda: {"count": rng.choice((1, 1, 2))},
        "supervisor_session_expiry": lambda: {},
        "worker_session_expiry": lambda: {},
        "nimbus_leader_kill": lambda: {"down_secs": r(3, 30)},
        "zk_restart": lambda: {"down_secs": r(1, 10)},
        "supervisor_kill": lambda: {"down_secs": r(8, 40)},
        "slow_bolt": lambda: {"hold_secs": r(25, 45), "delay_secs": r(0.5, 2.0)},
        "zk_leader_kill": lambda: {"down_secs": r(3, 30)},
        "zk_follower_kill": lambda: {"down_secs": r(3, 30)},
        "zk_ensemble_restart": lambda: {"down_secs": r(1, 10)},
        "redis_kill": lambda: {"down_secs": r(1, 20), "phase": rng.choice((None, "PREPARING", "COMMITTING"))},
        "postgres_kill": lambda: {"down_secs": r(1, 20), "phase": rng.choice((None, "PREPARING", "COMMITTING"))},
    }[kind]()
    return Step(kind, params, gap_secs=r(2, 20), wait_healthy=rng.random() < 0.6, overlap=rng.random() < 0.3,
                seed=rng.randrange(2**32))


def conflicts(kind: str, running: list[str]) -> bool:
    """True if ``kind`` may not start while the faults ``running`` run."""
    return len(running) >= MAX_CONCURRENT or any(RESOURCES[kind] & RESOURCES[k] for k in running)
