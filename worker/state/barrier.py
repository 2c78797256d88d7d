"""A task's side of the checkpoint protocol, pure: barrier counting and deferred acks.

:class:`CheckpointBarrier` (Storm's ``CheckpointTupleForwarder.shouldProcessTransaction``): a task
acts on ``(txid, action)`` only once it has arrived from every task that sends it checkpoints; the
earlier arrivals are acked at once, the last one is the anchor of the forwarded checkpoint, so the
checkpoint's tuple tree completes only when every task downstream has acted. Checkpoints older than
the last one acted on are stale (acked, ignored); after ROLLBACK(n) the last one is ``n - 1``.

:class:`HeldAcks` (Storm's ``StatefulBoltExecutor``): a stateful task's input acks are held.
``pending`` — acked by the bolt since the last PREPARE; PREPARE moves them to ``prepared``; COMMIT
releases ``prepared`` to the acker; ROLLBACK fails both (their effects left the state with the
rollback, so their spout tuples replay).
"""

from __future__ import annotations

from collections.abc import Iterable

from gale.worker.state.coordinator import ROLLBACK

PROCESS = "process"  # the last arrival: act on it, forward it anchored to this tuple, ack it
WAIT = "wait"  # not yet arrived from every input: ack this tuple, nothing else
STALE = "stale"  # older than the last checkpoint acted on: ack, ignore


class CheckpointBarrier:
    def __init__(self, input_tasks: int):
        if input_tasks < 1:
            raise ValueError("a task taking part in checkpoints has at least one checkpoint input task")
        self.input_tasks = input_tasks
        self.counts: dict[tuple[int, str, int], int] = {}
        self.last_txid: int | None = None

    def arrive(self, txid: int, action: str, generation: int = 0) -> str:
        """``generation`` (exactly-once): copies of one action of one checkpoint are counted apart by
        generation — a late copy of an older generation's ROLLBACK (the same txid) must not complete
        a newer one's."""
        key = (txid, action, generation)
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


class HeldAcks:
    """A stateful task's held acks, as the acker's arithmetic: root → the XOR of the ack values of
    that tree's inputs the task acked (the collector XORs into :attr:`pending` directly, so a tree
    whose inputs this task acked several times in one checkpoint interval is one entry). PREPARE
    moves :attr:`pending` into :attr:`prepared` — except the trees of the checkpoint itself
    (``release``: its roots), which are given back at once: a tuple anchored to a checkpoint (the
    outputs of a persistent window, held until that checkpoint's PREPARE) is in the PREPARE's own
    tree, which must complete for the checkpoint to commit, so its ack cannot wait for the commit
    (the state holding its effect is prepared by then, and a failed PREPARE rolls both sides back).
    COMMIT gives back :attr:`prepared`; ROLLBACK gives the roots of both to fail (their effects left
    the state with the rollback, so their spout tuples replay)."""

    def __init__(self) -> None:
        self.pending: dict[int, int] = {}
        self.prepared: dict[int, int] = {}

    def acked(self, root: int, value: int) -> None:
        self.pending[root] = self.pending.get(root, 0) ^ value

    def prepare(self, release: Iterable[int] = ()) -> list[tuple[int, int]]:
        """Move the pending acks into the checkpoint being prepared; returns the acks of the
        ``release`` roots, to send now. :attr:`pending` is a new dict afterwards (the caller hands
        it to whoever fills it): the usual case — nothing prepared and not committed — is a swap."""
        pending, prepared = self.pending, self.prepared
        now = []
        for root in release:
            value = pending.pop(root, 0) ^ prepared.pop(root, 0)
            if value:
                now.append((root, value))
        if not prepared:
            self.prepared = pending
        else:
            for root, value in pending.items():
                prepared[root] = prepared.get(root, 0) ^ value
        self.pending = {}
        return now

    def commit(self) -> dict[int, int]:
        """The acks to really send now (root → value; the dict is the caller's from now on)."""
        out, self.prepared = self.prepared, {}
        return out

    def rollback(self) -> list[int]:
        """The roots to fail now."""
        roots = sorted(set(self.pending) | set(self.prepared))
        self.pending.clear()
        self.prepared.clear()
        return roots

    def __len__(self) -> int:
        return len(self.pending) + len(self.prepared)
