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


class AlignedBarrier:
    """Barrier alignment for exactly-once checkpoints (Chandy–Lamport / Flink), pure — the next step
    of docs/state.md "Not yet"; not wired into the runtime yet.

    Barriers flow in-band on every input channel (an upstream task). When barrier ``n`` arrives on a
    channel, that channel is *blocked*: its later tuples belong to checkpoint ``n+1`` and are held
    until barrier ``n`` has arrived on every channel; then the task snapshots (``n`` is complete),
    and the held tuples are released in arrival order. ``offer`` says what to do with each arrival.
    """

    def __init__(self, channels: set[int] | frozenset[int]):
        if not channels:
            raise ValueError("a task aligning barriers has at least one input channel")
        self.channels = frozenset(channels)
        self.current: int | None = None  # the barrier being aligned
        self.arrived: set[int] = set()
        self.held: list[tuple[int, Any]] = []  # (channel, tuple) behind a barrier, in arrival order
        self.last_complete: int | None = None

    def blocked(self, channel: int) -> bool:
        return channel in self.arrived

    def offer_tuple(self, channel: int, tup: Any) -> bool:
        """A data tuple arrived: True to process it now, False when it is held (its channel is past
        the barrier being aligned)."""
        if channel in self.arrived:
            self.held.append((channel, tup))
            return False
        return True

    def offer_barrier(self, channel: int, txid: int) -> tuple[bool, list[Any]]:
        """Barrier ``txid`` arrived on ``channel``. Returns ``(complete, released)``: ``complete``
        when it has now arrived on every channel (snapshot checkpoint ``txid`` before processing the
        released tuples, which are the held ones in arrival order)."""
        if channel not in self.channels:
            raise ValueError(f"barrier from unknown channel {channel}")
        if self.last_complete is not None and txid <= self.last_complete:
            raise ValueError(f"barrier {txid} on channel {channel} after checkpoint {self.last_complete} completed")
        if self.current is None:
            self.current = txid
        elif txid != self.current:
            raise ValueError(f"barrier {txid} on channel {channel} while aligning {self.current}: one checkpoint "
                             "at a time (a channel delivers barriers in order)")
        if channel in self.arrived:
            raise ValueError(f"barrier {txid} twice on channel {channel}")
        self.arrived.add(channel)
        if self.arrived != self.channels:
            return False, []
        released = [t for _, t in self.held]
        self.held = []
        self.arrived = set()
        self.last_complete, self.current = txid, None
        return True, released

    def reset(self) -> list[Any]:
        """A rollback: forget the alignment in progress; the held tuples are returned (dropped by
        the caller: they belong to the generation being rolled back)."""
        dropped = [t for _, t in self.held]
        self.held, self.arrived, self.current = [], set(), None
        return dropped
