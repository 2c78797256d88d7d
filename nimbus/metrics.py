"""Nimbus's Prometheus metrics and the HTTP service-discovery endpoint for every Gale daemon.

Served on ``nimbus.http.port``:

* ``GET /metrics`` — this nimbus's registry (one :class:`~prometheus_client.CollectorRegistry` per
  daemon, never the process-global one);
* ``GET /api/v1/prometheus/targets`` — Prometheus ``http_sd_configs`` targets: every registered
  nimbus, every live supervisor's ``/metrics`` and every worker with a fresh heartbeat, labelled
  ``daemon`` (nimbus, supervisor, worker) and, for workers, ``topology``, ``supervisor`` and
  ``slot``. Workers come and go; Prometheus re-reads this list every ``refresh_interval``.

Metrics (names carry units; counters end in ``_total``):

=============================================== ===========================================================
``gale_nimbus_is_leader``                        1 on the leader
``gale_zookeeper_connected``                     1 while the ZooKeeper session is connected (0: waiting, no quorum)
``gale_zookeeper_wait_seconds``                  seconds waited for ZooKeeper at start
``gale_nimbus_leader_elections_total``           times this nimbus became the leader
``gale_nimbus_scheduling_rounds_total``          scheduling rounds run
``gale_nimbus_scheduling_round_duration_seconds`` histogram of round durations
``gale_nimbus_scheduling_round_errors_total``    rounds that crashed (a bug; see the log)
``gale_nimbus_executors_reassigned_total``       executors moved, by ``reason`` (dead, rebalance)
``gale_nimbus_corrupt_znodes_total``             unreadable ZooKeeper records seen
``gale_nimbus_http_requests_total``              API requests by ``method``, ``route``, ``status``
``gale_nimbus_http_request_duration_seconds``    histogram by ``method``, ``route``
``gale_nimbus_uptime_seconds``                   seconds since this nimbus started
``gale_cluster_topologies``                      topologies by ``status`` (leader only)
``gale_cluster_supervisors``                     live supervisors (leader only)
``gale_cluster_slots``                           worker slots by ``state`` (used, free) (leader only)
``gale_cluster_executors``                       executors assigned (leader only)
``gale_cluster_state_up``                        1 when the last read of ZooKeeper for this scrape worked
=============================================== ===========================================================

Cluster-wide gauges come from the leader only, so ``sum()`` over several nimbuses stays right.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from gale.log import get_logger
from gale.metrics import new_registry
from gale.records import GALE_VERSION, TopologyStatus

if TYPE_CHECKING:  # pragma: no cover
    from fastapi import FastAPI

    from gale.nimbus.daemon import Nimbus

log = get_logger("nimbus.metrics")

ROUND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
HTTP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class NimbusMetrics:
    """The metrics one nimbus exports. The daemon calls the counters; the rest is read at scrape."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or new_registry()
        r = self.registry
        self.nimbus: Nimbus | None = None
        self.elections = Counter("gale_nimbus_leader_elections", "Times this nimbus became the leader.", registry=r)
        self.rounds = Counter("gale_nimbus_scheduling_rounds", "Scheduling rounds run.", registry=r)
        self.round_duration = Histogram("gale_nimbus_scheduling_round_duration_seconds",
                                        "Duration of scheduling rounds.", buckets=ROUND_BUCKETS, registry=r)
        self.round_errors = Counter("gale_nimbus_scheduling_round_errors",
                                    "Monitor rounds that crashed with an unexpected error (see the nimbus log).",
                                    registry=r)
        self.executors_reassigned = Counter("gale_nimbus_executors_reassigned",
                                            "Executors moved to another slot, by reason (dead, rebalance).",
                                            ["reason"], registry=r)
        self.corrupt_znodes = Counter("gale_nimbus_corrupt_znodes", "Unreadable ZooKeeper records seen.",
                                      registry=r)
        self.http_requests = Counter("gale_nimbus_http_requests", "HTTP API requests by method, route and status.",
                                     ["method", "route", "status"], registry=r)
        self.http_duration = Histogram("gale_nimbus_http_request_duration_seconds",
                                       "HTTP API request durations by method and route.", ["method", "route"],
                                       buckets=HTTP_BUCKETS, registry=r)
        r.register(_ClusterCollector(self))

    def bind(self, nimbus: Nimbus) -> None:
        self.nimbus = nimbus

    def observe_round(self, seconds: float) -> None:
        self.rounds.inc()
        self.round_duration.observe(seconds)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http_requests.labels(method=method, route=route, status=str(status)).inc()
        self.http_duration.labels(method=method, route=route).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _ClusterCollector:
    """Gauges read from nimbus and ZooKeeper at scrape time."""

    def __init__(self, metrics: NimbusMetrics):
        self.metrics = metrics

    def describe(self):
        return []

    def collect(self):
        nimbus = self.metrics.nimbus
        if nimbus is None:
            return
        leader = nimbus.is_leader()
        yield _gauge("gale_nimbus_is_leader", "1 if this nimbus is the leader.", 1.0 if leader else 0.0)
        yield _gauge("gale_zookeeper_connected", "1 while this daemon's ZooKeeper session is connected.",
                     1.0 if nimbus.zk_state == "CONNECTED" else 0.0)
        yield _gauge("gale_zookeeper_wait_seconds", "Seconds this daemon waited for ZooKeeper at start.",
                     nimbus.zk_wait_secs)
        yield _gauge("gale_nimbus_uptime_seconds", "Seconds since this nimbus started.",
                     max(0.0, time.time() - nimbus.started_at))
        info = GaugeMetricFamily("gale_nimbus_info", "This nimbus: version and address.",
                                 labels=["version", "address"])
        info.add_metric([GALE_VERSION, nimbus.address], 1.0)
        yield info
        up = 1.0
        families: list[Any] = []
        if leader and nimbus.state is not None:
            try:
                families = _cluster_families(nimbus)
            except Exception as exc:  # noqa: BLE001 - a scrape must not fail because ZooKeeper is away
                log.warning("metrics-cluster-read-failed", error=f"{type(exc).__name__}: {exc}")
                up = 0.0
        yield _gauge("gale_cluster_state_up", "1 if reading the cluster state for this scrape worked.", up)
        yield from families


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g


