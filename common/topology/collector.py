"""The output collectors a topology's code sees, as protocols (Storm's ISpoutOutputCollector and
IOutputCollector).

A spout gets a :class:`SpoutOutputCollector` in ``open`` and a bolt a :class:`BoltOutputCollector` in
``prepare``; they are ``self.collector`` afterwards. The worker's runtime implements both
(``gale.worker.runtime.collector``); the user API names only these protocols, so it imports nothing
of the worker, and a test may pass any object with these methods.

``anchors`` always means *parent tuples*: the input tuple(s) an emitted tuple derives from. The
acker's bookkeeping of a tuple (root id → edge id) is its :attr:`gale.Tuple.message_id`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from gale.topology.tuple import Tuple


@runtime_checkable
class MetricsCollector(Protocol):
    """What both collectors offer besides emitting: errors and component counters."""

    def report_error(self, error: BaseException | str) -> None:
        """Report an error to the component's error list (``nimbus status``, the UI); throttled per
        executor (``topology.max.error.report.per.interval``)."""
        ...

    def declare_metrics(self, names: Iterable[str]) -> None:
        """Create component counters up front (shown at 0 in stats, the API and ``/metrics``)."""
        ...

    def incr_metric(self, name: str, n: float = 1) -> None:
        """Add ``n`` to a component counter (summed per component in ``nimbus status`` and the UI,
        exported by the worker's ``/metrics`` as ``gale_worker_extra_<name>``)."""
        ...

    def set_details(self, name: str, values: dict[str, float]) -> None:
        """Replace a labelled gauge of this task (label → latest value, e.g. a Kafka spout's lag per
        partition), shown per component in the UI and the API; call it from the task's own methods."""
        ...


@runtime_checkable
class SpoutOutputCollector(MetricsCollector, Protocol):
    """``self.collector`` of a spout."""

    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = "default") -> list[int]:
        """Emit a tuple; return the ids of the tasks it was sent to. A ``msg_id`` (any hashable
        value) makes the tuple tracked: the spout task later gets ``ack(msg_id)`` when its whole tuple
        tree was processed, or ``fail(msg_id)``."""
        ...

    def emit_direct(self, task: int, values: Sequence[Any], msg_id: Any = None,
                    stream: str = "default") -> list[int]:
        """Emit to one task of a bolt subscribed with ``direct_grouping`` (the stream must be declared
        direct)."""
        ...

    def rewind_needed(self) -> None:
        """Exactly-once topologies (``topology.state.guarantee``): this spout's source no longer fits
        the last checkpoint (e.g. a Kafka consumer group moved partitions), so the topology goes back
        to it and the spout's ``rewind`` is called. Does nothing in other topologies."""
        ...


@runtime_checkable
class BoltOutputCollector(MetricsCollector, Protocol):
    """``self.collector`` of a bolt."""

    def emit(self, values: Sequence[Any], anchors: Tuple | Iterable[Tuple] | None = None,
             stream: str = "default") -> list[int]:
        """Emit a tuple anchored to ``anchors`` — the input tuple (or tuples) it derives from — so it
        joins their tuple trees; unanchored when ``None`` (in a :class:`gale.BasicBolt`, the current
        input). Returns the ids of the tasks it was sent to."""
        ...

    def emit_direct(self, task: int, values: Sequence[Any], anchors: Tuple | Iterable[Tuple] | None = None,
                    stream: str = "default") -> list[int]:
        """Emit to one task of a bolt subscribed with ``direct_grouping``."""
        ...

    def ack(self, tup: Tuple) -> None:
        """The input tuple was processed (after emitting everything anchored to it)."""
        ...

    def fail(self, tup: Tuple) -> None:
        """The input tuple failed: its spout tuples are failed at once (and replayed by their spouts)."""
        ...

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of every tuple tree ``tup`` belongs to (long-running work)."""
        ...
