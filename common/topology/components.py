"""The user API: spouts, bolts, output declarations and the topology context.

Storm's contracts, in Python names:

* A :class:`Spout` is asked for tuples with :meth:`Spout.next_tuple` and emits them with
  ``self.collector.emit(values, msg_id=...)``. Emitting with a message id makes the tuple tracked:
  when its whole tuple tree has been processed the emitting spout task gets ``ack(msg_id)``; if any
  tuple in the tree fails or the tree times out (``topology.message.timeout.secs``), ``fail(msg_id)``.
* A :class:`Bolt` receives tuples in :meth:`Bolt.execute`, emits with
  ``self.collector.emit(values, anchors=input)`` (``anchors``: the parent tuple or tuples the new
  tuple derives from) and must ``ack`` or ``fail`` every input.
* A :class:`BasicBolt` anchors every emit to the input being executed and acks it when
  ``execute`` returns; raising :class:`FailedException` (or any exception) fails it instead.

Outputs are declared one way, Storm's: :meth:`Component.declare_output_fields`. A component with
only the default stream may set the class attribute ``output_fields = [...]`` instead — a thin
alias: the default ``declare_output_fields`` declares it and nothing else reads it.

:class:`gale.ReliableSpout` (``gale.topology.reliable_spout``) keeps the pending-message bookkeeping
of a replaying spout for you.

Each task gets its own instance, built from the class and the constructor arguments given to
the builder. Keep ``__init__`` cheap (it also runs on the submitting client to read the output
declaration); open connections in ``open``/``prepare``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gale.topology.collector import BoltOutputCollector, SpoutOutputCollector
from gale.topology.tuple import DEFAULT_STREAM, Tuple


class FailedException(Exception):
    """Raise from :meth:`BasicBolt.execute` to fail the input tuple (its spout tuple replays)."""


class ReportedFailedException(FailedException):
    """Like :class:`FailedException`, and the error is also reported to the component's errors."""


@dataclass
class StreamDeclaration:
    fields: list[str]
    direct: bool = False


class OutputFieldsDeclarer:
    """Collects a component's declared output streams (``declare_output_fields``)."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamDeclaration] = {}

    def declare(self, fields: Iterable[str], direct: bool = False) -> None:
        """Declare the default stream's fields."""
        self.declare_stream(DEFAULT_STREAM, fields, direct=direct)

    def declare_stream(self, stream_id: str, fields: Iterable[str], direct: bool = False) -> None:
        fields = list(fields)
        if not isinstance(stream_id, str) or not stream_id:
            raise ValueError(f"stream id must be a non-empty string, got {stream_id!r}")
        if stream_id in self.streams:
            raise ValueError(f"stream {stream_id!r} declared twice")
        if stream_id.startswith("__"):
            raise ValueError(f"stream id {stream_id!r} is reserved (ids starting with '__' are Gale's)")
        for f in fields:
            if not isinstance(f, str) or not f:
                raise ValueError(f"field names must be non-empty strings, got {f!r} in stream {stream_id!r}")
        if len(set(fields)) != len(fields):
            raise ValueError(f"duplicate field names in stream {stream_id!r}: {fields}")
        self.streams[stream_id] = StreamDeclaration(fields, direct)


@dataclass
class TopologyContext:
    """What a task knows about itself and the topology (Storm's TopologyContext)."""

    topology_id: str
    topology_name: str
    component_id: str
    task_id: int
    #: task id → component id, for every task of the topology
    task_to_component: Mapping[int, str]
    #: component id → stream id → declared output fields
    component_streams: Mapping[str, Mapping[str, Sequence[str]]]
    #: this worker's port (0 in local mode) and the tasks it hosts
    worker_port: int = 0
    worker_tasks: Sequence[int] = ()
    #: a directory the task may write to (per worker)
    local_dir: str = ""
    #: the topology's code directory (Storm's getCodeDir): the unpacked bundle in a worker, the
    #: topology file's directory in local mode ("" when the topology was built in memory)
    code_dir: str = ""
    #: component-specific resources (for example the Spark session of a Spark bolt)
    resources: dict[str, Any] = field(default_factory=dict)

    def component_tasks(self, component_id: str) -> list[int]:
        return sorted(t for t, c in self.task_to_component.items() if c == component_id)

    @property
    def this_component_tasks(self) -> list[int]:
        return self.component_tasks(self.component_id)

    @property
    def this_task_index(self) -> int:
        """0-based index of this task among its component's tasks (Storm's getThisTaskIndex)."""
        return self.this_component_tasks.index(self.task_id)

    def output_fields(self, component_id: str, stream_id: str = DEFAULT_STREAM) -> list[str]:
        return list(self.component_streams[component_id][stream_id])