def _cluster_families(nimbus: Nimbus) -> list[GaugeMetricFamily]:
    state = nimbus.state
    bases = state.storm_bases()
    by_status = {s.value: 0 for s in TopologyStatus}
    for base in bases.values():
        by_status[base.status.value] += 1
    topologies = GaugeMetricFamily("gale_cluster_topologies", "Topologies by status.", labels=["status"])
    for status, n in sorted(by_status.items()):
        topologies.add_metric([status], n)
    supervisors = state.supervisor_infos()
    assignments = state.assignments()
    used: dict[str, set[int]] = {}
    executors = 0
    for a in assignments.values():
        for node, port in a.executors().values():
            used.setdefault(node, set()).add(port)
            executors += 1
    total = sum(len(info.meta) for info in supervisors.values())
    busy = sum(len(used.get(sid, set()) & set(info.meta)) for sid, info in supervisors.items())
    slots = GaugeMetricFamily("gale_cluster_slots", "Worker slots of live supervisors by state.", labels=["state"])
    slots.add_metric(["used"], busy)
    slots.add_metric(["free"], total - busy)
    return [
        topologies,
        _gauge("gale_cluster_supervisors", "Live supervisors (registered in ZooKeeper).", len(supervisors)),
        slots,
        _gauge("gale_cluster_executors", "Executors assigned to slots.", executors),
    ]


# ----------------------------------------------------------------------------- service discovery


def sd_targets(nimbus: Nimbus) -> list[dict[str, Any]]:
    """Prometheus HTTP SD: ``[{"targets": ["host:port"], "labels": {...}}, ...]``."""
    state = nimbus.state
    groups: list[dict[str, Any]] = []
    for address, summary in sorted(state.nimbus_summaries().items()):
        groups.append({"targets": [f"{summary.host}:{summary.port}"], "labels": {"daemon": "nimbus"}})
    for sid, info in sorted(state.supervisor_infos().items()):
        if info.server_port:
            groups.append({"targets": [f"{info.hostname}:{info.server_port}"],
                           "labels": {"daemon": "supervisor", "supervisor": sid}})
    stale_after = float(nimbus.config.nimbus_task_timeout_secs)
    now = time.time()
    for tid in sorted(state.storm_ids()):
        for (node, port), hb in sorted(state.worker_heartbeats(tid).items()):
            if not hb.metrics_port or now - hb.time_secs > stale_after:
                continue
            host = hb.host or node
            groups.append({"targets": [f"{host}:{hb.metrics_port}"],
                           "labels": {"daemon": "worker", "topology": tid, "supervisor": node, "slot": str(port)}})
    return groups


def install(app: FastAPI, nimbus: Nimbus) -> None:
    """Mount ``/metrics`` and ``/api/v1/prometheus/targets``; observe every API request."""
    from fastapi import APIRouter, Depends

    from gale.nimbus.api import ERROR_RESPONSES, token_checks

    metrics = nimbus.metrics
    if not isinstance(metrics, NimbusMetrics):
        metrics = NimbusMetrics()
        metrics.bind(nimbus)
        nimbus.metrics = metrics
    observers = getattr(app.state, "request_observers", None)
    if observers is not None:
        observers.append(metrics.observe_request)
    reader, _writer = token_checks(nimbus)
    router = APIRouter(tags=["metrics"], responses=ERROR_RESPONSES)

    @router.get("/metrics", dependencies=[Depends(reader)], response_class=Response,
                responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
    def metrics_endpoint():
        """This nimbus's Prometheus metrics."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @router.get("/api/v1/prometheus/targets", dependencies=[Depends(reader)])
    def targets() -> list[dict[str, Any]]:
        """Prometheus HTTP service discovery: every nimbus, supervisor and live worker's metrics address."""
        return sd_targets(nimbus)

    app.include_router(router)
