"""Typed records for what each znode under ``/storm`` holds.

Field names follow Storm's Thrift structs (``docs/storm-model.md`` §2) so an operator who
knows Storm can read them; each record is JSON with a ``version`` field (the record schema version;
the software version is ``gale_version``), readable with ``zkCli.sh get``.

:meth:`Record.decode` validates everything and raises :class:`~gale.errors.CorruptRecordError`
naming the path and the problem; it never lets a raw ``KeyError``/``ValueError`` escape.

Executors are ``(start_task, end_task)`` pairs; in JSON maps they are keyed ``"start-end"``, in
lists they are ``"start-end"`` tokens separated by spaces (``"1-4 5-5 9-12"``).
"""

from __future__ import annotations

import enum
import json
import re
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from gale.errors import CorruptRecordError

GALE_VERSION = "0.1.0"

ExecutorId = tuple[int, int]

_EXECUTOR_KEY = re.compile(r"^(\d+)-(\d+)$")


def executor_key(executor: ExecutorId) -> str:
    """``(1, 4)`` → ``"1-4"``."""
    return f"{executor[0]}-{executor[1]}"


def parse_executor_key(key: str) -> ExecutorId:
    """``"1-4"`` → ``(1, 4)``; raises ``ValueError`` on anything else."""
    m = _EXECUTOR_KEY.match(key)
    if not m:
        raise ValueError(f"executor key {key!r} is not 'start-end'")
    start, end = int(m.group(1)), int(m.group(2))
    if start > end or start < 1:
        raise ValueError(f"executor key {key!r} has start > end or start < 1")
    return start, end


def _check_executor_keys(value: dict[str, Any]) -> dict[str, Any]:
    for key in value:
        parse_executor_key(key)
    return value


def encode_executors(executors: Any) -> str:
    """Executors as one string: ``[(1, 4), (5, 5)]`` → ``"1-4 5-5"`` (sorted)."""
    return " ".join(executor_key(ex) for ex in sorted(executors))


def decode_executors(text: str) -> list[ExecutorId]:
    """``"1-4 5-5"`` → ``[(1, 4), (5, 5)]``; raises ``ValueError`` naming a bad token."""
    return [parse_executor_key(token) for token in text.split()]


