"""The worker process: runs the executors its assignment places on (supervisor, port).

Started only by a supervisor (``worker run TOPOLOGY_ID SUPERVISOR_ID PORT WORKER_ID``). Threads:

* heartbeat — writes the LocalState heartbeat every ``worker.heartbeat.frequency.secs`` from the
  moment the process starts (before ZooKeeper, code loading or Spark), so slow starts and busy
  user code never starve it;
* beats — rolls executor stats and writes ``/storm/workerbeats/<id>/<node>-<port>`` every
  ``task.heartbeat.frequency.secs``;
* refresh — follows ``/storm/storms/<id>`` (activate/deactivate spouts) and the assignment (watch
  plus a poll every ``task.refresh.poll.secs``): new peer locations update the transfer routes; if
  this worker's executors changed or the assignment is gone, the worker exits (Storm's suicide
  rule, so a zombie never keeps running an old plan);
* errors — reports executor errors to ``/storm/errors`` off the executor threads;
* executor threads, the first of which moves the transfer's batches between its rounds, and the
  transfer's standby thread (see :mod:`gale.worker.runtime` and :mod:`gale.worker.transfer`).

SIGTERM: deactivate spouts, stop executors, flush transfers, delete the workerbeat node, exit 0 —
within ``supervisor.worker.shutdown.sleep.secs`` (the supervisor's grace before SIGKILL) whatever
is unreachable: every step gets what remains of a deadline at 80% of the grace (ZooKeeper steps are
skipped while the client is disconnected, see :mod:`gale.deadline`), and an exit deadline at 90%
ends the process if a step is still stuck.
"""

from __future__ import annotations

import ipaddress
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kazoo.exceptions import KazooException, NoNodeError

from gale import log as glog
from gale.clock import REAL_CLOCK
from gale.compiled import hot_path
from gale.config import stored_secret
from gale.config_keys import Config
from gale.cluster_state import ClusterState
from gale.deadline import EXIT_SHARE, GRACEFUL_SHARE, Deadline, ExitDeadline, within
from gale.errors import GaleError
from gale.layout import Layout
from gale.local_state import LocalState
from gale.records import ErrorInfo, TopologyStatus, WorkerHeartbeat
from gale.topology.definition import Topology, TopologyDef, TopologyTasks
from gale.zk import start_client, stop_client
from gale.worker.assembly import Assembly
from gale.worker.debug.debugging import Debugging
from gale.worker.runtime.runtime import WorkerRuntime
from gale.worker.transfer import Transfer

log = glog.get_logger("worker")

HEARTBEAT_KEY = "worker-heartbeat"
EXIT_OK, EXIT_REASSIGNED, EXIT_SETUP_FAILED, EXIT_CRASHED = 0, 0, 20, 30
#: of the graceful deadline, kept for deleting the workerbeat and stopping the ZooKeeper client
ZK_RESERVE_SECS = 0.5
#: the topology's stored configuration with its secret, written 0600 by the supervisor beside the code
STORMCONF = "stormconf.json"


def slot_bind_host(config: Config) -> str:
    """The address a worker binds its slot port to: ``worker.transfer.host`` when set, else the
    address ``storm.local.hostname`` (default: this host's name) resolves to — the address other
    workers connect to — rather than every interface."""
    explicit = config.worker_transfer_host
    if explicit:
        return explicit
    name = config.storm_local_hostname or socket.gethostname()
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise GaleError(f"cannot resolve storm.local.hostname {name!r} to an address to bind the slot port to "
                        f"({exc.strerror}); set storm.local.hostname to this node's address, or "
                        "worker.transfer.host") from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # IPv4 first
    return infos[0][4][0]


def topology_secret(stored_conf: dict[str, Any], where: str) -> bytes:
    """The topology's transport secret from its stored configuration; no secret, no worker."""
    secret = stored_secret(stored_conf)
    if secret is None or len(secret) < 16:
        raise GaleError(f"{where} holds no topology.secret: a worker does not start without the secret its "
                        "supervisor fetches from nimbus with the code (is the supervisor older than nimbus?)")
    return secret.encode()


