"""The micro-batch policy of a Spark stage: when a batch is due, how much it may hold.

Pure: no threads, no clock of its own (callers pass ``now`` in seconds, monotonic). A batch is
due when it holds ``size`` tuples, or when its oldest tuple has waited ``millis``. A batcher
never holds more than ``size`` tuples: the executor stops draining its input queue when the
batcher is full, so the queue grows and the runtime's backpressure pauses the spouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BatchPolicy:
    size: int = 10000
    millis: float = 2000.0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.size}")
        if self.millis <= 0:
            raise ValueError(f"batch millis must be > 0, got {self.millis}")

    @classmethod
    def from_conf(cls, conf: Any) -> BatchPolicy:
        return cls(int(conf.get("topology.spark.batch.size", 10000)),
                   float(conf.get("topology.spark.batch.millis", 2000)))


class Batcher:
    """Accumulates the tuples of the next batch."""

    __slots__ = ("policy", "items", "first_at")

    def __init__(self, policy: BatchPolicy):
        self.policy = policy
        self.items: list[Any] = []
        self.first_at: float | None = None

    def __len__(self) -> int:
        return len(self.items)

    def room(self) -> int:
        """How many more tuples fit before the batch is full."""
        return self.policy.size - len(self.items)

    def add(self, item: Any, now: float) -> None:
        if len(self.items) >= self.policy.size:
            raise OverflowError("batch is full")
        if not self.items:
            self.first_at = now
        self.items.append(item)

    def extend(self, items: list[Any], now: float) -> None:
        """Add several tuples at once (``now`` is when they arrived)."""
        if len(self.items) + len(items) > self.policy.size:
            raise OverflowError(f"batch is full: {len(self.items)} + {len(items)} > {self.policy.size}")
        if items and not self.items:
            self.first_at = now
        self.items.extend(items)

    def age(self, now: float) -> float:
        """Seconds the oldest held tuple has waited (0 when empty)."""
        return 0.0 if self.first_at is None else max(0.0, now - self.first_at)

    def due(self, now: float) -> bool:
        if not self.items:
            return False
        return len(self.items) >= self.policy.size or self.age(now) * 1000.0 >= self.policy.millis

    def next_due_at(self) -> float | None:
        """When the held tuples become due by age (``None`` when empty)."""
        return None if self.first_at is None else self.first_at + self.policy.millis / 1000.0

    def take(self) -> list[Any]:
        items, self.items, self.first_at = self.items, [], None
        return items
