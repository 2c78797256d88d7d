"""A spout that keeps what it emitted until it is acked and replays what fails.

Storm leaves this bookkeeping to every spout: remember each tracked message until ``ack(msg_id)``,
re-emit it on ``fail(msg_id)``. :class:`ReliableSpout` does it once::

    class Sentences(ReliableSpout):
        output_fields = ["sentence"]

        def next_message(self):
            line = self.source.readline()
            if line:
                self.emit([line])           # tracked; replayed on failure or timeout

Failed messages are re-emitted (first failed, first replayed) before :meth:`next_message` is asked
for new ones. A message that has failed ``max_retries`` times after its first emit is handed to
:meth:`on_retries_exhausted` instead: by default the error is reported to the component's errors
(``nimbus status``, the UI) and the message is dropped and counted (``spout_retries_exhausted`` in
the component's stats and ``/metrics``) — never silently. The limit is the class attribute
``max_retries`` if set, else the topology key ``topology.spout.max.retries`` (default: no limit,
at-least-once). Everything runs on the spout's executor thread, like every spout method.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from gale.config import as_config
from gale.topology.collector import SpoutOutputCollector
from gale.topology.components import Spout, TopologyContext
from gale.topology.tuple import DEFAULT_STREAM

#: component counters every ReliableSpout reports
REPLAYED = "spout_replays"
EXHAUSTED = "spout_retries_exhausted"


class ReliableSpout(Spout):
    """A spout with a pending map and replay on failure. Implement :meth:`next_message`; call
    :meth:`emit` from it.

    Attributes after ``open``: ``pending`` (msg id → ``(values, stream)`` of every message emitted and
    not yet acked or given up), ``acked``, ``failed`` (fail notifications), ``replayed`` and
    ``exhausted`` counts.
    """

    #: how many times one message is replayed; its next failure goes to :meth:`on_retries_exhausted`
    #: (None: the topology key ``topology.spout.max.retries``, default no limit; 0: never replay)
    max_retries: int | None = None

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        """Set up the bookkeeping. A subclass overriding ``open`` must call ``super().open(...)``."""
        super().open(conf, context, collector)
        limit = self.max_retries
        if limit is None:
            limit = as_config(conf, "topology configuration").topology_spout_max_retries
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"{type(self).__name__}.max_retries must be an integer >= 0 or None, got {limit!r}")
        self.retry_limit: int | None = limit
        self.pending: dict[Any, tuple[Sequence[Any], str]] = {}
        self._failures: dict[Any, int] = {}  # msg id → failures so far (only messages that failed)
        # the ack path is per message: skip the call when on_acked is not overridden
        self._on_acked = None if type(self).on_acked is ReliableSpout.on_acked else self.on_acked
        self.acked = 0
        self.failed = 0
        self.replayed = 0
        self.exhausted = 0
        self._replay: deque = deque()
        self._next_id = 0
        collector.declare_metrics([REPLAYED, EXHAUSTED])

    def forget_pending(self) -> None:
        """Forget every message in flight or waiting for a replay — for a subclass's ``rewind``
        (exactly-once: the topology went back to a checkpoint, so they will be read again)."""
        self.pending.clear()
        self._failures.clear()
        self._replay.clear()

    # ------------------------------------------------------------------ what subclasses implement

    def next_message(self) -> None:
        """Emit zero or more new messages with :meth:`emit`. Must not block for long: return if
        nothing is ready. Called only when no failed message is waiting for replay."""
        raise NotImplementedError

    def on_retries_exhausted(self, msg_id: Any, values: Sequence[Any]) -> None:
        """``msg_id`` failed more than ``max_retries`` times and was dropped from the pending map.
        Default: report it as an error of the component (the error and the drop are counted); override
        to dead-letter it somewhere instead."""
        self.collector.report_error(
            f"{type(self).__name__}: message {msg_id!r} failed {self.retry_limit + 1} times "
            f"(max_retries={self.retry_limit}); dropped: {list(values)!r}"[:2000]
        )

    def on_acked(self, msg_id: Any, values: Sequence[Any]) -> None:
        """The tuple tree of ``msg_id`` was fully processed (it has left the pending map).
        Default: nothing."""

    # ------------------------------------------------------------------ the bookkeeping

    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> Any:
        """Emit a new tracked message and remember it until it is acked; return its message id
        (``msg_id`` if given — any hashable value not already pending — else a counter)."""
        pending = self.pending
        if msg_id is None:
            msg_id = self._next_id
            while msg_id in pending:  # an id the subclass chose itself
                msg_id += 1
            self._next_id = msg_id + 1
        elif msg_id in pending:
            raise ValueError(
                f"{type(self).__name__}: message id {msg_id!r} is already pending (emitted and not yet acked); "
                "each in-flight message needs its own id"
            )
        pending[msg_id] = (values, stream)
        self.collector.emit(values, msg_id, stream)  # positionally: the cheapest call into the collector
        return msg_id

    def next_tuple(self) -> None:
        """Replay one failed message if any is waiting, else ask :meth:`next_message`."""
        replay = self._replay
        while replay:
            msg_id = replay.popleft()
            entry = self.pending.get(msg_id)
            if entry is not None:
                self.replayed += 1
                self.collector.incr_metric(REPLAYED)
                self.collector.emit(entry[0], msg_id=msg_id, stream=entry[1])
                return
        self.next_message()

    def ack(self, msg_id: Any) -> None:
        """Release the message (override :meth:`on_acked` rather than this)."""
        entry = self.pending.pop(msg_id, None)
        if entry is not None:
            self.acked += 1
            if self._failures:
                self._failures.pop(msg_id, None)
            if self._on_acked is not None:
                self._on_acked(msg_id, entry[0])

    def fail(self, msg_id: Any) -> None:
        """Queue the message for replay, or give up on it past the limit (override
        :meth:`on_retries_exhausted` rather than this)."""
        entry = self.pending.get(msg_id)
        if entry is None:
            return
        self.failed += 1
        failures = self._failures[msg_id] = self._failures.get(msg_id, 0) + 1
        limit = self.retry_limit
        if limit is not None and failures > limit:
            del self.pending[msg_id]
            del self._failures[msg_id]
            self.exhausted += 1
            self.collector.incr_metric(EXHAUSTED)
            self.on_retries_exhausted(msg_id, entry[0])
            return
        self._replay.append(msg_id)
