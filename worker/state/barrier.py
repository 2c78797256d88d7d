"""A task's side of the checkpoint protocol, pure: barrier counting and deferred acks.

:class:`CheckpointBarrier` (Storm's ``CheckpointTupleForwarder.shouldProcessTransaction``): a task
acts on ``(txid, action)`` only once it has arrived from every task that sends it checkpoints; the
earlier arrivals are acked at once, the last one is the anchor of the forwarded checkpoint, so the
checkpoint's tuple tree completes only when every task downstream has acted. Checkpoints older than
the last one acted on are stale (acked, ignored); after ROLLBACK(n) the last one is ``n - 1``.

:class:`DeferredAcks` (Storm's ``StatefulBoltExecutor``): a stateful task's input acks are held.
``pending`` — acked by the bolt since the last PREPARE; PREPARE moves them to ``prepared``; COMMIT
releases ``prepared`` to the acker; ROLLBACK fails both (their effects left the state with the
rollback, so their spout tuples replay).
"""

from __future__ import annotations

from typing import Any

from gale.worker.state.coordinator import ROLLBACK

PROCESS = "process"  # the last arrival: act on it, forward it anchored to this tuple, ack it
WAIT = "wait"  # not yet arrived from every input: ack this tuple, nothing else
STALE = "stale"  # older than the last checkpoint acted on: ack, ignore


class CheckpointBarrier:
    def __init__(self, input_tasks: int):
        if input_tasks < 1:
            raise ValueError("a task taking part in checkpoints has at least one checkpoint input task")
        self.input_tasks = input_tasks
        self.counts: dict[tuple[int, str], int] = {}
        self.last_txid: int | None = None

    def arrive(self, txid: int, action: str) -> str:
        key = (txid, action)
        count = self.counts.get(key, 0) + 1
        if count < self.input_tasks:
            self.counts[key] = count
            return WAIT
        self.counts.pop(key, None)
        if self.last_txid is not None and txid < self.last_txid:
            return STALE
        self.last_txid = txid - 1 if action == ROLLBACK else txid
        # arrivals of older checkpoints that never completed (an input task died) will not now
        for k in [k for k in self.counts if k[0] < self.last_txid]:
            del self.counts[k]
        return PROCESS


class DeferredAcks:
    """Held acks as opaque items (the runtime holds ``root, value`` int pairs, see
    ``executor.DeferringCollector``); ``pending`` may be appended to directly."""

    def __init__(self) -> None:
        self.pending: list[Any] = []
        self.prepared: list[Any] = []

    def acked(self, tup: Any) -> None:
        self.pending.append(tup)

    def prepare(self) -> None:
        self.prepared.extend(self.pending)
        self.pending = []

    def commit(self) -> list[Any]:
        """The tuples to really ack now."""
        out, self.prepared = self.prepared, []
        return out

    def rollback(self) -> list[Any]:
        """The tuples to fail now."""
        out = self.prepared + self.pending
        self.prepared, self.pending = [], []
        return out

    def __len__(self) -> int:
        return len(self.pending) + len(self.prepared)