class Worker:
    def __init__(self, config: Config, topology_id: str, supervisor_id: str, port: int, worker_id: str,
                 *, clock: Any = REAL_CLOCK):
        """``config``: the supervisor's configuration (the topology's own goes over it at
        :meth:`setup`). ``clock`` stamps every heartbeat, workerbeat and error (the supervisor and
        nimbus judge liveness by those stamps) and paces the runtime's timers."""
        self.config = config
        self.clock = clock
        self.topology_id = topology_id
        self.supervisor_id = supervisor_id
        self.port = port
        self.worker_id = worker_id
        self.local = Path(config.storm_local_dir)
        self.worker_dir = self.local / "workers" / worker_id
        self.hb_state = LocalState(self.worker_dir / "heartbeats", keep=60, fsync=False)
        self.layout = Layout(config.storm_zookeeper_root)
        self.started = clock.time()
        self.stop_event = threading.Event()
        self.exit_code = EXIT_OK
        self.exit_reason = ""
        self.executors: list[tuple[int, int]] = []
        self.runtime: WorkerRuntime | None = None
        self.transfer: Transfer | None = None
        self.client = None
        self.state: ClusterState | None = None
        self.errors: queue.Queue = queue.Queue(maxsize=1000)
        self.host = config.storm_local_hostname or socket.gethostname()
        self.log_path = ""
        #: this worker's artifacts directory (its log, events.log; set by run_worker)
        self.artifacts: Path | None = None
        self.debugging: Debugging | None = None
        self._debug_due: float | None = None
        self.metrics = None
        self._refresh_event = threading.Event()
        self.grace = float(config.supervisor_worker_shutdown_sleep_secs)
        self.stop_deadline: Deadline | None = None
        self.exit_deadline = ExitDeadline(EXIT_SHARE * self.grace, code=lambda: self.exit_code, what="worker")

    # ------------------------------------------------------------------ heartbeats

    def write_local_heartbeat(self) -> None:
        self.hb_state.put(HEARTBEAT_KEY, {
            "time_secs": self.clock.time(), "topology_id": self.topology_id, "port": self.port,
            "executors": [list(e) for e in self.executors], "pid": os.getpid(),
        }, cleanup=False)
        self.hb_state.cleanup(keep=5)

    def _heartbeat_loop(self) -> None:
        period = float(self.config.worker_heartbeat_frequency_secs)
        while not self.stop_event.is_set():
            try:
                self.write_local_heartbeat()
            except OSError:
                log.exception("local-heartbeat-failed")
            self.stop_event.wait(period)

    def _beats_loop(self) -> None:
        period = float(self.config.task_heartbeat_frequency_secs)
        while not self.stop_event.wait(period):
            try:
                self.write_zk_heartbeat()
            except NoNodeError:
                # nimbus removed the topology: the refresh loop will notice and stop us
                self._refresh_event.set()
            except KazooException as exc:
                log.warning("workerbeat-failed", error=type(exc).__name__)
            except Exception:  # noqa: BLE001
                log.exception("workerbeat-crashed")

    def heartbeat_record(self) -> WorkerHeartbeat:
        assert self.runtime is not None
        self.runtime.roll_stats()
        stats = self.runtime.executor_stats()
        if self.transfer is not None and stats:
            # transport counters ride along on the first executor's extras (the UI sums extras)
            first = next(iter(stats.values()))
            first.extra.update({f"transfer_{k}": float(v) for k, v in self.transfer.stats.items()})
        return WorkerHeartbeat(
            storm_id=self.topology_id, executor_stats=stats, time_secs=int(self.clock.time()),
            uptime_secs=int(self.clock.time() - self.started), start_time_secs=int(self.started), host=self.host,
            port=self.port, pid=os.getpid(), supervisor_id=self.supervisor_id, worker_id=self.worker_id,
            log_path=self.log_path, metrics_port=self.metrics.port if self.metrics is not None else None,
        )

    def write_zk_heartbeat(self) -> None:
        self.state.set_worker_heartbeat(self.topology_id, self.supervisor_id, self.port, self.heartbeat_record())

    # ------------------------------------------------------------------ errors

    def error_sink(self, component: str, text: str) -> None:
        try:
            self.errors.put_nowait((component, text, int(self.clock.time())))
        except queue.Full:
            pass

    def _errors_loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                component, text, when = self.errors.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self.state.report_error(self.topology_id, component,
                                        ErrorInfo(error=text[-16000:], error_time_secs=when, host=self.host, port=self.port))
            except KazooException as exc:
                log.warning("error-report-failed", component=component, error=type(exc).__name__)

    # ------------------------------------------------------------------ assignment & status

    def _my_executors(self, assignment) -> list[tuple[int, int]]:
        return assignment.executors_on(self.supervisor_id, self.port).get(self.port, []) if assignment else []

    def _routes(self, assignment) -> tuple[dict[int, str], dict[str, str], str]:
        """(task → ``host:port`` of its worker, ``host:port`` → that worker's identity ``node:port``,
        this worker's host)."""
        routes: dict[int, str] = {}
        identities: dict[str, str] = {}
        for (start, end), (node, port) in assignment.executors().items():
            if node == self.supervisor_id and port == self.port:
                continue
            host = assignment.node_host.get(node, node)
            address = f"{host}:{port}"
            identities[address] = f"{node}:{port}"
            for task in range(start, end + 1):
                routes[task] = address
        return routes, identities, assignment.node_host.get(self.supervisor_id, self.supervisor_id)

    #: the task layout this worker runs and the configuration it was computed with (set by setup)
    task_layout: TopologyTasks | None = None
    task_layout_conf: dict[str, Any] | None = None

    def _relayout(self, base) -> bool:
        """True when ``base`` gives another task layout than the one this worker runs (a rebalance
        changed a task count)."""
        if self.task_layout is None:
            return False
        return TopologyTasks.of(self.task_layout.defn, self.task_layout_conf, base).task_to_component != \
            self.task_layout.task_to_component

    def _watch(self, *_args: Any) -> None:
        self._refresh_event.set()

    def refresh(self) -> None:
        assignment = self.state.assignment(self.topology_id, watch=self._watch)
        mine = self._my_executors(assignment)
        if assignment is None or mine != self.executors:
            self.exit_reason = "assignment removed" if assignment is None else "executors reassigned"
            log.info("worker-reassigned-exiting", reason=self.exit_reason)
            self.exit_code = EXIT_REASSIGNED
            self.stop_event.set()
            return
        self.transfer.set_routes(*self._routes(assignment))
        base = self.state.storm_base(self.topology_id, watch=self._watch)
        if base is not None and self._relayout(base):
            # a rebalance changed a task count: task ids shift, so every worker restarts on the new
            # layout (the supervisor relaunches it; the assignment may be the same)
            self.exit_reason = "task layout changed by a rebalance"
            log.info("worker-relayout-exiting", reason=self.exit_reason, tasks=base.component_tasks)
            self.exit_code = EXIT_REASSIGNED
            self.stop_event.set()
            return
        active = base is not None and base.status == TopologyStatus.ACTIVE
        if active != self.runtime.active:
            log.info("spouts-" + ("activated" if active else "deactivated"))
            self.runtime.set_active(active)
        if self.debugging is not None:  # sampling (the base's debug options) and timed log levels
            self._debug_due = self.debugging.follow(base, self.state.log_config(self.topology_id, watch=self._watch),
                                                    self.runtime.local_components())

    def _refresh_loop(self) -> None:
        period = float(self.config.task_refresh_poll_secs)
        while not self.stop_event.is_set():
            due = self._debug_due
            self._refresh_event.wait(period if due is None else min(period, max(0.05, due - self.clock.time())))
            self._refresh_event.clear()
            if self.stop_event.is_set():
                break
            try:
                self.refresh()
            except KazooException as exc:
                log.warning("refresh-failed", error=type(exc).__name__)
            except Exception:  # noqa: BLE001
                log.exception("refresh-crashed")

    # ------------------------------------------------------------------ setup

    def load_topology(self) -> tuple[TopologyDef, Config, bytes, Path]:
        """The definition, the topology's configuration (the stored one over this worker's) and
        the secret."""
        code_root = self.local / "supervisor" / "stormdist" / self.topology_id
        defn = TopologyDef.from_json((code_root / "topology.json").read_text(), f"{code_root}/topology.json")
        path = code_root / STORMCONF
        try:
            topo_conf = json.loads(path.read_text())
        except FileNotFoundError:
            raise GaleError(f"{path} is missing: the supervisor writes it (with the topology secret) when it "
                            "downloads the code; a worker does not start without the secret") from None
        if not isinstance(topo_conf, dict):
            raise GaleError(f"{path} is not a JSON object")
        secret = topology_secret(topo_conf, str(path))
        topology = self.config.with_overrides(topo_conf, where=str(path))
        code_dir = code_root / "code"
        sys.path.insert(0, str(code_dir))
        return defn, topology, secret, code_dir

    def setup(self) -> None:
        self.client = start_client(self.config)
        self.state = ClusterState(self.client, self.layout)
        assignment = self.state.assignment(self.topology_id, watch=self._watch)
        self.executors = self._my_executors(assignment)
        if not self.executors:
            raise GaleError(f"no executors assigned to {self.supervisor_id}:{self.port} for {self.topology_id}")
        base = self.state.storm_base(self.topology_id, watch=self._watch)
        if base is None:
            raise GaleError(f"topology {self.topology_id} does not exist")
        defn, topology, secret, code_dir = self.load_topology()
        # user code gets the configuration, not the key (it could end up in a log or an error report)
        conf = topology.to_dict(without_secret=True)
        set_switch_interval(topology.topology_worker_gil_switch_interval_ms)
        layout = TopologyTasks.of(defn, conf, base)
        self.task_layout, self.task_layout_conf = layout, conf
        stray = sorted(set(assignment.executors()) - set(layout.executors))
        if stray:
            # the StormBase of a rebalance that changed task counts is written just before the
            # assignment: between the two, they disagree (the supervisor relaunches this worker)
            raise GaleError(f"the assignment of {self.topology_id} names executors {stray[:5]} that its task layout "
                            f"(task counts {layout.task_counts}) does not have: a rebalance changing task counts "
                            "is being applied; retrying")
        bind_host = slot_bind_host(self.config)
        if not self.config.storm_local_hostname and not self.config.worker_transfer_host \
                and ipaddress.ip_address(bind_host.split("%")[0]).is_loopback:
            log.warning("slot-port-on-loopback", address=bind_host,
                        hint="this host's name resolves to a loopback address: workers on other hosts cannot reach "
                             "this one; set storm.local.hostname to this node's name or address")
        self.transfer = Transfer(
            bind_host=bind_host, identity=f"{self.supervisor_id}:{self.port}",
            port=self.port, secret=secret, deliver=self._deliver, deliver_many=self._deliver_many,
            fields_for=self._fields_for,
            batch_size=topology.topology_transfer_batch_size,
            flush_secs=float(topology.topology_transfer_flush_millis) / 1000.0,
            max_tuple_bytes=topology.topology_transfer_max_tuple_bytes, clock=self.clock,
            connect_secs=float(topology.supervisor_worker_start_timeout_secs),
        )
        self.transfer.set_routes(*self._routes(assignment))
        self.runtime = WorkerRuntime(
            Topology(defn), topology_id=self.topology_id, conf=conf, layout=layout, executors=self.executors,
            remote=self.transfer, io=self.transfer, error_sink=self.error_sink, worker_port=self.port,
            local_dir=str(self.worker_dir), code_dir=str(code_dir), on_crash=self._crashed, clock=self.clock,
            factory=Assembly(),
        )
        self._fields = self.runtime._stream_fields
        attach(self.transfer, self.runtime)
        self.transfer.start()
        self.runtime.start(active=base.status == TopologyStatus.ACTIVE)
        if self.debugging is not None:
            self.debugging.attach(self.runtime, conf, secret)
            self._refresh_event.set()  # the first refresh now: sampling and log levels already in force
        log.info("worker-running", executors=len(self.executors), active=self.runtime.active,
                 peers=len(set(self.transfer.routes.values())), hot_path=hot_path())

    def _deliver(self, task: int, payload: Any) -> bool:
        return self.runtime.deliver(task, payload) if self.runtime is not None else False

    def _deliver_many(self, task: int, payloads: list) -> int:
        return self.runtime.deliver_many(task, payloads) if self.runtime is not None else len(payloads)

    def _fields_for(self, component: str, stream: str):
        return self._fields.get((component, stream))

    def _crashed(self, exc: BaseException) -> None:
        self.exit_code = EXIT_CRASHED
        self.exit_reason = f"executor thread crashed: {exc!r}"
        self.stop_event.set()

    # ------------------------------------------------------------------ run

    def _start_thread(self, target, name: str) -> threading.Thread:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        return t

    def request_stop(self, *_args: Any) -> None:
        """Begin stopping (a signal, a reassignment, a crash): the stop's deadlines start now."""
        if self.stop_deadline is None:
            self.stop_deadline = Deadline(GRACEFUL_SHARE * self.grace)
            self.exit_deadline.arm()
        self.stop_event.set()

    def run(self) -> int:
        pids = self.worker_dir / "pids"
        pids.mkdir(parents=True, exist_ok=True)
        (pids / str(os.getpid())).touch()
        self.write_local_heartbeat()
        self._start_thread(self._heartbeat_loop, "heartbeat")
        self.debugging = Debugging(self.worker_dir, self.artifacts, self.topology_id, self.clock,
                                   header=f"worker {self.worker_id} of {self.topology_id}, port {self.port}")
        self.debugging.start_control()  # before setup: a worker stuck starting can be dumped
        # a stop during setup (blocked connecting to ZooKeeper, loading code) is bounded too
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        try:
            self.setup()
        except Exception as exc:  # noqa: BLE001 - report why and let the supervisor relaunch
            log.exception("worker-setup-failed")
            self.exit_code = EXIT_SETUP_FAILED
            self.request_stop()
            self._report_setup_failure(exc)
            self._shutdown()
            return EXIT_SETUP_FAILED
        self._start_metrics()
        self._start_thread(self._errors_loop, "errors")
        try:
            self.write_zk_heartbeat()
        except KazooException:
            pass
        self._start_thread(self._beats_loop, "workerbeats")
        self._start_thread(self._refresh_loop, "refresh")
        while not self.stop_event.wait(1.0):
            pass
        self.request_stop()
        log.info("worker-stopping", reason=self.exit_reason or "signal",
                 deadline_secs=round(self.stop_deadline.remaining(), 3))
        self._shutdown()
        return self.exit_code

    def _start_metrics(self) -> None:
        try:
            from gale.worker.metrics import WorkerMetrics
        except ModuleNotFoundError:
            return
        offset = self.config.worker_metrics_port_offset
        if offset:
            try:
                self.metrics = WorkerMetrics(self)
                self.metrics.serve(self.port + offset)
            except OSError as exc:
                log.warning("worker-metrics-unavailable", error=str(exc))
                self.metrics = None

    def _report_setup_failure(self, exc: Exception) -> None:
        if self.state is None:
            return
        within(self.stop_deadline.earlier(ZK_RESERVE_SECS), "report-setup-failure", self._report_setup_errors, exc,
               zk=self.client)

    def _report_setup_errors(self, exc: Exception) -> None:
        # errors user code reported while the worker was starting (open/prepare): report them now
        while True:
            try:
                component, text, when = self.errors.get_nowait()
            except queue.Empty:
                break
            try:
                self.state.report_error(self.topology_id, component,
                                        ErrorInfo(error=text[-16000:], error_time_secs=when, host=self.host, port=self.port))
                return
            except KazooException:
                break
        try:
            self.state.report_error(self.topology_id, "__worker",
                                    ErrorInfo(error=f"worker setup failed: {type(exc).__name__}: {exc}",
                                              error_time_secs=int(self.clock.time()), host=self.host, port=self.port))
        except Exception:  # noqa: BLE001
            pass

    def _shutdown(self) -> None:
        """The stop steps, each bounded by what remains of :attr:`stop_deadline`."""
        deadline = self.stop_deadline
        assert deadline is not None
        t0 = time.monotonic()
        local = deadline.earlier(ZK_RESERVE_SECS)  # the ZooKeeper steps come last
        if self.runtime is not None:
            # spouts deactivate and close (Kafka commits), bolts clean up, Spark stops
            within(local, "runtime-stop", lambda: self.runtime.stop(timeout=local.remaining()))
        if self.transfer is not None:
            within(local, "transfer-close", lambda: self.transfer.close(flush_timeout=min(2.0, local.remaining() / 2)))
        if self.metrics is not None:
            within(local, "metrics-stop", self.metrics.stop)
        if self.debugging is not None:
            within(local, "debugging-stop", self.debugging.stop)
        if self.state is not None:
            within(deadline, "workerbeat-delete", self.state.remove_worker_heartbeat, self.topology_id,
                   self.supervisor_id, self.port, zk=self.client)
        stop_client(self.client, deadline)
        log.info("worker-stopped", code=self.exit_code, secs=round(time.monotonic() - t0, 3),
                 in_time=not deadline.expired())


