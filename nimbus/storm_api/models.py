"""Response models of Storm's REST API, for validation and for the OpenAPI document.

Field names are Storm's (camelCase). Latencies and capacity are strings with three decimals, as
Storm returns them; counts are integers; times are Unix seconds. Models allow extra fields so a
field Gale adds later never breaks a response.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _M(BaseModel):
    model_config = ConfigDict(extra="allow")


Latency = str  # "0.048": milliseconds with three decimals


class ErrorFields(_M):
    lastError: str = Field(description="the component's newest error ('' if none)")
    errorHost: str = Field(description="host of the worker that reported it")
    errorPort: int | None = Field(description="slot port of the worker that reported it")
    errorTime: int | None = Field(description="when, in Unix seconds")
    errorLapsedSecs: int | None = Field(description="seconds since then")
    errorWorkerLogLink: str = Field(description="log file of that worker, on its host")


class WindowStats(_M):
    window: str = Field(description="600, 10800, 86400 or :all-time")
    windowPretty: str
    emitted: int = Field(description="tuples emitted")
    transferred: int = Field(description="emitted tuples sent to at least one bolt")
    acked: int = Field(description="spouts: tuple trees completed")
    failed: int = Field(description="spouts: tuple trees failed or timed out")
    completeLatency: Latency = Field(description="mean ms from a spout's emit to its tree's completion")


class SpoutRow(ErrorFields):
    spoutId: str
    encodedSpoutId: str
    executors: int
    tasks: int
    emitted: int
    transferred: int
    acked: int = Field(description="tuple trees completed")
    failed: int = Field(description="tuple trees failed (explicitly or by timeout)")
    completeLatency: Latency


class BoltRow(ErrorFields):
    boltId: str
    encodedBoltId: str
    executors: int
    tasks: int
    emitted: int
    transferred: int
    executed: int = Field(description="input tuples executed")
    acked: int = Field(description="input tuples acked")
    failed: int = Field(description="input tuples failed")
    executeLatency: Latency = Field(description="mean ms in execute() (sampled)")
    processLatency: Latency = Field(description="mean ms from receipt to ack (sampled)")
    capacity: Latency = Field(description="executed × execute latency / last 10 min; ~1.0 = saturated")


class WorkerRow(_M):
    supervisorId: str
    host: str
    port: int
    topologyId: str
    topologyName: str
    executorsTotal: int
    componentNumTasks: dict[str, int]
    uptime: str
    uptimeSeconds: int
    workerLogLink: str = Field(description="path of the worker's log file on its host (Gale has no logviewer)")
    workerLogPath: str
    running: bool = Field(description="the worker heartbeats (its executors run)")
    pid: int | None = None
    workerId: str | None = None
    metricsPort: int | None = None
    heartbeatAgeSecs: int | None = None
    stats: dict[str, Any] | None = None


class TopologyPage(_M):
    id: str
    encodedId: str
    name: str
    owner: str
    status: Literal["ACTIVE", "INACTIVE", "REBALANCING", "KILLED"]
    uptime: str
    uptimeSeconds: int
    tasksTotal: int
    workersTotal: int
    executorsTotal: int
    executorsRunning: int
    msgTimeout: int
    window: str
    windowHint: str
    replicationCount: int
    topologyStats: list[WindowStats]
    spouts: list[SpoutRow]
    bolts: list[BoltRow]
    workers: list[WorkerRow]
    configuration: dict[str, Any]
    pendingAction: dict[str, Any] | None = None
    checkpoints: dict[str, Any] | None = Field(
        default=None, description="Gale: a stateful topology's checkpoints (txid, committed, failures, lastDurationMs, "
                                  "lastCommitTime, lastCommitAgeSecs, stateBytesWritten); null without state")


class ComponentError(_M):
    errorTime: int = Field(description="Unix seconds")
    errorHost: str
    errorPort: int
    error: str
    errorLapsedSecs: int
    errorWorkerLogLink: str


class InputStats(_M):
    component: str
    encodedComponentId: str
    stream: str
    executed: int
    acked: int
    failed: int
    executeLatency: Latency
    processLatency: Latency


class OutputStats(_M):
    stream: str
    emitted: int
    transferred: int


class ExecutorRow(_M):
    id: str = Field(description="task range, '[start-end]'")
    encodedId: str
    tasks: int
    supervisorId: str | None
    host: str | None
    port: int | None
    uptime: str
    uptimeSeconds: int
    running: bool
    emitted: int
    transferred: int
    acked: int
    failed: int
    workerLogLink: str
    workerLogPath: str


class ComponentPage(_M):
    id: str
    encodedId: str
    name: str
    topologyId: str
    encodedTopologyId: str
    topologyStatus: str
    componentType: Literal["spout", "bolt"]
    executors: int
    tasks: int
    window: str
    windowHint: str
    componentErrors: list[ComponentError] = Field(description="the last 10 errors, newest first")
    spoutSummary: list[WindowStats] | None = Field(default=None, description="spouts: stats per window")
    boltStats: list[dict[str, Any]] | None = Field(default=None, description="bolts: stats per window")
    inputStats: list[InputStats] | None = Field(default=None, description="bolts: per input component/stream")
    outputStats: list[OutputStats]
    executorStats: list[ExecutorRow]


class ClusterSummary(_M):
    stormVersion: str
    supervisors: int
    topologies: int
    slotsTotal: int
    slotsUsed: int
    slotsFree: int
    executorsTotal: int
    tasksTotal: int
    schedulerDisplayResource: bool


class SupervisorRow(_M):
    id: str
    host: str
    uptime: str
    uptimeSeconds: int
    slotsTotal: int
    slotsUsed: int
    slotsFree: int
    version: str
    ports: list[int]
    usedPorts: list[int]
    metricsPort: int | None


class SupervisorSummary(_M):
    supervisors: list[SupervisorRow]
    schedulerDisplayResource: bool = False


class SupervisorPage(_M):
    supervisors: list[SupervisorRow]
    workers: list[WorkerRow]
    schedulerDisplayResource: bool = False


class NimbusRow(_M):
    host: str
    port: int
    status: Literal["Leader", "Not a Leader", "Dead"]
    nimbusUpTime: str
    nimbusUpTimeSeconds: int
    version: str


class NimbusSummary(_M):
    nimbuses: list[NimbusRow]


class TopologyRow(_M):
    id: str
    encodedId: str
    name: str
    status: str
    uptime: str
    uptimeSeconds: int
    tasksTotal: int
    workersTotal: int
    executorsTotal: int
    replicationCount: int


class TopologySummary(_M):
    topologies: list[TopologyRow]
    schedulerDisplayResource: bool = False


class HostPort(_M):
    host: str
    port: int


class TopologyWorkers(_M):
    hostPortList: list[HostPort]
    logviewerPort: int | None = None


class TopologyMetrics(_M):
    window: str
    windowHint: str
    spouts: list[dict[str, Any]]
    bolts: list[dict[str, Any]]


class OperationResult(_M):
    topologyOperation: Literal["activate", "deactivate", "rebalance", "kill"]
    topologyId: str
    status: Literal["success"]


ComponentName = Annotated[str, Field(min_length=1, max_length=128)]
ExecutorCount = Annotated[int, Field(ge=1, le=100000)]


class RebalanceOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    numWorkers: int | None = Field(default=None, ge=1, le=10000, description="new number of workers")
    executors: dict[ComponentName, ExecutorCount] = Field(
        default_factory=dict, max_length=1000,
        description="component → new executor count (≥ 1; above its task count, Gale gives it that many tasks)")
    tasks: dict[ComponentName, ExecutorCount] = Field(
        default_factory=dict, max_length=1000,
        description="Gale: component → new task count (keyed state moves by key groups; docs/state.md, 'Rescaling')")


class RebalanceBody(BaseModel):
    """Storm's body: ``{"rebalanceOptions": {"numWorkers": 2, "executors": {"split": 4}}, "callback": "foo"}``."""

    model_config = ConfigDict(extra="ignore")
    rebalanceOptions: RebalanceOptions = Field(default_factory=RebalanceOptions)
    callback: str | None = Field(default=None, max_length=256, description="ignored (Storm's JSONP leftovers)")
