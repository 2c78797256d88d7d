"""The supervisor daemon: registers its node, follows assignments, runs one slot machine per port.

One thread (the loop) owns all slot state. Kazoo watches, the heartbeat timer, code downloads and
signal handlers only set the loop's wake-up event. Each loop iteration:

1. re-reads ``/storm/assignments`` when a watch fired (an assignment added, removed or changed) or
   every 10 s (on a failed read the last good view is kept — a ZooKeeper outage must not kill
   healthy workers); unchanged assignments are not decoded again;
2. observes each slot's worker (LocalState heartbeat, process alive) and steps its state machine
   (:mod:`gale.supervisor.slot`), performing the returned actions; the heartbeats observed go to
   nimbus in the supervisor's own znode (:meth:`Supervisor.worker_heartbeats`), rewritten every
   ``supervisor.heartbeat.frequency.secs``;
3. persists ``local-assignments`` and ``approved-workers`` in LocalState when they change, so a
   restarted supervisor re-adopts running workers and kills the strays.

Every time the loop decides on (heartbeat and resync periods, the slots' observation time, which
the slot machine's timeouts are judged by) comes from the injected clock (:mod:`gale.clock`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from gale.clock import REAL_CLOCK
from gale.cluster_state import ClusterState
from gale.deadline import Deadline, within
from gale.config import api_token
from gale.config_keys import Config
from gale.daemon_util import worker_artifacts
from gale.layout import Layout
from gale.local_state import LocalState
from gale.log import get_logger
from gale.records import GALE_VERSION, SupervisorInfo, SupervisorWorkerHeartbeat, encode_executors
from gale.zk import connect, stop_client
from gale.nimbus.client import NimbusClient, seed_addresses
from gale.supervisor.container import Containers
from gale.supervisor.localizer import CodeSource, Localizer
from gale.supervisor.logfiles import WorkerRef
from gale.supervisor.slot import (
    Cleanup, Kill, Launch, LocalAssignment, Observation, RequestCode, Slot, State, Timeouts, step,
)

log = get_logger("supervisor")

ASSIGNMENT_RESYNC_SECS = 10.0
SUPERVISOR_ID_KEY = "supervisor-id"
LOCAL_ASSIGNMENTS_KEY = "local-assignments"
APPROVED_WORKERS_KEY = "approved-workers"
#: how long a stop waits for the loop's current iteration
LOOP_STOP_SECS = 2.0


def local_hostname(config: Config) -> str:
    return config.storm_local_hostname or socket.gethostname()


class Supervisor:
    """The supervisor of one node.

    ``containers`` builds what launches (``start``, ``launch``, ``close``), observes and kills this
    node's workers, called as ``containers(config, supervisor_id, worker_config_path)``: :class:`~gale.supervisor.container.Containers`
    (worker processes) by default; the scale benchmark passes one that runs simulated workers in
    threads (``benchmarks/scale_sim.py``), so everything else — registration, the assignment watch,
    the slot machines, heartbeats — runs as in production.
    """

    def __init__(self, config: Config, metrics: Any = None, *, clock: Any = REAL_CLOCK,
                 containers: Any = Containers):
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.local = Path(config.storm_local_dir)
        self.hostname = local_hostname(config)
        self.ports = sorted(set(config.supervisor_slots_ports))
        self.id_state = LocalState(self.local / "supervisor" / "isupervisor")
        self.local_state = LocalState(self.local / "supervisor" / "localstate")
        self.supervisor_id = config.supervisor_id or self.id_state.get(SUPERVISOR_ID_KEY)
        if not self.supervisor_id:
            self.supervisor_id = f"{uuid.uuid4()}-{self.hostname}"
            self.id_state.put(SUPERVISOR_ID_KEY, self.supervisor_id)
        self.layout = Layout(config.storm_zookeeper_root)
        self.timeouts = Timeouts(
            hb_timeout=float(config.supervisor_worker_timeout_secs),
            start_timeout=float(config.supervisor_worker_start_timeout_secs),
            shutdown_sleep=float(config.supervisor_worker_shutdown_sleep_secs),
        )
        self.config_path = self.local / "supervisor" / "worker-conf.yaml"
        self.containers = containers(config, self.supervisor_id, self.config_path)
        self.localizer = Localizer(self.local, self._code_sources, on_ready=self.wake, metrics=metrics)
        self.wakeup = threading.Event()
        self.stopping = threading.Event()
        self.started = clock.time()
        self.slots: dict[int, Slot] = {}
        self.desired: dict[int, LocalAssignment] = {}
        #: port → (worker id, LocalState heartbeat time, executors) as last observed (for nimbus)
        self._observed_beats: dict[int, tuple[str, float, list[tuple[int, int]]]] = {}
        self._assignments_dirty = True
        self._last_assignment_read = 0.0
        self._reregister = False
        self._last_register = 0.0
        self.client = None
        self.state: ClusterState | None = None
        #: the ZooKeeper connection as kazoo last reported it; seconds waited for it at start
        self.zk_state: str = "CONNECTING"
        self.zk_wait_secs = 0.0
        self._loop_thread: threading.Thread | None = None
        self.metrics_port: int | None = None
        #: (host, port) of this supervisor's log server, published in its record (None: none)
        self.logviewer: tuple[str, int] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, stop: threading.Event | None = None) -> None:
        """Connect to ZooKeeper — waiting as long as it takes (an ensemble without quorum, servers
        not up yet) unless ``stop`` (default: :attr:`stopping`) is set first — recover the slots,
        register and start the loop."""
        api_token(self.config)  # a missing or empty token file: say so now, not at the first code download
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.config_path.with_suffix(".tmp")
        # it holds the ZooKeeper credentials and the API token (or its file): this user only
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w") as fh:
            fh.write(yaml.safe_dump(self.config.to_dict(), sort_keys=True))
        os.chmod(tmp, 0o600)  # an older file of that name may have had another mode
        os.replace(tmp, self.config_path)
        client = connect(self.config, stop=stop or self.stopping, what="supervisor",
                         on_waiting=self._waiting_for_zookeeper)
        if client is None:
            return
        self.client = client
        self.zk_state = KazooState.CONNECTED
        self.client.add_listener(self._on_zk_state)
        self.state = ClusterState(self.client, self.layout)
        self.state.ensure_layout()
        self._recover()
        self.register()
        self._loop_thread = threading.Thread(target=self._loop, name="supervisor-loop", daemon=True)
        self._loop_thread.start()
        log.info("supervisor-started", id=self.supervisor_id, host=self.hostname, ports=self.ports)

    def stop_budget(self, kill_workers: bool = False) -> float:
        """Seconds :meth:`stop` may take: ``supervisor.shutdown.timeout.secs``, plus the workers'
        grace (``supervisor.worker.shutdown.sleep.secs``) when it kills them."""
        return float(self.config.supervisor_shutdown_timeout_secs) + (self.timeouts.shutdown_sleep if kill_workers else 0.0)

    def stop(self, kill_workers: bool = False, deadline: Deadline | None = None) -> None:
        """Stop the supervisor within ``deadline`` (default :meth:`stop_budget` from now), whatever
        is unreachable. Workers keep running (a restarted supervisor adopts them) unless
        ``kill_workers``. The loop may be blocked in a ZooKeeper call: it is given a moment
        (``LOOP_STOP_SECS`` at most) to finish its iteration, then abandoned (a daemon thread); the
        slots' state is persisted by each step. The supervisor znode is deleted only while
        ZooKeeper is connected (it is ephemeral: it goes with the session anyway)."""
        deadline = deadline or Deadline(self.stop_budget(kill_workers))
        t0 = time.monotonic()
        self.stopping.set()
        self.wakeup.set()
        if self._loop_thread is not None:
            # an iteration takes milliseconds unless blocked on ZooKeeper, which waiting will not cure
            self._loop_thread.join(min(LOOP_STOP_SECS, deadline.remaining() / 4))
            if self._loop_thread.is_alive():
                log.warning("supervisor-loop-abandoned", reason="still running at the stop deadline")
        if kill_workers:
            self.kill_all_workers()  # bounded by the workers' grace, then SIGKILL
        self.localizer.close()
        self.containers.close()  # the worker fork server; workers run on
        if self.client is not None:
            within(deadline, "supervisor-info-delete", self.state.remove_supervisor_info, self.supervisor_id,
                   zk=self.client)
            stop_client(self.client, deadline)
        log.info("supervisor-stopped", id=self.supervisor_id, workers_killed=kill_workers,
                 secs=round(time.monotonic() - t0, 3), in_time=not deadline.expired())

    def wake(self) -> None:
        self.wakeup.set()

    def _waiting_for_zookeeper(self, secs: float) -> None:
        self.zk_wait_secs = secs

    def _on_zk_state(self, state: KazooState) -> None:
        self.zk_state = state
        if state != KazooState.CONNECTED and not self.stopping.is_set():  # not our own stop
            log.warning("zookeeper-" + state.lower(),
                        hint="workers keep running on the last assignments read until ZooKeeper is back")
        if state == KazooState.CONNECTED:
            # (re)connected, possibly with a new session: re-create the ephemeral node, re-read
            self._reregister = True
            self._assignments_dirty = True
            self.wakeup.set()

    def _on_assignments_changed(self, *_args: Any) -> None:
        self._assignments_dirty = True
        self.wakeup.set()

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        """Rebuild slots from LocalState; adopt live workers; kill workers nobody owns."""
        snapshot = self.local_state.snapshot()
        local_assignments = snapshot.get(LOCAL_ASSIGNMENTS_KEY) or {}
        approved = snapshot.get(APPROVED_WORKERS_KEY) or {}
        by_port = {int(port): wid for wid, port in approved.items()}
        now = self.clock.time()
        for port in self.ports:
            slot = Slot(port=port, since=now)
            entry = local_assignments.get(str(port))
            wid = by_port.get(port)
            if entry and wid and self.containers.alive(wid):
                try:
                    la = LocalAssignment.from_json(entry)
                except (KeyError, TypeError, ValueError):
                    la = None
                if la is not None:
                    slot = Slot(port=port, state=State.RUNNING, current=la, worker_id=wid, since=now,
                                running_since=now)
                    log.info("worker-adopted", port=port, worker=wid, topology=la.topology_id)
            self.slots[port] = slot
        owned = {s.worker_id for s in self.slots.values() if s.worker_id}
        for wid in self.containers.worker_ids_on_disk():
            if wid not in owned:
                if self.containers.alive(wid):
                    log.warning("stray-worker-killed", worker=wid)
                    self.containers.kill(wid, force=True)
                self.containers.cleanup(wid)
        self._persist()

    def _persist(self) -> None:
        local = {str(p): s.current.to_json() for p, s in self.slots.items() if s.current and s.worker_id}
        approved = {s.worker_id: p for p, s in self.slots.items() if s.worker_id}
        snap = self.local_state.snapshot()
        if snap.get(LOCAL_ASSIGNMENTS_KEY) != local or snap.get(APPROVED_WORKERS_KEY) != approved:
            self.local_state.update({LOCAL_ASSIGNMENTS_KEY: local, APPROVED_WORKERS_KEY: approved})

    # ------------------------------------------------------------------ ZooKeeper

    def info(self) -> SupervisorInfo:
        used = sorted(p for p, s in self.slots.items() if s.current is not None)
        return SupervisorInfo(
            time_secs=int(self.clock.time()), hostname=self.hostname, assignment_id=self.supervisor_id,
            used_ports=used, meta=self.ports, scheduler_meta=dict(self.config.supervisor_scheduler_meta),
            uptime_secs=int(self.clock.time() - self.started), gale_version=GALE_VERSION,
            server_port=self.metrics_port, worker_heartbeats=self.worker_heartbeats(),
            logviewer_host=self.logviewer[0] if self.logviewer else None,
            logviewer_port=self.logviewer[1] if self.logviewer else None,
        )

    def worker_heartbeats(self) -> list[SupervisorWorkerHeartbeat]:
        """The heartbeats of this node's workers, as last observed, for nimbus (Storm 2's
        ``SupervisorWorkerHeartbeats``): written with the supervisor's znode, so liveness costs
        ZooKeeper one write per node per ``supervisor.heartbeat.frequency.secs``, not one per worker."""
        out = []
        for port in sorted(self.slots):
            slot = self.slots[port]
            beat = self._observed_beats.get(port)
            if slot.current is None or slot.worker_id is None or beat is None:
                continue
            worker_id, time_secs, executors = beat
            if worker_id != slot.worker_id:
                continue
            out.append(SupervisorWorkerHeartbeat(topology_id=slot.current.topology_id, port=port,
                                                 executors=encode_executors(executors), time_secs=int(time_secs)))
        return out

    def worker_refs(self) -> dict[int, WorkerRef]:
        """This node's workers by slot port, for the log server (any thread: a copy of the slots)."""
        out = {}
        for port, slot in list(self.slots.items()):
            wid = slot.worker_id
            if slot.current is None or wid is None:
                continue
            pid = self.containers.live_pid(wid)
            out[port] = WorkerRef(port=port, topology_id=slot.current.topology_id, worker_id=wid,
                                  worker_dir=self.containers.worker_dir(wid),
                                  artifacts=worker_artifacts(slot.current.topology_id, port), pid=pid,
                                  alive=lambda wid=wid, pid=pid: pid is not None and self.containers.live_pid(wid) == pid)
        return out

    def register(self) -> None:
        self.state.set_supervisor_info(self.supervisor_id, self.info())
        self._last_register = self.clock.monotonic()

    def read_assignments(self) -> None:
        try:
            # a watch on the list (added/removed topologies) and on each assignment read (changes)
            assignments = self.state.assignments(watch=self._on_assignments_changed,
                                                 data_watch=self._on_assignments_changed)
        except KazooException as exc:
            log.warning("assignments-read-failed", error=type(exc).__name__)
            return  # keep the last good view
        desired: dict[int, LocalAssignment] = {}
        for tid, a in sorted(assignments.items()):
            for port, executors in a.executors_on(self.supervisor_id).items():
                if port not in self.slots:
                    log.error("assignment-for-unknown-port", topology=tid, port=port)
                    continue
                if port in desired:
                    log.error("two-topologies-on-one-port", port=port, topologies=[desired[port].topology_id, tid])
                    continue
                desired[port] = LocalAssignment(tid, tuple(executors), a.code_checksum)
        self.desired = desired
        self._assignments_dirty = False
        self._last_assignment_read = self.clock.monotonic()
        self.localizer.cleanup({la.topology_id for la in desired.values()} |
                               {s.current.topology_id for s in self.slots.values() if s.current})

    def _code_sources(self, topology_id: str):
        addresses: list[str] = []
        try:
            addresses = sorted(self.state.blob_holders(topology_id))
            addresses += [a for a in sorted(self.state.nimbus_summaries()) if a not in addresses]
        except KazooException:
            pass
        addresses += [a for a in seed_addresses(self.config) if a not in addresses]
        client_config = self.config

        def source(address: str) -> CodeSource:
            def code() -> bytes:
                with NimbusClient(client_config, [address], timeout=60.0) as client:
                    return client.code(topology_id)

            def stored_conf() -> dict[str, Any]:
                # the topology secret: over the API with the cluster's token, never from ZooKeeper
                with NimbusClient(client_config, [address], timeout=30.0) as client:
                    return client.stored_conf(topology_id)

            return CodeSource(address, code, stored_conf)

        return [source(a) for a in addresses]

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        period = min(1.0, float(self.config.supervisor_monitor_frequency_secs))
        hb_period = float(self.config.supervisor_heartbeat_frequency_secs)
        while not self.stopping.is_set():
            self.wakeup.clear()  # before the work: a wake-up during it is not lost
            try:
                if self._reregister or self.clock.monotonic() - self._last_register >= hb_period:
                    self._reregister = False
                    self.register()
                if self._assignments_dirty or self.clock.monotonic() - self._last_assignment_read >= ASSIGNMENT_RESYNC_SECS:
                    self.read_assignments()
                self.step_slots()
            except KazooException as exc:
                log.warning("supervisor-loop-zk-error", error=type(exc).__name__)
            except Exception:  # noqa: BLE001 - a bug: count it and keep supervising
                log.exception("supervisor-loop-error")
                if self.metrics is not None:
                    self.metrics.loop_errors.inc()
            self.wakeup.wait(period)

    def observe(self, slot: Slot) -> Observation:
        desired = self.desired.get(slot.port)
        hb = self.containers.heartbeat(slot.worker_id)
        hb_secs = None
        if hb is not None and hb.get("port") == slot.port and (slot.current is None or hb.get("topology_id") == slot.current.topology_id):
            hb_secs = float(hb.get("time_secs", 0))
            try:
                executors = [(int(s), int(e)) for s, e in hb.get("executors") or ()]
            except (TypeError, ValueError):
                executors = []
            self._observed_beats[slot.port] = (slot.worker_id, hb_secs, executors)
        else:
            self._observed_beats.pop(slot.port, None)
        return Observation(
            now=self.clock.time(),
            assignment=desired,
            code_ready=desired is not None and self.localizer.ready(desired.topology_id, desired.code_checksum),
            heartbeat_secs=hb_secs,
            process_alive=self.containers.alive(slot.worker_id),
        )

    def step_slots(self) -> None:
        if any(s.state == State.RUNNING and not self.containers.alive(s.worker_id) for s in self.slots.values()):
            # a worker exited: often because its executors moved (it saw the new assignment first);
            # read the assignment now so the slot acts on the new plan, not a stale relaunch
            self.read_assignments()
        changed = False
        for port in self.ports:
            slot = self.slots[port]
            for _ in range(4):  # a few immediate transitions (e.g. dead → cleanup → relaunch)
                obs = self.observe(slot)
                new, actions = step(slot, obs, self.timeouts)
                for action in actions:
                    self.perform(port, new, action)
                if new.state != slot.state:
                    log.info("slot-transition", port=port, frm=slot.state.value, to=new.state.value,
                             topology=new.current.topology_id if new.current else None,
                             reason=new.kill_reason.value if new.kill_reason else None)
                if new == slot and not actions:
                    break
                changed = changed or new != slot
                slot = new
            self.slots[port] = slot
        if changed:
            self._persist()
        if self.metrics is not None:
            self.metrics.observe_slots(self)

    def perform(self, port: int, slot: Slot, action: Any) -> None:
        if isinstance(action, RequestCode):
            self.localizer.request(action.assignment.topology_id, action.assignment.code_checksum)
            self.containers.start()  # the worker fork server imports while the code downloads
        elif isinstance(action, Launch):
            self.containers.launch(action.assignment, port, action.worker_id)
            self._persist_slot_worker(port, slot)
            if self.metrics is not None:
                self.metrics.worker_launches.labels(reason="restart" if slot.restarts else "new").inc()
        elif isinstance(action, Kill):
            self.containers.kill(action.worker_id, action.force)
            if self.metrics is not None and not action.force:
                self.metrics.worker_kills.labels(reason=action.reason.value).inc()
        elif isinstance(action, Cleanup):
            self.containers.cleanup(action.worker_id)

    def _persist_slot_worker(self, port: int, slot: Slot) -> None:
        # record the worker id before it can heartbeat: a supervisor crash right now must not orphan it
        self.slots[port] = slot
        self._persist()

    def kill_all_workers(self) -> None:
        for port, slot in self.slots.items():
            if slot.worker_id and self.containers.alive(slot.worker_id):
                self.containers.kill(slot.worker_id, force=False)
        deadline = time.time() + self.timeouts.shutdown_sleep
        while time.time() < deadline and any(self.containers.alive(s.worker_id) for s in self.slots.values()):
            time.sleep(0.1)
        for port, slot in self.slots.items():
            if slot.worker_id:
                if self.containers.alive(slot.worker_id):
                    self.containers.kill(slot.worker_id, force=True)
                self.containers.cleanup(slot.worker_id)
            self.slots[port] = replace(slot, state=State.EMPTY, current=None, worker_id=None)
        self._persist()