class Component:
    """Shared base of spouts and bolts."""

    #: what runs the component's tasks in a worker (recorded in the definition as ``body``):
    #: ``python`` — the instance itself; Gale's windowed, shell and Spark components say otherwise
    body_kind = "python"

    #: shorthand for a component whose only output is the default stream: ``output_fields =
    #: ["word", "count"]`` is the same as ``declare_output_fields`` calling
    #: ``declarer.declare(["word", "count"])`` (an alias read only by the default method below)
    output_fields: Sequence[str] = ()

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare output streams: ``declarer.declare(["word"])``,
        ``declarer.declare_stream("errors", ["message"])``. Default: the default stream with
        :attr:`output_fields` if set, else no outputs."""
        if self.output_fields:
            declarer.declare(list(self.output_fields))

    def component_configuration(self) -> dict[str, Any]:
        """Per-component config overrides (e.g. ``topology.tick.tuple.freq.secs``)."""
        return {}


class Spout(Component):
    """A source of tuples. Override :meth:`next_tuple`; emit with ``self.collector.emit``."""

    collector: SpoutOutputCollector
    context: TopologyContext
    conf: dict[str, Any]
    #: True when a message id names its message whatever task of the component emits it (Kafka's
    #: ``(topic, partition, offset)``), so a replay from another task has the same lineage id and a
    #: Spark sink recognises it; False (the default) when ids are only unique within a task.
    unique_message_ids: bool = False

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: SpoutOutputCollector) -> None:
        """Called once per task before any other method. Default: keep the three arguments."""
        self.conf = conf
        self.context = context
        self.collector = collector

    def close(self) -> None:
        """Called when the task shuts down cleanly (not guaranteed after a kill -9)."""

    def activate(self) -> None:
        """The topology became ACTIVE: ``next_tuple`` calls start (again)."""

    def deactivate(self) -> None:
        """The topology became INACTIVE (deactivate, kill): ``next_tuple`` calls stop."""

    def next_tuple(self) -> None:
        """Emit zero or more tuples. Must not block for long: return if nothing is ready."""
        raise NotImplementedError

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed or timed out; replay it if the source allows."""

    # Exactly-once state (``topology.state.guarantee: exactly-once``, docs/state.md) needs a source
    # that can go back to a recorded position. A spout that can overrides both methods below.

    def position(self) -> Any:
        """Where the source is: what :meth:`rewind` needs to come back here. Called when every tuple
        this task emitted is fully processed (a checkpoint), between ``next_tuple`` calls. The value
        is stored in the checkpoint: None, bool, int, float, str, bytes, lists and dicts of those."""
        raise NotImplementedError

    def rewind(self, position: Any) -> None:
        """Go back to ``position`` (a value :meth:`position` returned; None: the source's start) and
        forget every message emitted and not yet acked: the next ``next_tuple`` emits what came
        after ``position``. In exactly-once mode a failed tree is not passed to :meth:`fail`; the
        whole topology goes back to its last checkpoint instead, and this is how the spout does."""
        raise NotImplementedError


def can_rewind(spout_class: type) -> bool:
    """Whether a spout class overrides :meth:`Spout.position` and :meth:`Spout.rewind`."""
    return (getattr(spout_class, "position", None) is not Spout.position
            and getattr(spout_class, "rewind", None) is not Spout.rewind)


class Bolt(Component):
    """A processing step. Override :meth:`execute`; ack or fail every input."""

    collector: BoltOutputCollector
    context: TopologyContext
    conf: dict[str, Any]

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: BoltOutputCollector) -> None:
        """Called once per task before any tuple. Default: keep the three arguments."""
        self.conf = conf
        self.context = context
        self.collector = collector

    def execute(self, tup: Tuple) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        """Called when the task shuts down cleanly (not guaranteed after a kill -9)."""


class BasicBolt(Bolt):
    """A bolt whose emits are anchored to the input and whose input is acked after ``execute``.

    ``self.collector.emit(values)`` inside :meth:`execute` anchors to the current input
    automatically; raising :class:`FailedException` (or any other exception) fails the input.
    """

    auto_anchor = True
