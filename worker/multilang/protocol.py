"""Storm's multi-lang protocol for one shell task, as pure state machines (no I/O, time passed in).

A :class:`BoltSession` or :class:`SpoutSession` is one subprocess's conversation with its task
(``docs/storm-model.md`` §9, Storm's ``ShellBolt``/``ShellSpout``):

* **handshake** — :meth:`Session.handshake` is the first message: ``{"conf", "pidDir", "context"}``
  with the 8 context keys of Storm's ``TopologyContext.toJSONString`` (:func:`storm_context`). The
  child's first message must be ``{"pid": N}`` (:class:`Started`); the shell checks the pid file.
* **bolts are asynchronous** — every input tuple goes out as ``{"id", "comp", "stream", "task",
  "tuple"}`` under a fresh string id, remembered until the child acks or fails it; the child may
  emit (anchored to ids), ack, fail, log, report errors and metrics at any time. A heartbeat tuple
  (stream ``__heartbeat``, task -1) goes out every second; the child answers ``sync``.
* **spouts are request/reply** — each command (``next``, ``ack``, ``fail``, ``activate``,
  ``deactivate``) is answered by any emits/logs and then ``sync``. Gale pipelines commands (acks
  and fails are written as they come, in order) but keeps at most one ``next`` unanswered, so the
  child is asked for tuples exactly as often as Storm would ask it.
* **task ids** — an emit that is not direct and does not say ``need_task_ids: false`` is answered
  with the bare list of target task ids, in emit order (:meth:`Session.task_ids`).
* **liveness** — a child asked something (the handshake, a heartbeat, a spout command) that says
  nothing for ``timeout`` seconds is overdue (:meth:`Session.overdue`); any message counts.

:meth:`Session.receive` turns each child message into one command object for the executor to
apply (:class:`BoltEmit`, :class:`Ack`, ...). Protocol violations that leave the conversation
meaningless (not an object, no command, acking an id that is not pending, anchoring to one) raise
:class:`~gale.worker.multilang.codec.ProtocolError`: the shell kills the child, fails its pending
tuples and starts it again (:class:`Restarts`). Smaller mistakes come back as :class:`Problem`
(reported, the conversation goes on).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gale.topology.definition import TopologyDef
from gale.worker.multilang.codec import ProtocolError, shorten

HEARTBEAT_STREAM = "__heartbeat"
SYSTEM_TASK = -1
HEARTBEAT_SECS = 1.0
DEFAULT_STREAM = "default"

#: Storm's multi-lang log levels (STORM-414) → Python logging level names
LOG_LEVELS = {0: "debug", 1: "debug", 2: "info", 3: "warning", 4: "error"}

#: Gale's grouping types → the Thrift union member names Storm writes in the context
GROUPING_NAMES = {
    "shuffle": "SHUFFLE", "fields": "FIELDS", "all": "ALL", "global": "FIELDS", "none": "NONE",
    "direct": "DIRECT", "local_or_shuffle": "LOCAL_OR_SHUFFLE",
}


# ----------------------------------------------------------------------------------- the context


def _grouping(gtype: str, fields: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": GROUPING_NAMES[gtype]}
    if gtype == "fields":
        out["fields"] = list(fields)
    elif gtype == "global":
        out["fields"] = []  # Storm's global grouping is a fields grouping on no fields
    return out


def storm_context(defn: TopologyDef, task_to_component: Mapping[int, str], component: str,
                  task: int) -> dict[str, Any]:
    """The handshake's ``context``: the 8 keys of Storm's ``TopologyContext.toJSONString``."""
    comp = defn.components[component]
    targets: dict[str, dict[str, Any]] = {sid: {} for sid in comp.streams}
    for cid, other in sorted(defn.components.items()):
        for inp in other.inputs:
            if inp.component == component and inp.stream in targets:
                targets[inp.stream][cid] = _grouping(inp.grouping.type, inp.grouping.fields)
    sources: dict[str, dict[str, Any]] = {}
    source_fields: dict[str, dict[str, list[str]]] = {}
    for inp in comp.inputs:
        sources.setdefault(inp.component, {})[inp.stream] = _grouping(inp.grouping.type, inp.grouping.fields)
        fields = defn.components[inp.component].streams[inp.stream].fields
        source_fields.setdefault(inp.component, {})[inp.stream] = list(fields)
    return {
        "task->component": {str(t): c for t, c in sorted(task_to_component.items())},
        "taskid": task,
        "componentid": component,
        "streams": sorted(comp.streams),
        "stream->outputfields": {sid: list(s.fields) for sid, s in sorted(comp.streams.items())},
        "stream->target->grouping": targets,
        "source->stream->grouping": sources,
        "source->stream->fields": source_fields,
    }


# ----------------------------------------------------------------------- what the child asked for


@dataclass(frozen=True, slots=True)
class Started:
    """The handshake reply: the child's pid."""

    pid: int