def _check_executor_list(value: str) -> str:
    decode_executors(value)
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Record(_Model):
    """Base of every znode payload: JSON with a schema ``version``."""

    SCHEMA_VERSION: ClassVar[int] = 1
    version: int = 1

    def encode(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def decode(cls, data: bytes | None, path: str) -> Self:
        if data is None or len(data) == 0:
            raise CorruptRecordError(path, f"empty znode, expected a {cls.__name__} record")
        try:
            obj = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptRecordError(path, f"not JSON ({exc}); expected a {cls.__name__} record") from None
        except (RecursionError, ValueError, MemoryError) as exc:
            raise CorruptRecordError(path, f"unreadable JSON ({type(exc).__name__}); expected a {cls.__name__} record") from None
        if not isinstance(obj, dict):
            raise CorruptRecordError(path, f"expected a JSON object for {cls.__name__}, got {type(obj).__name__}")
        version = obj.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise CorruptRecordError(path, f"missing or non-integer 'version' field in {cls.__name__}")
        if version > cls.SCHEMA_VERSION:
            raise CorruptRecordError(
                path,
                f"{cls.__name__} record version {version} was written by a newer Gale "
                f"(this build reads up to version {cls.SCHEMA_VERSION})",
            )
        try:
            return cls.model_validate(obj)
        except ValidationError as exc:
            problems = []
            for err in exc.errors()[:3]:
                loc = ".".join(str(p) for p in err["loc"]) or "(record)"
                problems.append(f"{loc}: {err['msg']}")
            more = "" if exc.error_count() <= 3 else f" (and {exc.error_count() - 3} more)"
            raise CorruptRecordError(path, f"invalid {cls.__name__}: " + "; ".join(problems) + more) from None


# ----------------------------------------------------------------------------------------------
# /storm/storms/<topology-id>


class TopologyStatus(str, enum.Enum):
    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    REBALANCING = "REBALANCING"
    KILLED = "KILLED"


class KillOptions(_Model):
    wait_secs: int | None = None


class RebalanceOptions(_Model):
    wait_secs: int | None = None
    num_workers: int | None = Field(default=None, ge=1)
    num_executors: dict[str, Annotated[int, Field(ge=1)]] = {}
    #: Gale: new task counts (Storm's are fixed at submit); see gale.nimbus.rescale
    num_tasks: dict[str, Annotated[int, Field(ge=1)]] = {}


class TopologyActionOptions(_Model):
    """The pending delayed action of a KILLED or REBALANCING topology.

    ``deadline_secs`` is the wall-clock time at which it fires, stored so that a new nimbus leader
    resumes the countdown instead of restarting or losing it (Storm's STORM-3516).
    """

    kill: KillOptions | None = None
    rebalance: RebalanceOptions | None = None
    deadline_secs: float


class DebugOptions(_Model):
    enable: bool = False
    samplingpct: float = 0.0


class StormBase(Record):
    name: str = Field(min_length=1)
    status: TopologyStatus
    num_workers: int = Field(ge=1)
    component_executors: dict[str, Annotated[int, Field(ge=0)]]
    #: Gale: task counts a rebalance changed (components absent keep their definition's count)
    component_tasks: dict[str, Annotated[int, Field(ge=1)]] = {}
    launch_time_secs: int
    owner: str = ""
    topology_action_options: TopologyActionOptions | None = None
    prev_status: TopologyStatus | None = None
    component_debug: dict[str, DebugOptions] = {}
    topology_version: str = GALE_VERSION


# ----------------------------------------------------------------------------------------------
# /storm/assignments/<topology-id>


class WorkerAssignment(_Model):
    """The executors one worker slot runs that share a start time (in practice: all of them)."""

    node: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    start_time_secs: int
    executors: str = Field(min_length=1)  # "1-4 5-5": executor keys separated by spaces

    _executors = field_validator("executors")(_check_executor_list)


class Assignment(Record):
    """A topology's placement: which worker slot runs each executor, and since when.

    Storm's Assignment holds ``executor_node_port`` and ``executor_start_time_secs``, one entry per
    executor (schema version 1 here, about 100 bytes an executor with real supervisor ids). Version
    2 groups executors by worker slot and start time — ``workers: [{node, port, start_time_secs,
    executors: "1-1 7-7 ..."}]`` — about 10 bytes an executor, so a topology of 2,000 executors
    takes about 30 KB of ZooKeeper's 1 MiB per znode (``jute.maxbuffer``). Version 1 records are
    still read (a cluster upgraded under running topologies); every write is version 2. The same
    API serves both: :meth:`executors`, :meth:`start_times`, :meth:`executors_on`.
    """

    SCHEMA_VERSION: ClassVar[int] = 2
    version: int = 2
    master_code_dir: str
    code_checksum: str = Field(pattern=r"^[0-9a-f]{64}$")
    node_host: dict[str, str]
    workers: list[WorkerAssignment]
    owner: str = ""

    _placements: dict[ExecutorId, tuple[str, int]] | None = PrivateAttr(default=None)
    _starts: dict[ExecutorId, int] | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, data: Any) -> Any:
        """A version-1 record (one map entry per executor) read as version 2."""
        if not isinstance(data, dict) or "workers" in data or "executor_node_port" not in data:
            return data
        enp, starts = data.get("executor_node_port"), data.get("executor_start_time_secs", {})
        if not isinstance(enp, dict) or not isinstance(starts, dict):
            raise ValueError("executor_node_port and executor_start_time_secs must be objects")
        placements: dict[ExecutorId, tuple[str, int]] = {}
        for key, np in enp.items():
            if not isinstance(np, dict) or not isinstance(np.get("node"), str) or not isinstance(np.get("port"), int):
                raise ValueError(f"executor_node_port[{key!r}] must be {{node, port}}")
            placements[parse_executor_key(key)] = (np["node"], np["port"])
        start_times = {parse_executor_key(k): v for k, v in starts.items()}
        out = {k: v for k, v in data.items() if k not in ("executor_node_port", "executor_start_time_secs")}
        out["workers"] = [w.model_dump() for w in _group_workers(placements, start_times)]
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Assignment):
            return NotImplemented
        return (self.master_code_dir, self.code_checksum, self.node_host, self.workers, self.owner) == (
            other.master_code_dir, other.code_checksum, other.node_host, other.workers, other.owner)

    __hash__ = None  # type: ignore[assignment]

    def _index(self) -> None:
        placements: dict[ExecutorId, tuple[str, int]] = {}
        starts: dict[ExecutorId, int] = {}
        for w in self.workers:
            for ex in decode_executors(w.executors):
                placements[ex] = (w.node, w.port)
                starts[ex] = w.start_time_secs
        self._placements, self._starts = placements, starts

    def executors(self) -> dict[ExecutorId, tuple[str, int]]:
        """executor → (node, port)."""
        if self._placements is None:
            self._index()
        return dict(self._placements)

    def start_times(self) -> dict[ExecutorId, int]:
        if self._starts is None:
            self._index()
        return dict(self._starts)

    def slots(self) -> set[tuple[str, int]]:
        """The (node, port) slots this assignment uses."""
        return {(w.node, w.port) for w in self.workers}

    def executors_on(self, node: str, port: int | None = None) -> dict[int, list[ExecutorId]]:
        """port → sorted executors this assignment places on ``node`` (optionally one port)."""
        out: dict[int, list[ExecutorId]] = {}
        for w in self.workers:
            if w.node == node and (port is None or w.port == port):
                out.setdefault(w.port, []).extend(decode_executors(w.executors))
        return {p: sorted(exs) for p, exs in out.items()}

    @classmethod
    def build(
        cls,
        *,
        master_code_dir: str,
        code_checksum: str,
        node_host: dict[str, str],
        executor_node_port: dict[ExecutorId, tuple[str, int]],
        executor_start_time_secs: dict[ExecutorId, int],
        owner: str = "",
    ) -> Assignment:
        a = cls(
            master_code_dir=master_code_dir,
            code_checksum=code_checksum,
            node_host=node_host,
            workers=_group_workers(executor_node_port, executor_start_time_secs),
            owner=owner,
        )
        a._placements = dict(executor_node_port)
        a._starts = {ex: int(executor_start_time_secs.get(ex, 0)) for ex in executor_node_port}
        return a


