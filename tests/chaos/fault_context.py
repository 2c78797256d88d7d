"""What a fault injector is given and what it fills (see :mod:`tests.chaos.faults`).

:class:`FaultRecord` is the account of one fault; :class:`Context` the cluster, the fault's own
random generator and the run's clock; :func:`wait_until` the polling every injector waits with.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tests.chaos.cluster import ChaosCluster, Stopping


@dataclass
class FaultRecord:
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    target: str = ""
    start: float = 0.0
    healed: float | None = None
    end: float | None = None
    injected: bool = False
    evidence: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    settle_secs: float | None = None  # how long the cluster took to be healthy before this fault
    healthy_before: bool | None = None
    overlapped: list[str] = field(default_factory=list)  # faults still running when this one started
    max_stall_secs: float | None = None  # longest time without a new id in the sink, start → end
    resumed_secs: float | None = None  # heal → first new id in the sink

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Context:
    def __init__(self, cluster: ChaosCluster, rng: random.Random, t0: float):
        self.c = cluster
        self.rng = rng
        self.t0 = t0

    def wait(self, predicate: Callable[[], Any], timeout: float, interval: float = 0.25) -> tuple[Any, float]:
        return wait_until(predicate, timeout, interval, stop=self.c.closing)

    def sleep(self, secs: float) -> None:
        if secs > 0 and self.c.closing.wait(secs):
            raise Stopping("the run is stopping")

    def for_fault(self, seed: int) -> Context:
        """The same cluster and clock, with the fault's own generator (faults may run concurrently)."""
        return Context(self.c, random.Random(seed), self.t0)

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 2)


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.25,
               stop: threading.Event | None = None) -> tuple[Any, float]:
    """(first truthy value, seconds waited) or (None, timeout). Exceptions count as falsy; raises
    :class:`Stopping` once ``stop`` is set."""
    t0 = time.monotonic()
    while True:
        if stop is not None and stop.is_set():
            raise Stopping("the run is stopping")
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - e.g. ZooKeeper down while it restarts
            value = None
        if value:
            return value, round(time.monotonic() - t0, 2)
        if time.monotonic() - t0 >= timeout:
            return None, round(time.monotonic() - t0, 2)
        time.sleep(interval)


def safe(fn: Callable[[], Any], default: Any = None) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return default