@dataclass(slots=True)
class BoltEmit:
    values: list[Any]
    stream: str
    anchors: list[Any]  # the input tuples (Gale Tuples) the new tuple is anchored to
    anchor_ids: list[str]
    task: int  # 0: grouped; otherwise the direct target
    need_task_ids: bool


@dataclass(slots=True)
class SpoutEmit:
    values: list[Any]
    stream: str
    msg_id: Any  # None: unreliable
    task: int
    need_task_ids: bool


@dataclass(frozen=True, slots=True)
class Ack:
    tup: Any


@dataclass(frozen=True, slots=True)
class Fail:
    tup: Any


@dataclass(frozen=True, slots=True)
class ResetTimeout:
    tup: Any


@dataclass(frozen=True, slots=True)
class Log:
    level: str  # a Python logging level name
    text: str


@dataclass(frozen=True, slots=True)
class ReportError:
    """The child's ``error`` command: reported like Storm's ``reportError``."""

    text: str


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    value: float


@dataclass(frozen=True, slots=True)
class Sync:
    command: str = ""  # spouts: the command this sync answers


@dataclass(frozen=True, slots=True)
class Ignored:
    """A message with nothing left to do (an ack of a tuple Gale already failed); ``reply``: an
    emit waiting for task ids gets an empty list."""

    reply: bool = False


@dataclass(slots=True)
class Problem:
    """A mistake that does not end the conversation: reported; ``reply`` answers an emit that
    waits for task ids (with none), ``fail`` are tuples to fail."""

    text: str
    reply: bool = False
    fail: list[Any] = field(default_factory=list)


Command = Started | BoltEmit | SpoutEmit | Ack | Fail | ResetTimeout | Log | ReportError | Metric | Sync | Ignored | Problem


# ------------------------------------------------------------------------------------ sessions


class Session:
    """What both kinds share: handshake, liveness, task-id replies, log/error/metrics commands."""

    kind = ""

    def __init__(self, component: str, task: int, now: float, timeout: float):
        self.component = component
        self.task = task
        self.timeout = float(timeout)
        self.pid: int | None = None
        #: when the child was asked something it has not answered with any message since
        self.asked_at: float | None = None
        self.last_heard = now

    # --- liveness
    def _asked(self, now: float) -> None:
        if self.asked_at is None:
            self.asked_at = now

    def overdue(self, now: float) -> bool:
        """Asked and silent for longer than the timeout (Storm's "subprocess heartbeat timeout")."""
        return self.asked_at is not None and now - self.asked_at > self.timeout

    def silent_secs(self, now: float) -> float:
        return 0.0 if self.asked_at is None else now - self.asked_at

    @property
    def started(self) -> bool:
        return self.pid is not None

    # --- out
    def handshake(self, conf: Mapping[str, Any], context: Mapping[str, Any], pid_dir: str, now: float) -> dict:
        self._asked(now)
        return {"conf": dict(conf), "pidDir": pid_dir, "context": dict(context)}

    @staticmethod
    def task_ids(targets: Sequence[int]) -> list[int]:
        """The reply to an emit that needs task ids: the bare list."""
        return list(targets)

    # --- in
    def receive(self, msg: Any, now: float) -> Command:
        """One message from the child → the command to apply (or :class:`ProtocolError`)."""
        self.last_heard = now
        self._heard(now)
        if not isinstance(msg, dict):
            raise ProtocolError(f"expected a message object from the subprocess, got {shorten(repr(msg))}")
        if self.pid is None:
            pid = msg.get("pid")
            if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
                raise ProtocolError(f"expected the handshake reply {{\"pid\": <pid>}}, got {shorten(repr(msg))}")
            self.pid = pid
            self._heard(now)  # the handshake is answered
            return Started(pid)
        command = msg.get("command")
        if not isinstance(command, str):
            raise ProtocolError(f"message without a command: {shorten(repr(msg))}")
        if command == "emit":
            return self._emit(msg)
        if command == "sync":
            return self._sync()
        if command == "log":
            level = msg.get("level", 2)
            return Log(LOG_LEVELS.get(level, "info") if isinstance(level, int) else "info", str(msg.get("msg", "")))
        if command == "error":
            return ReportError(str(msg.get("msg", "")))
        if command == "metrics":
            name, params = msg.get("name"), msg.get("params")
            if not isinstance(name, str) or not name:
                return Problem(f"metrics message without a metric name: {shorten(repr(msg))}")
            if isinstance(params, bool) or not isinstance(params, (int, float)):
                return Problem(f"metric {name!r}: params must be a number (added to the component counter), "
                               f"got {shorten(repr(params))}")
            return Metric(name, params)
        return self._command(command, msg)

    def _heard(self, now: float) -> None:
        self.asked_at = None

    def _sync(self) -> Command:
        return Sync()

    def _emit(self, msg: dict) -> Command:  # pragma: no cover - abstract
        raise NotImplementedError

    def _command(self, command: str, msg: dict) -> Command:
        return Problem(f"unknown command {command!r} from the subprocess: {shorten(repr(msg))}")

    @staticmethod
    def _emit_fields(msg: dict) -> tuple[list[Any], str, int, bool] | str:
        """The common fields of an emit, or what is wrong with them."""
        values = msg.get("tuple")
        if not isinstance(values, list):
            return f"emit without a 'tuple' list: {shorten(repr(msg))}"
        stream = msg.get("stream")
        if stream is None:
            stream = DEFAULT_STREAM
        elif not isinstance(stream, str):
            return f"emit with a non-string stream {stream!r}"
        task = msg.get("task") or 0
        if isinstance(task, bool) or not isinstance(task, int):
            return f"emit with a non-integer direct task {task!r}"
        need = msg.get("need_task_ids")
        return values, stream, task, need is None or bool(need)


