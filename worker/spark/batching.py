"""The micro-batch policy of a Spark stage: when a batch is due, how much it may hold.

Pure: no threads, no clock of its own (callers pass ``now`` in seconds, monotonic). A batch is
due when it holds ``size`` rows, or when its oldest tuple has waited ``millis``. A tuple is one
row, except a batch tuple (a batch stream's Arrow batch), which weighs its row count; a batcher
of plain tuples never holds more than ``size``, one of batch tuples closes once it reaches
``size`` (tuples are never split, so the last one may take it past). The executor stops draining
its input queue when the batcher is full, so the queue grows and the runtime's backpressure
pauses the spouts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gale.config import as_config
from gale.config_keys import Config


@dataclass(frozen=True)
class BatchPolicy:
    size: int  # topology.spark.batch.size
    millis: float  # topology.spark.batch.millis

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.size}")
        if self.millis <= 0:
            raise ValueError(f"batch millis must be > 0, got {self.millis}")

    @classmethod
    def from_conf(cls, conf: Config | Mapping[str, Any]) -> BatchPolicy:
        config = as_config(conf, "topology configuration")
        return cls(config.topology_spark_batch_size, float(config.topology_spark_batch_millis))


class Batcher:
    """Accumulates the tuples of the next batch."""

    __slots__ = ("policy", "items", "first_at", "rows")

    def __init__(self, policy: BatchPolicy):
        self.policy = policy
        self.items: list[Any] = []
        self.first_at: float | None = None
        self.rows = 0  # rows held: len(items) unless batch tuples were added

    def __len__(self) -> int:
        return len(self.items)

    def room(self) -> int:
        """How many more rows fit before the batch is full."""
        return self.policy.size - self.rows

    def add(self, item: Any, now: float, rows: int = 1) -> None:
        """Add one tuple weighing ``rows`` (a batch tuple's row count); it may take the batch past
        its size (a batch tuple is never split), but a full batch takes nothing more."""
        if self.rows >= self.policy.size:
            raise OverflowError("batch is full")
        if not self.items:
            self.first_at = now
        self.items.append(item)
        self.rows += rows

    def extend(self, items: list[Any], now: float) -> None:
        """Add several tuples at once (``now`` is when they arrived)."""
        if self.rows + len(items) > self.policy.size:
            raise OverflowError(f"batch is full: {self.rows} + {len(items)} > {self.policy.size}")
        if items and not self.items:
            self.first_at = now
        self.items.extend(items)
        self.rows += len(items)

    def age(self, now: float) -> float:
        """Seconds the oldest held tuple has waited (0 when empty)."""
        return 0.0 if self.first_at is None else max(0.0, now - self.first_at)

    def due(self, now: float) -> bool:
        if not self.items:
            return False
        return self.rows >= self.policy.size or self.age(now) * 1000.0 >= self.policy.millis

    def next_due_at(self) -> float | None:
        """When the held tuples become due by age (``None`` when empty)."""
        return None if self.first_at is None else self.first_at + self.policy.millis / 1000.0

    def discard(self, drop: Callable[[Any], bool], weight: Callable[[Any], int]) -> list[Any]:
        """Remove the held tuples ``drop`` says to, keeping the others in order; ``weight(item)`` is a
        tuple's row count. Returns the removed ones."""
        kept = [t for t in self.items if not drop(t)]
        if len(kept) == len(self.items):
            return []
        dropped = [t for t in self.items if drop(t)]
        self.items = kept
        self.rows = sum(weight(t) for t in kept)
        if not kept:
            self.first_at = None
        return dropped

    def take(self) -> list[Any]:
        items, self.items, self.first_at, self.rows = self.items, [], None, 0
        return items
