"""Per-partition offset bookkeeping of the Kafka spout: what to emit, what to retry, what to commit.

Pure logic, no I/O and no clock of its own (``now`` is passed in), so it is tested exhaustively.

The rules are storm-kafka's (``docs/storm-model.md`` §10):

* The committed offset — the value written to ``/consumers/<group>/offsets/<topic>/<partition>`` —
  is the **resume point**: the lowest offset that is not yet acked. Every offset emitted and still
  in flight, and every failed offset waiting for its retry, pins it. With nothing pending it is the
  next offset never emitted. A restart from the committed offset therefore never skips a record
  that was not fully processed (at-least-once); it may replay records acked after the last commit.
* A failed offset is re-emitted *from its offset*: once its backoff has passed, the spout seeks the
  consumer back to it and re-reads the partition from there, re-emitting the due failed offsets and
  skipping everything else it already emitted (:meth:`OffsetTracker.on_record` decides).
* With a retry limit (off by default), an offset that failed more often than allowed is dropped:
  it counts as done for the commit, and :attr:`OffsetTracker.dropped` counts it.
* An offset outside the broker's range (below the log start, or past the high watermark) is reset
  by policy: ``earliest`` → the log start, ``latest`` → the high watermark (:func:`plan_starts`
  for a new assignment, :meth:`OffsetTracker.reset` for a partition being read).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: :meth:`OffsetTracker.on_record` verdicts
EMIT_NEW = "new"
EMIT_RETRY = "retry"
SKIP = "skip"

#: :meth:`OffsetTracker.fail` verdicts
RETRY = "retry"
DROP = "drop"
UNKNOWN = "unknown"

EARLIEST = "earliest"
LATEST = "latest"
RESET_POLICIES = (EARLIEST, LATEST)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff for failed offsets (storm-kafka's ExponentialBackoffMsgRetryManager).

    ``limit`` is how many times one offset may be retried; ``-1`` (the default) retries forever,
    ``0`` never retries (a failed offset is dropped at once).
    """

    initial_delay: float = 0.1
    multiplier: float = 2.0
    max_delay: float = 10.0
    limit: int = -1

    def delay(self, failures: int) -> float:
        """Seconds to wait before the retry that follows failure number ``failures`` (1-based)."""
        if failures <= 1 or self.multiplier == 1.0:
            return min(self.initial_delay, self.max_delay)
        exponent = min(failures - 1, 1000)
        try:
            value = self.initial_delay * self.multiplier ** exponent
        except OverflowError:
            return self.max_delay
        return min(value, self.max_delay)

    def allows(self, failures: int) -> bool:
        """May an offset that has failed ``failures`` times be retried again?"""
        return self.limit < 0 or failures <= self.limit