class BoltSession(Session):
    """A shell bolt task's conversation with its subprocess."""

    kind = "bolt"

    def __init__(self, component: str, task: int, now: float, timeout: float, new_id: Callable[[], str],
                 heartbeat_secs: float = HEARTBEAT_SECS):
        super().__init__(component, task, now, timeout)
        self.new_id = new_id
        self.heartbeat_secs = heartbeat_secs
        self.next_heartbeat = now + heartbeat_secs
        #: tuple id → the input tuple, from when it is sent until the child acks or fails it
        self.pending: dict[str, Any] = {}
        #: ids Gale failed itself (an emit anchored to them was refused): the child's later ack,
        #: fail or emit of them is dropped quietly
        self.refused: set[str] = set()

    def tuple_message(self, tup: Any) -> dict:
        """An input tuple, under a fresh id kept in :attr:`pending`."""
        tid = self.new_id()
        self.pending[tid] = tup
        return {"id": tid, "comp": tup.component, "stream": tup.stream, "task": tup.task, "tuple": tup.values}

    def forget(self, tid: str) -> None:
        """A tuple message could not be sent (not serializable): it is no longer pending."""
        self.pending.pop(tid, None)

    def heartbeat(self, now: float) -> dict | None:
        """The heartbeat tuple when one is due (every ``heartbeat_secs`` once started), else None."""
        if self.pid is None or now < self.next_heartbeat:
            return None
        self.next_heartbeat = now + self.heartbeat_secs
        self._asked(now)
        return {"id": self.new_id(), "comp": None, "stream": HEARTBEAT_STREAM, "task": SYSTEM_TASK, "tuple": []}

    def fail_all(self) -> list[Any]:
        """The child is gone: every pending tuple, to fail (so its tuple tree replays)."""
        tuples = list(self.pending.values())
        self.pending.clear()
        return tuples

    def refuse(self, anchor_ids: Sequence[str]) -> list[Any]:
        """An emit anchored to these ids was refused: fail them (as a native bolt's input is
        failed when its emit raises); the child's own ack/fail of them will be dropped."""
        out = []
        for tid in anchor_ids:
            tup = self.pending.pop(tid, None)
            if tup is not None:
                self.refused.add(tid)
                out.append(tup)
        return out

    def _tuple_of(self, msg: dict, verb: str) -> Any:
        tid = msg.get("id")
        if isinstance(tid, int) and not isinstance(tid, bool):
            tid = str(tid)
        tup = self.pending.pop(tid, None) if isinstance(tid, str) else None
        if tup is None:
            if tid in self.refused:
                self.refused.discard(tid)
                return None
            raise ProtocolError(f"{verb} of tuple id {tid!r}, which is not pending (never sent, or already "
                                "acked or failed)")
        return tup

    def _emit(self, msg: dict) -> Command:
        fields = self._emit_fields(msg)
        raw = msg.get("anchors")
        if raw is None:
            raw = []
        elif isinstance(raw, (str, int)) and not isinstance(raw, bool):
            raw = [raw]  # Storm accepts a single id
        if not isinstance(raw, list):
            return Problem(f"emit with anchors that are not a list of tuple ids: {shorten(repr(raw))}",
                           reply=_needs_reply(msg))
        ids = [str(a) if isinstance(a, int) and not isinstance(a, bool) else a for a in raw]
        if isinstance(fields, str):
            return Problem(fields, reply=_needs_reply(msg), fail=self.refuse([i for i in ids if isinstance(i, str)]))
        values, stream, task, need = fields
        anchors = []
        for tid in ids:
            tup = self.pending.get(tid) if isinstance(tid, str) else None
            if tup is None:
                if tid in self.refused:
                    # its tree was failed already and replays: the emit would only duplicate it
                    return Ignored(reply=need and not task)
                raise ProtocolError(f"emit anchored to tuple id {tid!r}, which is not pending (never sent, "
                                    "or already acked or failed)")
            anchors.append(tup)
        return BoltEmit(values, stream, anchors, ids, task, need)

    def _command(self, command: str, msg: dict) -> Command:
        if command == "ack":
            tup = self._tuple_of(msg, "ack")
            return Ignored() if tup is None else Ack(tup)
        if command == "fail":
            tup = self._tuple_of(msg, "fail")
            return Ignored() if tup is None else Fail(tup)
        if command == "reset_timeout":  # Gale's extension: collector.reset_timeout(input)
            tid = msg.get("id")
            tup = self.pending.get(str(tid) if isinstance(tid, int) else tid)
            if tup is None:
                return Problem(f"reset_timeout of tuple id {tid!r}, which is not pending")
            return ResetTimeout(tup)
        return super()._command(command, msg)


