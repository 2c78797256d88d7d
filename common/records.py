"""Typed records for what each znode under ``/storm`` holds.

Field names follow Storm's Thrift structs (``reference/storm-internals.md`` §2) so an operator who
knows Storm can read them; each record is JSON with a ``version`` field (the record schema version;
the software version is ``gale_version``), readable with ``zkCli.sh get``.

:meth:`Record.decode` validates everything and raises :class:`~gale.errors.CorruptRecordError`
naming the path and the problem; it never lets a raw ``KeyError``/``ValueError`` escape.

Executors are ``(start_task, end_task)`` pairs; in JSON maps they are keyed ``"start-end"``.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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
    launch_time_secs: int
    owner: str = ""
    topology_action_options: TopologyActionOptions | None = None
    prev_status: TopologyStatus | None = None
    component_debug: dict[str, DebugOptions] = {}
    topology_version: str = GALE_VERSION


# ----------------------------------------------------------------------------------------------
# /storm/assignments/<topology-id>


class NodePort(_Model):
    node: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)


class Assignment(Record):
    master_code_dir: str
    code_checksum: str = Field(pattern=r"^[0-9a-f]{64}$")
    node_host: dict[str, str]
    executor_node_port: dict[str, NodePort]
    executor_start_time_secs: dict[str, int]
    owner: str = ""

    _keys = field_validator("executor_node_port", "executor_start_time_secs")(_check_executor_keys)

    def executors(self) -> dict[ExecutorId, tuple[str, int]]:
        """executor → (node, port)."""
        return {parse_executor_key(k): (v.node, v.port) for k, v in self.executor_node_port.items()}

    def start_times(self) -> dict[ExecutorId, int]:
        return {parse_executor_key(k): v for k, v in self.executor_start_time_secs.items()}

    def executors_on(self, node: str, port: int | None = None) -> dict[int, list[ExecutorId]]:
        """port → sorted executors this assignment places on ``node`` (optionally one port)."""
        out: dict[int, list[ExecutorId]] = {}
        for ex, (n, p) in self.executors().items():
            if n == node and (port is None or p == port):
                out.setdefault(p, []).append(ex)
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
        return cls(
            master_code_dir=master_code_dir,
            code_checksum=code_checksum,
            node_host=node_host,
            executor_node_port={
                executor_key(ex): NodePort(node=n, port=p) for ex, (n, p) in sorted(executor_node_port.items())
            },
            executor_start_time_secs={executor_key(ex): t for ex, t in sorted(executor_start_time_secs.items())},
            owner=owner,
        )


# ----------------------------------------------------------------------------------------------
# /storm/supervisors/<supervisor-id>


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
# /storm/nimbuses/<host:port>


class NimbusSummary(Record):
    host: str
    port: int
    uptime_secs: int = 0
    is_leader: bool = False
    gale_version: str = GALE_VERSION
    start_time_secs: int = 0
    leader_epoch: int | None = None