class OffsetTracker:
    """Emit/ack/fail/commit state of one partition owned by one spout task.

    ``emit_position`` is the lowest offset never emitted (every lower offset was emitted at least
    once, or does not exist in the log); ``fetch_position`` is the offset the spout expects next
    from the consumer (below ``emit_position`` while re-reading for a retry).
    """

    __slots__ = ("policy", "emit_position", "fetch_position", "inflight", "failed", "failures",
                 "dropped", "lost", "retried")

    def __init__(self, start: int, policy: RetryPolicy | None = None):
        if start < 0:
            raise ValueError(f"start offset must be >= 0, got {start}")
        self.policy = policy or RetryPolicy()
        self.emit_position = start
        self.fetch_position = start
        #: emitted, waiting for ack or fail
        self.inflight: set[int] = set()
        #: failed, waiting to be re-emitted: offset → monotonic time when it is due
        self.failed: dict[int, float] = {}
        #: offset → how often it has failed (until it is acked or dropped)
        self.failures: dict[int, int] = {}
        self.dropped = 0  # offsets given up after the retry limit
        self.lost = 0  # failed offsets that could not be re-read (gone from the log)
        self.retried = 0  # re-emits of failed offsets

    # ------------------------------------------------------------------ queries

    def committed(self) -> int:
        """The resume point: lowest offset not yet acked (never past an in-flight or failed one)."""
        low = self.emit_position
        if self.inflight:
            low = min(low, min(self.inflight))
        if self.failed:
            low = min(low, min(self.failed))
        return low

    def pending(self) -> int:
        """Offsets not done yet: in flight plus waiting for a retry."""
        return len(self.inflight) + len(self.failed)

    def seek_target(self, now: float) -> int | None:
        """The lowest due failed offset the consumer has already read past, or None.

        The spout seeks the consumer back there; due offsets at or after ``fetch_position`` are
        reached by reading on.
        """
        best = None
        fetch = self.fetch_position
        for offset, due in self.failed.items():
            if due <= now and offset < fetch and (best is None or offset < best):
                best = offset
        return best

    # ------------------------------------------------------------------ events

    def on_record(self, offset: int, now: float) -> str:
        """The consumer delivered ``offset``: emit it as new, re-emit it as a retry, or skip it."""
        if offset < self.fetch_position:
            return SKIP  # an earlier record of a batch, or a stale one: not what we asked for
        if offset > self.fetch_position and self.failed:
            # the log no longer has [fetch_position, offset) (retention, compaction): failed
            # offsets in that gap can never be re-emitted
            for gone in [o for o in self.failed if self.fetch_position <= o < offset]:
                del self.failed[gone]
                self.failures.pop(gone, None)
                self.lost += 1
        self.fetch_position = offset + 1
        if offset >= self.emit_position:
            # offsets skipped between emit_position and offset do not exist (compaction, markers)
            self.emit_position = offset + 1
            self.inflight.add(offset)
            return EMIT_NEW
        due = self.failed.get(offset)
        if due is not None and due <= now:
            del self.failed[offset]
            self.inflight.add(offset)
            self.retried += 1
            return EMIT_RETRY
        return SKIP

    def ack(self, offset: int) -> bool:
        """The tuple of ``offset`` was fully processed. False for an offset not in flight."""
        if offset not in self.inflight:
            return False
        self.inflight.discard(offset)
        self.failures.pop(offset, None)
        return True

    def fail(self, offset: int, now: float) -> str:
        """The tuple of ``offset`` failed: schedule a retry (:data:`RETRY`) or give up (:data:`DROP`)."""
        if offset not in self.inflight:
            return UNKNOWN
        self.inflight.discard(offset)
        n = self.failures.get(offset, 0) + 1
        if not self.policy.allows(n):
            self.failures.pop(offset, None)
            self.dropped += 1
            return DROP
        self.failures[offset] = n
        self.failed[offset] = now + self.policy.delay(n)
        return RETRY

    def seek(self, offset: int) -> None:
        """The consumer was repositioned to ``offset`` (for a retry)."""
        self.fetch_position = offset

    def reset(self, position: int) -> int:
        """Out of range: continue at ``position``. Returns how many failed offsets were lost.

        Failed offsets below ``position`` can no longer be read and are lost; those at or above it
        are re-read as new records. In-flight offsets stay tracked until acked or failed.
        """
        lost = sum(1 for o in self.failed if o < position)
        self.lost += lost
        self.failed.clear()
        self.failures = {o: n for o, n in self.failures.items() if o in self.inflight}
        self.emit_position = position
        self.fetch_position = position
        return lost


@dataclass(frozen=True)
class StartPlan:
    """Where each partition of a new assignment continues (:func:`plan_starts`)."""

    #: owned before and retained: their trackers (in-flight and failed offsets) carry over
    keep: frozenset
    #: newly owned partitions that start at a known offset
    starts: dict
    #: of ``starts``, the stored (committed) offsets still to check against the high watermark the
    #: first fetch reports (an offset past it is out of range too)
    validate: dict
    #: newly owned partitions under ``latest`` with no usable stored offset: they start at the
    #: high watermark, read from the first fetch
    probe: frozenset
    #: stored offsets below the partition's log start: ``{tp: (stored, log_start)}``, reset by policy
    below_log_start: dict


def stale_partitions(held: Iterable, keep: Iterable) -> list:
    """The partitions the consumer holds (``held``: its assignment, ``TopicPartition`` objects or
    ``(topic, partition)`` pairs) that an assignment does not keep: the consumer's state of them
    (position, high watermark) must be forgotten before they are taken again."""
    kept = set(keep)
    return sorted({(tp[0], tp[1]) for tp in held} - kept)


def new_partitions(owned: frozenset, retained: frozenset, current: Iterable) -> list:
    """The partitions of an assignment that start afresh: owned, and not kept from ``current``."""
    keep = set(current) & set(retained)
    return sorted(set(owned) - keep)


def plan_starts(owned: frozenset, retained: frozenset, current: Iterable, stored: Mapping,
                log_start: Mapping, policy: str) -> StartPlan:
    """Decide where every partition of an assignment continues. ``current``: the partitions tracked
    now; ``stored``: committed offsets (None: never committed); ``log_start``: the broker's log start
    of every partition in :func:`new_partitions`. A stored offset below the log start is reset by
    ``policy`` (``earliest``: the log start; ``latest``: the high watermark, probed)."""
    if policy not in RESET_POLICIES:
        raise ValueError(f"unknown offset reset policy {policy!r}; expected one of {', '.join(RESET_POLICIES)}")
    keep = frozenset(set(current) & set(retained) & set(owned))
    starts: dict = {}
    validate: dict = {}
    probe: set = set()
    below: dict = {}
    for tp in new_partitions(owned, retained, current):
        offset = stored.get(tp)
        if offset is not None and offset < log_start[tp]:
            below[tp] = (offset, log_start[tp])
            offset = None
        if offset is not None:
            starts[tp] = validate[tp] = offset
        elif policy == EARLIEST:
            starts[tp] = log_start[tp]
        else:
            probe.add(tp)
    return StartPlan(keep, starts, validate, frozenset(probe), below)
