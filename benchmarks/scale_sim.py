"""Simulated supervisors and workers for the scale benchmark (``benchmarks/bench_scale.py``).

A *simulated node* is Gale's own :class:`~gale.supervisor.daemon.Supervisor` — registration, the
assignment watch and resync, the slot state machines, code downloads from nimbus, LocalState of its
slots — given a container launcher (:class:`SimContainers`) that runs each worker as a
:class:`SimWorker` in threads of this process instead of a ``worker run`` process.

A :class:`SimWorker` is Gale's :class:`~gale.worker.daemon.Worker` without executors or sockets:
its own ZooKeeper session (or one per node, ``worker_sessions="node"``), the real assignment watch
and refresh (exit when its executors move), the real workerbeat loop writing
``/workerbeats/<id>/<node>-<port>`` with real :class:`~gale.records.ExecutorStats` built by Gale's
stats collectors from synthetic counters that grow every beat (a busy worker: every beat differs),
and its LocalState heartbeat kept in memory and computed when read (a live worker's heartbeat is
always fresh; :meth:`SimWorker.local_heartbeat`), which the supervisor reads through
:meth:`SimContainers.heartbeat` — a thousand heartbeat threads waking every second would load the
machine more than anything measured. What it does not run: executors, transfer sockets, Spark,
user code.

One process hosts several nodes (:func:`run_nodes`); the benchmark kills a process with ``kill
-9`` to lose its nodes and their workers at once, as a machine failure would. Each worker reports
``running`` (first workerbeat written) and ``exited`` events to the benchmark through a
multiprocessing queue.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

from kazoo.exceptions import KazooException

from gale import log as glog
from gale.cluster_state import ClusterState
from gale.errors import GaleError
from gale.records import ExecutorId, TopologyStatus, executor_key
from gale.topology.definition import TopologyTasks
from gale.zk import start_client
from gale.supervisor.daemon import Supervisor
from gale.supervisor.slot import LocalAssignment
from gale.worker.daemon import EXIT_SETUP_FAILED, Worker
from gale.worker.runtime.stats import ExecutorStatsCollector
from gale.config_keys import Config

log = glog.get_logger("scale-sim")


class SyntheticRuntime:
    """Stands in for :class:`~gale.worker.runtime.runtime.WorkerRuntime` where the worker's
    coordination code touches it: the spouts' active flag and executor stats. Each roll adds
    ``tuples_per_sec`` × elapsed seconds to every executor's counters."""

    def __init__(self, layout: TopologyTasks, executors: list[ExecutorId], tuples_per_sec: float, active: bool):
        self.active = active
        self.rate = tuples_per_sec
        self.collectors: dict[ExecutorId, ExecutorStatsCollector] = {}
        for ex in executors:
            component = layout.executor_to_component[ex]
            kind = "spout" if component in layout.defn.components and layout.defn.components[component].kind == "spout" else "bolt"
            self.collectors[ex] = ExecutorStatsCollector(component, kind)
        self._last = time.monotonic()

    def set_active(self, active: bool) -> None:
        self.active = active

    def roll_stats(self, now: float | None = None) -> None:
        t = time.monotonic()
        n = max(1, int(self.rate * (t - self._last)))
        self._last = t
        for c in self.collectors.values():
            if c.kind == "spout":
                c.emitted["default"] += n
                c.transferred["default"] += n
                c.acked["default"] += n
                c.complete_ms["default"] += 2.5 * n
                c.complete_n["default"] += n
            else:
                key = "spout:default"
                c.executed[key] += n
                c.execute_ms[key] += 0.05 * n
                c.execute_n[key] += n
                c.process_ms[key] += 0.06 * n
                c.process_n[key] += n
                c.acked[key] += n
                c.emitted["default"] += n
                c.transferred["default"] += n
            c.roll(now)

    def executor_stats(self):
        return {executor_key(ex): c.to_record() for ex, c in self.collectors.items()}


class NullTransfer:
    """Stands in for :class:`~gale.worker.transfer.Transfer`: keeps the routes the worker sets."""

    def __init__(self) -> None:
        self.stats: dict[str, float] = {}
        self.routes: dict[int, str] = {}

    def set_routes(self, routes: dict[int, str], *_identities: Any) -> None:
        self.routes = routes


def _routes_of(worker: Worker, assignment) -> tuple:
    routes = worker._routes(assignment)
    return routes if isinstance(routes, tuple) else (routes,)