def _needs_reply(msg: dict) -> bool:
    need = msg.get("need_task_ids")
    task = msg.get("task") or 0
    return (need is None or bool(need)) and not task


class SpoutSession(Session):
    """A shell spout task's conversation with its subprocess."""

    kind = "spout"

    def __init__(self, component: str, task: int, now: float, timeout: float):
        super().__init__(component, task, now, timeout)
        #: commands written and not yet answered with ``sync``, oldest first
        self.unanswered: deque[str] = deque()
        self.unexpected_syncs = 0

    @property
    def next_outstanding(self) -> bool:
        return "next" in self.unanswered

    def command(self, name: str, now: float, msg_id: Any = "") -> dict:
        """``next``/``activate``/``deactivate`` (``id`` ""), ``ack``/``fail`` (the message id)."""
        self.unanswered.append(name)
        self._asked(now)
        return {"command": name, "id": msg_id}

    def handshake(self, conf: Mapping[str, Any], context: Mapping[str, Any], pid_dir: str, now: float) -> dict:
        self.unanswered.clear()
        return super().handshake(conf, context, pid_dir, now)

    def _heard(self, now: float) -> None:
        # still waiting for syncs: the silence is measured from this message on
        self.asked_at = now if (self.unanswered or self.pid is None) else None

    def _sync(self) -> Command:
        if not self.unanswered:
            self.unexpected_syncs += 1
            return Sync("")
        answered = self.unanswered.popleft()
        if not self.unanswered:
            self.asked_at = None
        return Sync(answered)

    def _emit(self, msg: dict) -> Command:
        fields = self._emit_fields(msg)
        if isinstance(fields, str):
            return Problem(fields, reply=_needs_reply(msg))
        values, stream, task, need = fields
        msg_id = msg.get("id")
        if msg_id is not None and not isinstance(msg_id, (str, int, float)):
            return Problem(f"emit with a message id that is not a string or number: {shorten(repr(msg_id))}",
                           reply=need and not task)
        return SpoutEmit(values, stream, msg_id, task, need)


# ------------------------------------------------------------------------------------ restarts


class Restarts:
    """When to start a failed subprocess again: ``first`` seconds after a failure, doubling with
    every failure in a row, at most ``limit``; a child that ran ``limit`` seconds resets the count."""

    def __init__(self, first: float, limit: float = 60.0):
        self.first = float(first)
        self.limit = max(float(limit), self.first)
        self.failures = 0
        self.started_at: float | None = None

    def started(self, now: float) -> None:
        self.started_at = now

    def failed(self, now: float) -> float:
        """A child failed at ``now``: the time to start the next one."""
        if self.started_at is not None and now - self.started_at >= self.limit:
            self.failures = 0
        self.started_at = None
        delay = min(self.limit, self.first * (2 ** self.failures))
        self.failures += 1
        return now + delay
