"""Transactional sinks (``gale.TransactionalSink``): writes to the outside world that commit with
the checkpoint.

A sink's task gathers the records its tuples make (:meth:`TransactionalSink.records`) in a *batch*
per checkpoint; the checkpoint layer of its executor (``gale.worker.sinks.participant``) hands the
batch to the sink's *store* at PREPARE (staged durably in the store's own transaction, not
visible), commits it at COMMIT and drops it at ROLLBACK. A task that restarts finds what it
prepared and commits it when the coordinator's record says the checkpoint committed. Built-in
stores: PostgreSQL, Kafka, files, Redis (``gale.sinks``); docs/sinks.md tells the protocol, each
store's guarantee and how to write your own.

::

    class Audit(gale.TransactionalSink):
        def open_store(self):
            return MyStore(self.conf["audit.url"])      # prepared / prepare / commit / abort / close

        def records(self, tup):
            return [{"user": tup["user"], "action": tup["action"]}]

Guarantee: with ``topology.state.guarantee: exactly-once`` every input's records are committed
exactly once; with at-least-once the sink's acks are held until the checkpoint holding its records
commits, so nothing is lost and a failure may write records again (an upsert makes that harmless).
``guarantee="exactly-once"`` makes a topology that cannot give it refuse to be submitted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from gale.errors import TopologyError
from gale.topology.components import Bolt, OutputFieldsDeclarer
from gale.topology.tuple import Tuple

EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
#: the stream refused records go to with ``dead_letters=True``, and its fields
DEAD_LETTER_STREAM = "error"
DEAD_LETTER_FIELDS = ("record", "key", "reason", "sink")


def sink_guarantee(cls: type, instance: Any = None) -> str | None:
    """What a component's definition records as ``sink``: None for anything but a sink, else the
    guarantee it requires (its instance's ``guarantee``, at least once by default)."""
    if not (isinstance(cls, type) and issubclass(cls, TransactionalSink)):
        return None
    return getattr(instance, "guarantee", None) or cls.guarantee or AT_LEAST_ONCE


class SinkError(Exception):
    """A store could not do what a checkpoint asked (unreachable, a record refused): the checkpoint
    fails, nothing of it is committed, and the coordinator rolls back and retries."""


class Batch:
    """The records of one checkpoint of one task, in arrival order (a store may keep its own kind:
    :meth:`SinkStore.new_batch`)."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def add(self, record: Any) -> None:
        self.records.append(record)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)


class SinkStore(Protocol):
    """What a sink's store does for one task (``gale.worker.sinks`` has four). Transactions are named
    ``gale:<topology>:<component>:<task index>:<txid>`` (``name``, from ``gale.worker.sinks.protocol``).
    Every method raises (best :class:`SinkError`, naming the store and its address) when it cannot."""

    def new_batch(self) -> Any:
        """An empty batch (``add(record)``, ``len``)."""

    def prepared(self) -> list[str]:
        """The names of this component's transactions that are prepared and neither committed nor
        aborted (every task index's: a task resolves those of indexes that no longer exist)."""

    def prepare(self, name: str, txid: int, batch: Any, refused: Any) -> int:
        """Stage ``batch`` durably as transaction ``name``, not visible; return the records written.
        ``refused(record, key, reason)``: None — a record the store refuses raises, naming its key;
        else the record is handed to it (the dead-letter stream) and the rest is staged."""

    def commit(self, name: str) -> None:
        """Make prepared transaction ``name`` visible. Idempotent (committed already: nothing)."""

    def abort(self, name: str) -> None:
        """Drop prepared transaction ``name``. Idempotent."""

    def close(self) -> None: ...


class TransactionalSink(Bolt):
    """A bolt whose writes commit with the checkpoint (module docstring). Override
    :meth:`open_store` (or use a built-in sink) and, if the tuple's fields are not the record,
    :meth:`records`. ``guarantee``: ``"exactly-once"`` to have the topology refused at submit unless
    it gives exactly-once; ``dead_letters``: records the store refuses go to the ``error`` stream
    (:data:`DEAD_LETTER_FIELDS`) instead of failing the checkpoint."""

    #: read by the builder: the guarantee this sink requires (None: the topology's)
    guarantee: str | None = None
    dead_letters: bool = False

    def __init__(self, guarantee: str | None = None, dead_letters: bool = False):
        if guarantee not in (None, EXACTLY_ONCE, AT_LEAST_ONCE):
            raise TopologyError(f"{type(self).__name__} guarantee {guarantee!r}: use {EXACTLY_ONCE!r}, "
                                f"{AT_LEAST_ONCE!r} or None (the topology's)")
        self.guarantee = guarantee
        self.dead_letters = bool(dead_letters)
        self._batch: Any = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        if self.dead_letters:
            declarer.declare_stream(DEAD_LETTER_STREAM, list(DEAD_LETTER_FIELDS))

    # --- what a sink defines
    def open_store(self) -> SinkStore:
        """The task's store, opened on its executor thread before the first checkpoint action
        (``self.conf``, ``self.context`` are set)."""
        raise NotImplementedError(f"{type(self).__name__} must override open_store() (docs/sinks.md)")

    def records(self, tup: Tuple) -> Iterable[Any]:
        """The records ``tup`` writes. Default: one, the tuple's fields as a dict."""
        return (dict(zip(tup.fields.names, tup.values)),)

    # --- the runtime's side
    def execute(self, tup: Tuple) -> None:
        batch = getattr(self, "_batch", None)  # (a subclass's __init__ may not call ours)
        if batch is None:
            batch = self._batch = self._store_batch()
        for record in self.records(tup):
            batch.add(record)
        self.collector.ack(tup)

    def _store_batch(self) -> Any:
        store = getattr(self, "_store", None)
        return store.new_batch() if store is not None else Batch()

    def take_batch(self) -> Any:
        """The records gathered since the last call (the checkpoint being prepared's)."""
        batch, self._batch = getattr(self, "_batch", None), None
        return batch

    def discard_batch(self) -> None:
        self._batch = None
