"""A supervisor's Prometheus metrics, served on ``supervisor.metrics.port`` (0: any free port; the
port is published in the supervisor's ZooKeeper record, so nimbus's service discovery finds it).

=============================================== ===========================================================
``gale_supervisor_slots``                        worker slots by ``state`` (empty, waiting_for_code, ...)
``gale_supervisor_worker_launches_total``        worker processes started, by ``reason`` (new, restart)
``gale_supervisor_worker_kills_total``           kill signals sent, by ``reason`` (ASSIGNMENT_CHANGED, ...)
``gale_supervisor_worker_restarts_total``        relaunch decisions, by ``reason`` (PROCESS_EXIT, HB_TIMEOUT, HB_NULL)
``gale_supervisor_worker_heartbeat_age_seconds`` age of each slot's worker heartbeat, by ``port``, ``topology``
``gale_supervisor_code_downloads_total``         topology code downloads, by ``result`` (ok, error)
``gale_supervisor_loop_errors_total``            supervisor loop iterations that crashed (a bug; see the log)
``gale_zookeeper_connected``                     1 while the ZooKeeper session is connected (0: waiting, no quorum)
``gale_zookeeper_wait_seconds``                  seconds waited for ZooKeeper at start
``gale_supervisor_uptime_seconds``, ``gale_supervisor_info``
=============================================== ===========================================================

The supervisor's loop calls :meth:`SupervisorMetrics.observe_slots` after every step; slot states
and restart reasons are taken from the slots' own transition history, so nothing is missed when
several transitions happen within one step.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from prometheus_client import Counter, start_http_server
from prometheus_client.core import GaugeMetricFamily

from gale.log import get_logger
from gale.metrics import new_registry
from gale.records import GALE_VERSION
from gale.supervisor.slot import State

log = get_logger("supervisor.metrics")

_KILL_AND_RELAUNCH = re.compile(r"^KILL_AND_RELAUNCH\((\w+)\)$")


def new_history(before: tuple[str, ...], after: tuple[str, ...]) -> tuple[str, ...]:
    """The entries appended to a bounded history between two observations of it."""
    if before == after:
        return ()
    for k in range(min(len(before), len(after)), 0, -1):
        if before[len(before) - k:] == after[:k]:
            return after[k:]
    return after


class SupervisorMetrics:
    def __init__(self, registry=None):
        self.registry = registry or new_registry()
        r = self.registry
        self.worker_launches = Counter("gale_supervisor_worker_launches", "Worker processes started, by reason.",
                                       ["reason"], registry=r)
        self.worker_kills = Counter("gale_supervisor_worker_kills", "Kill signals sent to workers, by reason.",
                                    ["reason"], registry=r)
        self.worker_restarts = Counter("gale_supervisor_worker_restarts",
                                       "Decisions to kill and relaunch a slot's worker, by reason.", ["reason"],
                                       registry=r)
        self.code_downloads = Counter("gale_supervisor_code_downloads", "Topology code downloads, by result.",
                                      ["result"], registry=r)
        self.loop_errors = Counter("gale_supervisor_loop_errors",
                                   "Supervisor loop iterations that crashed (see the supervisor log).", registry=r)
        for reason in ("new", "restart"):
            self.worker_launches.labels(reason=reason)
        for result in ("ok", "error"):
            self.code_downloads.labels(result=result)
        self._lock = threading.Lock()
        self._slots: dict[int, tuple[str, str | None, str | None]] = {}  # port → (state, worker id, topology)
        self._history: dict[int, tuple[str, ...]] = {}
        self.supervisor: Any = None
        self.port: int | None = None
        self._server = None
        r.register(_SlotCollector(self))

    # ------------------------------------------------------------------ called by the supervisor

    def observe_slots(self, supervisor: Any) -> None:
        """Snapshot the slots (on the supervisor's loop thread) and count new relaunch decisions."""
        snapshot = {}
        for port, slot in list(supervisor.slots.items()):
            snapshot[port] = (slot.state.value, slot.worker_id, slot.current.topology_id if slot.current else None)
            before = self._history.get(port)
            if before is not None:
                for note in new_history(before, slot.history):
                    m = _KILL_AND_RELAUNCH.match(note)
                    if m:
                        self.worker_restarts.labels(reason=m.group(1)).inc()
            self._history[port] = slot.history
        with self._lock:
            self._slots = snapshot
        self.supervisor = supervisor

    def serve(self, port: int, supervisor: Any, host: str | None = None) -> int:
        """Serve ``/metrics`` on ``port`` (0: any); returns the bound port."""
        self.supervisor = supervisor
        if host is None:
            host = supervisor.config.supervisor_metrics_host
        self._server, _thread = start_http_server(int(port or 0), addr=host, registry=self.registry)
        self.port = self._server.server_port
        log.info("metrics-listening", host=host, port=self.port)
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def slots_snapshot(self) -> dict[int, tuple[str, str | None, str | None]]:
        with self._lock:
            return dict(self._slots)


class _SlotCollector:
    def __init__(self, metrics: SupervisorMetrics):
        self.metrics = metrics

    def describe(self):
        return []

    def collect(self):
        m = self.metrics
        slots = m.slots_snapshot()
        by_state = GaugeMetricFamily("gale_supervisor_slots", "Worker slots by state.", labels=["state"])
        counts = {s.value: 0 for s in State}
        for state, _wid, _tid in slots.values():
            counts[state] = counts.get(state, 0) + 1
        for state, n in sorted(counts.items()):
            by_state.add_metric([state.lower()], n)
        yield by_state
        age = GaugeMetricFamily("gale_supervisor_worker_heartbeat_age_seconds",
                                "Seconds since the slot's worker last wrote its LocalState heartbeat.",
                                labels=["port", "topology"])
        sup = m.supervisor
        now = time.time()
        if sup is not None:
            for port, (_state, wid, tid) in sorted(slots.items()):
                if not wid:
                    continue
                try:
                    hb = sup.containers.heartbeat(wid)
                except Exception:  # noqa: BLE001 - a worker directory vanishing mid-scrape
                    hb = None
                if hb and isinstance(hb.get("time_secs"), (int, float)):
                    age.add_metric([str(port), tid or ""], max(0.0, now - float(hb["time_secs"])))
            uptime = GaugeMetricFamily("gale_supervisor_uptime_seconds", "Seconds since this supervisor started.")
            uptime.add_metric([], max(0.0, now - sup.started))
            yield uptime
            connected = GaugeMetricFamily("gale_zookeeper_connected",
                                          "1 while this daemon's ZooKeeper session is connected.")
            connected.add_metric([], 1.0 if getattr(sup, "zk_state", None) == "CONNECTED" else 0.0)
            yield connected
            waited = GaugeMetricFamily("gale_zookeeper_wait_seconds", "Seconds this daemon waited for ZooKeeper at start.")
            waited.add_metric([], float(getattr(sup, "zk_wait_secs", 0.0)))
            yield waited
            info = GaugeMetricFamily("gale_supervisor_info", "This supervisor: id, host and version.",
                                     labels=["supervisor_id", "host", "version"])
            info.add_metric([sup.supervisor_id, sup.hostname, GALE_VERSION], 1.0)
            yield info
        yield age