class SimWorker(Worker):
    """A worker's coordination with real code paths and no executors (see the module doc)."""

    def __init__(self, config: Config, topology_id: str, supervisor_id: str, port: int, worker_id: str, *,
                 client_factory, on_event, tuples_per_sec: float):
        super().__init__(config, topology_id, supervisor_id, port, worker_id)
        self._client_factory = client_factory
        self._owns_client = False
        self._on_event = on_event
        self.tuples_per_sec = tuples_per_sec
        self.done = threading.Event()

    def write_local_heartbeat(self) -> None:
        pass  # LocalState-free: see local_heartbeat

    def local_heartbeat(self) -> dict[str, Any] | None:
        """What the worker's LocalState heartbeat would hold now: the time, while the worker runs."""
        if self.stop_event.is_set():
            return None
        return {"time_secs": time.time(), "topology_id": self.topology_id, "port": self.port,
                "executors": [list(e) for e in self.executors], "pid": os.getpid()}

    def setup(self) -> None:
        self.client, self._owns_client = self._client_factory()
        self.state = ClusterState(self.client, self.layout)
        assignment = self.state.assignment(self.topology_id, watch=self._watch)
        self.executors = self._my_executors(assignment)
        if not self.executors:
            raise GaleError(f"no executors assigned to {self.supervisor_id}:{self.port} for {self.topology_id}")
        base = self.state.storm_base(self.topology_id, watch=self._watch)
        if base is None:
            raise GaleError(f"topology {self.topology_id} does not exist")
        defn, topology = self.load_topology()[:2]
        layout = TopologyTasks.of(defn, topology.to_dict(without_secret=True), base)
        self.runtime = SyntheticRuntime(layout, self.executors, self.tuples_per_sec,
                                        active=base.status == TopologyStatus.ACTIVE)
        self.transfer = NullTransfer()
        self.transfer.set_routes(*_routes_of(self, assignment))

    def start(self) -> None:
        threading.Thread(target=self._main, name=f"sim-worker-{self.port}", daemon=True).start()

    def _main(self) -> None:
        try:
            self.setup()
        except Exception as exc:  # noqa: BLE001 - the supervisor relaunches, as for a real worker
            log.warning("sim-worker-setup-failed", topology=self.topology_id, port=self.port, error=str(exc))
            self.exit_code = EXIT_SETUP_FAILED
            self.stop_event.set()
            self._close()
            return
        try:
            self.write_zk_heartbeat()
        except KazooException:
            pass
        self._on_event("running", self.topology_id, self.supervisor_id, self.port,
                       [list(e) for e in self.executors], time.time())
        self._start_thread(self._beats_loop, "workerbeats")
        self._start_thread(self._refresh_loop, "refresh")
        self.stop_event.wait()
        self._close()

    def _close(self) -> None:
        if self.state is not None and self.executors:
            try:
                self.state.remove_worker_heartbeat(self.topology_id, self.supervisor_id, self.port)
            except KazooException:
                pass
        if self._owns_client and self.client is not None:
            self.client.stop()
            self.client.close()
        self._on_event("exited", self.topology_id, self.supervisor_id, self.port, [], time.time())
        self.done.set()


class SimContainers:
    """The container launcher of a simulated node: workers are :class:`SimWorker` threads."""

    def __init__(self, config: Config, supervisor_id: str, config_path: str | Path, *, on_event,
                 worker_sessions: str = "own", tuples_per_sec: float = 100.0):
        self.config = config
        self.supervisor_id = supervisor_id
        self.on_event = on_event
        self.worker_sessions = worker_sessions
        self.tuples_per_sec = tuples_per_sec
        self.workers: dict[str, SimWorker] = {}
        self._node_client = None
        self._lock = threading.Lock()

    def _client(self):
        if self.worker_sessions == "own":
            return start_client(self.config), True
        with self._lock:
            if self._node_client is None:
                self._node_client = start_client(self.config)
            return self._node_client, False

    def start(self) -> None:
        """Nothing to prepare: simulated workers are threads (a real node starts its fork server)."""

    def close(self) -> None:
        """Nothing to stop."""

    def launch(self, assignment: LocalAssignment, port: int, worker_id: str) -> int:
        w = SimWorker(self.config, assignment.topology_id, self.supervisor_id, port, worker_id,
                      client_factory=self._client, on_event=self.on_event, tuples_per_sec=self.tuples_per_sec)
        self.workers[worker_id] = w
        w.start()
        return os.getpid()

    def alive(self, worker_id: str | None) -> bool:
        w = self.workers.get(worker_id) if worker_id else None
        return w is not None and not w.done.is_set()

    def heartbeat(self, worker_id: str | None) -> dict[str, Any] | None:
        w = self.workers.get(worker_id) if worker_id else None
        return None if w is None else w.local_heartbeat()

    def kill(self, worker_id: str, force: bool) -> None:
        w = self.workers.get(worker_id)
        if w is not None:
            w.stop_event.set()

    def cleanup(self, worker_id: str) -> None:
        self.workers.pop(worker_id, None)

    def worker_ids_on_disk(self) -> list[str]:
        return []


def run_nodes(specs: list[dict[str, Any]], conf: dict[str, Any], events, control, worker_sessions: str,
              tuples_per_sec: float) -> None:
    """A process hosting simulated nodes: start one supervisor per spec (``id``, ``ports``,
    ``local_dir``), report events on ``events``, stop when ``control`` receives anything."""
    glog.configure(fmt="json", level=os.environ.get("GALE_SCALE_SIM_LOG", "WARNING"), daemon="scale-sim")
    random.seed(os.getpid())

    def on_event(*event: Any) -> None:
        events.put(event)

    supervisors = []
    for spec in specs:
        node_conf = dict(conf, **{"storm.local.dir": spec["local_dir"], "supervisor.slots.ports": spec["ports"],
                                  "supervisor.id": spec["id"]})

        def containers(c, sid, path, _on_event=on_event):
            return SimContainers(c, sid, path, on_event=_on_event, worker_sessions=worker_sessions,
                                 tuples_per_sec=tuples_per_sec)

        sup = Supervisor(Config.resolve(node_conf, where=f"node {spec['id']}", allow_user_keys=False),
                         containers=containers)
        sup.start()
        supervisors.append(sup)
    events.put(("nodes-up", os.getpid(), [s["id"] for s in specs], time.time()))
    control.recv()
    for sup in supervisors:
        sup.stop(kill_workers=True)