def _group_workers(placements: dict[ExecutorId, tuple[str, int]], starts: dict[ExecutorId, int]) -> list[WorkerAssignment]:
    groups: dict[tuple[str, int, int], list[ExecutorId]] = {}
    for ex, (node, port) in placements.items():
        groups.setdefault((node, port, int(starts.get(ex, 0))), []).append(ex)
    return [WorkerAssignment(node=node, port=port, start_time_secs=start, executors=encode_executors(exs))
            for (node, port, start), exs in sorted(groups.items())]


# ----------------------------------------------------------------------------------------------
# /storm/supervisors/<supervisor-id>


class SupervisorWorkerHeartbeat(_Model):
    """One worker's liveness as its supervisor reads it from the worker's LocalState heartbeat
    (Storm 2's ``SupervisorWorkerHeartbeat``): nimbus judges executors alive from these."""

    topology_id: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)
    executors: str  # "1-4 5-5"
    time_secs: int  # the worker's own heartbeat time (changes every worker.heartbeat.frequency.secs)

    _executors = field_validator("executors")(_check_executor_list)

    def executor_ids(self) -> list[ExecutorId]:
        return decode_executors(self.executors)


class SupervisorInfo(Record):
    time_secs: int
    hostname: str = Field(min_length=1)
    assignment_id: str = Field(min_length=1)
    used_ports: list[int] = []
    meta: list[int] = []  # all configured slot ports, as in Storm
    scheduler_meta: dict[str, str] = {}
    uptime_secs: int = 0
    gale_version: str = GALE_VERSION
    resources_map: dict[str, float] = {}
    server_port: int | None = None  # the supervisor's /metrics port
    #: where the supervisor serves its workers' logs and its own (gale.supervisor.logserver); None: it
    #: serves none. Optional fields added in place: records without them still decode (version 1)
    logviewer_host: str | None = None
    logviewer_port: int | None = Field(default=None, ge=1, le=65535)
    #: its workers' heartbeats, batched into the node it writes every supervisor.heartbeat.frequency.secs
    worker_heartbeats: list[SupervisorWorkerHeartbeat] = []