def attach(transfer: Transfer, runtime: WorkerRuntime) -> None:
    """Wire a worker's transfer to its runtime, as every worker is wired: the task loads and the
    full-queue flag its reports carry, the busy clock of its CPU share, and which message each
    local task takes from other workers. The benchmarks and tests that build workers from parts
    call this too, so they run what a worker runs."""
    transfer.local_loads = runtime.local_loads
    transfer.local_full = runtime.queue_full
    transfer.busy_time = runtime.busy_time
    transfer.set_roles(message_roles(runtime), subscriptions(runtime), runtime.spout_tasks)


def message_roles(runtime: WorkerRuntime) -> dict[int, int]:
    """Each local task → the one kind of message it takes from other workers."""
    from gale.topology.definition import ACKER_COMPONENT
    from gale.worker.wire_kinds import ACKER, RESULT, TUPLE

    roles = {}
    for task, ex in runtime._local.items():
        roles[task] = ACKER if ex.component == ACKER_COMPONENT else RESULT if ex.kind == "spout" else TUPLE
    return roles


def subscriptions(runtime: WorkerRuntime) -> dict[int, frozenset[tuple[str, str]]]:
    """Each local bolt task → the ``(component, stream)`` pairs its component subscribes to."""
    components = runtime.defn.components
    return {task: frozenset((i.component, i.stream) for i in components[ex.component].inputs)
            for task, ex in runtime._local.items() if ex.component in components and ex.kind == "bolt"}


def set_switch_interval(millis: float | None) -> None:
    """Set this process's thread switch interval (``topology.worker.gil.switch.interval.ms``; None:
    leave Python's 5 ms). A worker's executor threads run Python without pause; each time another
    thread wakes — the transfer's standby (which moved every batch when stop 28 measured this:
    docs/benchmarks-history.md, "Load reports, a CPU-aware spill, and the switch interval"), heartbeats,
    metrics — it waits for the interpreter lock for up to the interval."""
    if millis is not None:
        sys.setswitchinterval(float(millis) / 1000.0)


def run_worker(config: Config, topology_id: str, supervisor_id: str, port: int, worker_id: str) -> int:
    log_dir = os.environ.get("GALE_WORKER_LOG_DIR")
    log_file = Path(log_dir) / "worker.log" if log_dir else None
    glog.configure(fmt="json", file=log_file, max_bytes=config.worker_log_max_bytes,
                   backups=config.worker_log_backups, daemon="worker", topology=topology_id, port=port,
                   worker=worker_id)
    worker = Worker(config, topology_id, supervisor_id, port, worker_id)
    worker.log_path = str(log_file) if log_file else ""
    worker.artifacts = Path(log_dir) if log_dir else None
    return worker.run()
