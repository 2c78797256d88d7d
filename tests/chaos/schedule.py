"""Which faults a run injects, in what order and with what parameters (pure: no I/O, no clock).

* :func:`bounded_plan`: every fault kind exactly once, in a fixed order, each after the cluster is
  healthy again. The partition goes first, while the namespaced node surely hosts executors; the
  slow bolt goes last, so convergence includes draining the backlog it built up.
* :func:`soak_step`: the next random fault of a soak, from a seeded :class:`random.Random` — the same
  seed gives the same sequence of kinds and parameters (targets are drawn from the same generator
  at run time, so they repeat when the cluster's state does). A soak keeps drawing steps until its
  duration is used up; some steps do not wait for the cluster to be healthy, so faults land on a
  cluster that is still recovering from the previous one.
"""

from __future__ import annotations

import random
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


@dataclass(frozen=True)
class Step:
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    gap_secs: float = 3.0  # pause before the fault (after the cluster is healthy, when waited for)
    wait_healthy: bool = True


def bounded_plan() -> list[Step]:
    params: dict[str, dict[str, Any]] = {
        "partition": {"hold_secs": 20.0},
        "worker_kill": {"count": 1},
        "supervisor_session_expiry": {"index": 0},
        "worker_session_expiry": {},
        "nimbus_leader_kill": {"down_secs": 8.0},
        "zk_restart": {"down_secs": 3.0},
        "supervisor_kill": {"index": 1, "down_secs": 20.0},
        "slow_bolt": {"hold_secs": 15.0, "delay_secs": 1.0},
    }
    return [Step(kind, params[kind]) for kind in KINDS]


def soak_step(rng: random.Random) -> Step:
    kind = rng.choice(KINDS)
    r = lambda lo, hi: round(rng.uniform(lo, hi), 1)  # noqa: E731
    params: dict[str, Any] = {
        "partition": lambda: {"hold_secs": r(8, 40)},
        "worker_kill": lambda: {"count": rng.choice((1, 1, 2))},
        "supervisor_session_expiry": lambda: {},
        "worker_session_expiry": lambda: {},
        "nimbus_leader_kill": lambda: {"down_secs": r(3, 30)},
        "zk_restart": lambda: {"down_secs": r(1, 10)},
        "supervisor_kill": lambda: {"down_secs": r(8, 40)},
        "slow_bolt": lambda: {"hold_secs": r(10, 30), "delay_secs": r(0.5, 2.0)},
    }[kind]()
    return Step(kind, params, gap_secs=r(2, 20), wait_healthy=rng.random() < 0.6)