# ----------------------------------------------------------------------------------------------
# /storm/workerbeats/<topology-id>/<node>-<port>

WindowMap = dict[str, dict[str, int]]
WindowAvg = dict[str, dict[str, float]]


class ExecutorStats(_Model):
    """Storm's ExecutorStats: window ("600", "10800", "86400", ":all-time") → stream → value.

    For spouts ``acked``/``failed``/``complete_ms_avg`` are keyed by stream; for bolts they and
    ``executed``/``process_ms_avg``/``execute_ms_avg`` are keyed by input ``component:stream``.
    """

    component: str
    kind: Literal["spout", "bolt"]
    emitted: WindowMap = {}
    transferred: WindowMap = {}
    acked: WindowMap = {}
    failed: WindowMap = {}
    complete_ms_avg: WindowAvg = {}
    executed: WindowMap = {}
    process_ms_avg: WindowAvg = {}
    execute_ms_avg: WindowAvg = {}
    capacity: float = 0.0
    queue_depth: int = 0
    pending: int = 0
    busy_secs: float = 0.0  # how long the running execute()/next_tuple() call has taken so far
    extra: dict[str, float] = {}
    #: labelled gauges, latest value per executor: name → label → value (a Kafka spout's lag per
    #: ``topic/partition``, a keyed state's keys and bytes per key group); shown per component in the UI
    details: dict[str, dict[str, float]] = {}


class WorkerHeartbeat(Record):
    storm_id: str
    executor_stats: dict[str, ExecutorStats]
    time_secs: int
    uptime_secs: int
    start_time_secs: int = 0
    host: str = ""
    port: int = 0
    pid: int = 0
    supervisor_id: str = ""
    worker_id: str = ""
    log_path: str = ""
    metrics_port: int | None = None

    _keys = field_validator("executor_stats")(_check_executor_keys)

    def executors(self) -> list[ExecutorId]:
        return sorted(parse_executor_key(k) for k in self.executor_stats)


# ----------------------------------------------------------------------------------------------
# /storm/errors/<topology-id>/<component>/e<seq>


class ErrorInfo(Record):
    error: str
    error_time_secs: int
    host: str = ""
    port: int = 0


# ----------------------------------------------------------------------------------------------
# /storm/logconfigs/<topology-id>


class LoggerLevel(_Model):
    """One logger's level set for a while (Storm's ``LogLevel``): the workers of the topology (or,
    with ``components``, those running one of them) set ``target_log_level`` and put the logger's
    own level back at ``reset_log_level_timeout_epoch`` (seconds since the epoch)."""

    target_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
    reset_log_level_timeout_epoch: float
    components: list[str] = []


class LogConfig(Record):
    """Storm's ``LogConfig``: logger name (``ROOT`` for the root logger) → its timed level."""

    named_logger_level: dict[str, LoggerLevel] = {}


# ----------------------------------------------------------------------------------------------
# /storm/nimbuses/<host:port>


class NimbusSummary(Record):
    host: str
    port: int
    uptime_secs: int = 0
    is_leader: bool = False
    gale_version: str = GALE_VERSION
    start_time_secs: int = 0
    leader_epoch: int | None = None
