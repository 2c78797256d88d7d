"""The nimbus daemon: submission, the topology state machine, scheduling rounds, cleanup.

The pure decisions live in :mod:`gale.nimbus.plan` (a scheduling round: snapshot in, writes out,
over :mod:`gale.nimbus.scheduler`) and :mod:`gale.nimbus.transitions`; this module reads ZooKeeper,
calls them and writes the results. Leadership (several nimbus processes, one leader) is the
recipe in :mod:`gale.nimbus.leadership`, code copies between nimbuses the service in
:mod:`gale.nimbus.replication`; nimbus gives them what they need and callbacks, they never reach
back into it. Only the leader schedules or accepts writes, and its writes to
``storms``/``assignments`` are fenced by the leader epoch of its term.

:attr:`Nimbus.lock` serializes every read-then-write of cluster state, as Storm's
``submitLock``/``schedLock`` do: a submit's name and id reservation and its final writes, user
actions, and the monitor round (due actions, scheduling, cleanup). It is never held while waiting
for other nimbuses: a submit waits for code replication between its two locked steps, while
rounds go on; the topology's id is reserved meanwhile (:attr:`Nimbus.pending`) so cleanup keeps
its code and no other submit takes its name.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from gale.clock import REAL_CLOCK
from gale.config_keys import Config
from gale.cluster_state import ClusterState, FencedError
from gale.deadline import Deadline, within
from gale.errors import CorruptRecordError, GaleError, NotFoundError, TopologyError
from gale.layout import Layout
from gale.log import bind, get_logger
from gale.records import Assignment, NimbusSummary, StormBase, TopologyStatus
from gale.topology.definition import TopologyDef, TopologyTasks, component_parallelism
from gale.zk import connect, stop_client
from gale.nimbus import transitions
from gale.nimbus.blobstore import BlobStore
from gale.nimbus.leadership import LeaderElection, Term
from gale.nimbus.limits import check_counts
from gale.nimbus.plan import (
    RoundPlan, RoundSnapshot, SchedulingTimeouts, TopologyInputs, assignment_size_bound, plan_round,
    workerbeats_wanted,
)
from gale.nimbus.replication import CodeReplication
from gale.nimbus.rescale import plan_rescale
from gale.nimbus.scheduler import HeartbeatCache
from gale.nimbus.submission import check_submission

log = get_logger("nimbus")

#: the owner recorded in StormBase and Assignment records: Storm's submitting user; Gale has no users
OWNER = ""


class NotLeaderError(GaleError):
    def __init__(self, leader: str | None):
        self.leader = leader
        super().__init__(f"this nimbus is not the leader; the leader is {leader or 'unknown (election in progress)'}")


class Nimbus:
    def __init__(self, config: Config, *, host: str | None = None, clock: Any = REAL_CLOCK,
                 metrics: Any = None):
        self.config = config
        self.clock = clock
        self.host = host or config.storm_local_hostname or socket.gethostname()
        self.port = config.nimbus_http_port
        self.layout = Layout(config.storm_zookeeper_root)
        self.blobs = BlobStore(config.storm_local_dir)
        self.cache = HeartbeatCache()
        self.lock = threading.RLock()
        self.wakeup = threading.Event()
        self.stopping = threading.Event()
        self.started_at = clock.time()
        self.client = None
        self.state: ClusterState | None = None
        self.replication: CodeReplication | None = None  # set in connect()
        self.leader: LeaderElection | None = None  # set in start()
        self.metrics = metrics
        #: topologies between a submit's two locked steps (id → name): their code is kept, their
        #: name taken
        self.pending: dict[str, str] = {}
        self._defs: dict[str, tuple[str, TopologyDef, Config]] = {}
        self._submitted = 0
        self._monitor: threading.Thread | None = None
        #: the ZooKeeper connection as kazoo last reported it; seconds waited for it at start
        self.zk_state: str = "CONNECTING"
        self.zk_wait_secs = 0.0
        self.rounds = 0  # scheduling rounds (leader)
        self.iterations = 0  # monitor-loop iterations (leader or standby)
        self.corrupt_seen: list[str] = []

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self, stop: threading.Event | None = None) -> bool:
        """Connect to ZooKeeper, waiting as long as it takes (:func:`gale.zk.connect`); False
        when ``stop`` (default: :attr:`stopping`) was set first."""
        client = connect(self.config, stop=stop or self.stopping, what="nimbus", on_waiting=self._waiting_for_zookeeper)
        if client is None:
            return False
        self.client = client
        self.zk_state = KazooState.CONNECTED
        self.client.add_listener(self._on_zk_state)
        self.state = ClusterState(self.client, self.layout, on_corrupt=self._on_corrupt)
        self.state.ensure_layout()
        self.replication = CodeReplication(self.state, self.blobs, self.address, headers=self.internal_headers,
                                           on_announced=self.wakeup.set, clock=self.clock)
        return True

    def _waiting_for_zookeeper(self, secs: float) -> None:
        self.zk_wait_secs = secs

    def start(self, stop: threading.Event | None = None) -> None:
        """Connect (waiting for ZooKeeper as long as it takes, unless ``stop`` is set first),
        register, join the leader election and start the monitor loop."""
        if self.client is None and not self.connect(stop):
            return
        self.register()
        self.replication.start()
        self.leader = LeaderElection(
            self.client, self.layout, self.address, ready=self.replication.sync,
            on_elected=self._on_elected, on_deposed=self._on_deposed,
            retry_secs=self.config.nimbus_code_sync_freq_secs / 4, clock=self.clock,
        )
        self.leader.start()
        self._monitor = threading.Thread(target=self._monitor_loop, name="nimbus-monitor", daemon=True)
        self._monitor.start()
        log.info("nimbus-started", address=self.address, root=self.layout.root)

    def stop(self, deadline: Deadline | None = None) -> None:
        """Stop within ``deadline`` (default ``nimbus.shutdown.timeout.secs`` from now), whatever
        is unreachable: the monitor loop (maybe blocked in a ZooKeeper call) is given a moment to
        finish its round and the leadership thread until shortly before the deadline, then they
        are abandoned (daemon threads); the
        nimbus znode is deleted only while ZooKeeper is connected (it is ephemeral: it goes with
        the session anyway); the client is stopped within the deadline."""
        deadline = deadline or Deadline(float(self.config.nimbus_shutdown_timeout_secs))
        t0 = time.monotonic()
        self.stopping.set()
        self.wakeup.set()
        local = deadline.earlier(min(1.0, deadline.remaining() / 4))  # room for the ZooKeeper steps
        if self._monitor is not None:
            # a round takes milliseconds unless blocked on ZooKeeper, which waiting will not cure
            self._monitor.join(min(2.0, local.remaining() / 2))
            if self._monitor.is_alive():
                log.warning("nimbus-monitor-abandoned", reason="still running at the stop deadline")
        if self.leader is not None:
            within(local, "leadership-stop", self.leader.stop)
        if self.client is not None:
            within(deadline, "nimbus-summary-delete", self.state.remove_nimbus_summary, self.address, zk=self.client)
            stop_client(self.client, deadline)
        log.info("nimbus-stopped", address=self.address, secs=round(time.monotonic() - t0, 3),
                 in_time=not deadline.expired())

    def _on_zk_state(self, state: KazooState) -> None:
        # never do ZooKeeper I/O in a listener: hand it to the monitor loop
        self.zk_state = state
        if state != KazooState.CONNECTED and not self.stopping.is_set():  # not our own stop
            log.warning("zookeeper-" + state.lower(), hint="no scheduling or user actions until ZooKeeper is back")
        if state == KazooState.CONNECTED:
            self._needs_register = True
            self._forget_heartbeats = True
            self.wakeup.set()

    _needs_register = False
    #: set when nimbus could not see heartbeats for a while (its ZooKeeper connection was down, or
    #: it was not leading): the next round judges liveness afresh instead of from stale times
    _forget_heartbeats = False

    def _on_corrupt(self, err: CorruptRecordError) -> None:
        log.error("corrupt-znode", path=err.path, problem=err.problem)
        self.corrupt_seen.append(err.path)
        del self.corrupt_seen[:-100]
        if self.metrics is not None:
            self.metrics.corrupt_znodes.inc()

    def _on_elected(self, term: Term) -> None:
        # the election thread, before is_leader() turns True: fence every write of this term
        self.state.fence = term.fence
        self._forget_heartbeats = True
        if self.metrics is not None:
            self.metrics.elections.inc()
        self._needs_register = True  # the loop rewrites /nimbuses/<me> (now the leader)
        self.wakeup.set()

    def _on_deposed(self, _term: Term) -> None:
        # the fence stays: its version is stale now, so a write still in flight is refused
        self._needs_register = True
        self.wakeup.set()

    def is_leader(self) -> bool:
        return self.leader is not None and self.leader.is_leader()

    def summary(self) -> NimbusSummary:
        return NimbusSummary(
            host=self.host, port=self.port, uptime_secs=int(self.clock.time() - self.started_at),
            is_leader=self.is_leader(), start_time_secs=int(self.started_at),
            leader_epoch=self.leader.epoch if self.leader is not None and self.is_leader() else None,
        )

    def register(self) -> None:
        """Write this nimbus's summary and announce its code (after every new session)."""
        self.state.set_nimbus_summary(self.address, self.summary())
        self.replication.announce_all()

    def internal_headers(self) -> dict[str, str]:
        """Headers for nimbus-to-nimbus requests (the API token when one is configured)."""
        token = self.config.nimbus_api_token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def require_leader(self) -> None:
        if not self.is_leader():
            raise NotLeaderError(self.leader.current_leader() if self.leader else None)

    # ------------------------------------------------------------------ topology lookup

    def topology_id(self, name_or_id: str) -> str:
        bases = self.state.storm_bases()
        if name_or_id in bases:
            return name_or_id
        matches = [tid for tid, b in bases.items() if b.name == name_or_id]
        if not matches:
            raise NotFoundError(f"no topology named {name_or_id!r}; running: {sorted(b.name for b in bases.values()) or 'none'}")
        return sorted(matches)[-1]

    def definition(self, topology_id: str) -> tuple[TopologyDef, Config]:
        """A stored topology's definition and its effective configuration (nimbus's, then the
        topology's own), read once per code checksum."""
        digest = self.blobs.checksum(topology_id)
        cached = self._defs.get(topology_id)
        if cached is not None and cached[0] == digest:
            return cached[1], cached[2]
        if digest is None:
            raise NotFoundError(f"code of topology {topology_id} is not on this nimbus")
        defn = TopologyDef.model_validate_json(self.blobs.definition_json(topology_id))
        config = self.config.with_overrides(self.blobs.conf(topology_id),
                                            where=f"the stored configuration of {topology_id}")
        self._defs[topology_id] = (digest, defn, config)
        return defn, config

    # ------------------------------------------------------------------ submit

    def submit(self, name: str, bundle: bytes, *, initial_status: str = "ACTIVE") -> str:
        """Validate and store a topology, write its znodes and schedule it. Returns its id.

        Everything is validated before anything is written. Then, under :attr:`lock`, the name and
        an id are reserved; the code is stored and announced, and the leader waits — without the
        lock, so scheduling rounds go on — until standbys copy it (``topology.min.replication.count``,
        bounded by ``topology.max.replication.wait.time.sec``); under the lock again it writes
        ``/workerbeats/<id>``, ``/errors/<id>`` and ``/storms/<id>`` and schedules the topology. A
        submit that fails before ``/storms/<id>`` is written takes its code and znodes back: the
        topology never existed.
        """
        self.require_leader()
        sub = check_submission(name, bundle, self.config)
        defn, definition_json, stored_conf, config = sub.defn, sub.definition_json, sub.stored_conf, sub.config
        status = TopologyStatus(initial_status)
        num_workers = config.topology_workers
        check_counts(name, "submit", self.config, config, defn, num_workers)  # before anything is built
        component_executors = component_parallelism(defn, config, num_workers)
        self.check_assignment_size(name, defn, config, num_workers, component_executors, "submit")
        with self.lock:
            topology_id, now = self._reserve(name)
        base_written: bool | None = False  # None: unknown (the write failed on the way)
        try:
            base = StormBase(
                name=name, status=status, num_workers=num_workers, component_executors=component_executors,
                launch_time_secs=int(now), owner=OWNER,
            )
            digest = self.blobs.put(topology_id, bundle, definition_json, stored_conf)
            # announce the code first: standbys copy it from here before the topology exists
            self.replication.announce(topology_id, digest)
            self.replication.wait_for_replicas(topology_id, digest, config)
            with self.lock:
                self.require_leader()
                self.state.setup_heartbeats(topology_id)
                self.client.ensure_path(self.layout.errors_dir(topology_id))
                base_written = None
                try:
                    self.state.set_storm_base(topology_id, base)
                except FencedError:
                    base_written = False
                    self.leader.step_down()
                    raise NotLeaderError(None) from None
                base_written = True
                del self.pending[topology_id]
                log.info("topology-submitted", topology=topology_id, workers=num_workers, checksum=digest[:12])
                self._schedule_now()
        finally:
            if base_written is not True:
                with self.lock:
                    self.pending.pop(topology_id, None)
                    if base_written is False:
                        self._discard(topology_id)
        return topology_id

    def check_assignment_size(self, name: str, defn: TopologyDef, config: Config, num_workers: int,
                              component_executors: Mapping[str, int], action: str,
                              component_tasks: Mapping[str, int] | None = None) -> None:
        """Refuse a topology whose assignment could outgrow ``nimbus.assignment.max.bytes`` (kept
        below ZooKeeper's ``jute.maxbuffer``): an assignment nimbus cannot write would leave the
        topology unscheduled for good."""
        limit = self.config.nimbus_assignment_max_bytes
        executors = TopologyTasks(defn, config.to_dict(), num_workers, component_executors, component_tasks).executors
        try:
            infos = self.state.supervisor_infos()
        except KazooException:
            infos = {}
        bound = assignment_size_bound(
            executors, num_workers, code_dir=str(self.blobs.dir(f"{name}-{10**9}-{10**10}")),
            owner=OWNER,
            node_id_len=max((len(sid) for sid in infos), default=64),
            host_len=max((len(i.hostname) for i in infos.values()), default=64),
        )
        if bound > limit:
            raise TopologyError(
                f"{action} refused: the assignment of topology {name!r} ({len(executors)} executors over "
                f"{num_workers} workers) could take {bound:,} bytes in ZooKeeper, more than "
                f"nimbus.assignment.max.bytes ({limit:,} bytes; ZooKeeper's jute.maxbuffer is 1,048,575 by default); "
                "use fewer executors or workers, or raise the limit (and jute.maxbuffer on every ZooKeeper server "
                "and client) — see docs/scaling.md"
            )

    def _reserve(self, name: str) -> tuple[str, float]:
        """Take ``name`` and a new topology id for a submit (under :attr:`lock`)."""
        bases = self.state.storm_bases()
        if any(b.name == name and b.status != TopologyStatus.KILLED for b in bases.values()):
            raise TopologyError(f"a topology named {name!r} is already running; kill it first or pick another name")
        if name in self.pending.values():
            raise TopologyError(f"a topology named {name!r} is being submitted; wait for it or pick another name")
        now = self.clock.time()
        self._submitted += 1
        topology_id = f"{name}-{self._submitted}-{int(now)}"
        while topology_id in bases or topology_id in self.pending:
            self._submitted += 1
            topology_id = f"{name}-{self._submitted}-{int(now)}"
        self.pending[topology_id] = name
        return topology_id, now

    def _discard(self, topology_id: str) -> None:
        """Take back what an abandoned submit wrote (under :attr:`lock`); cleanup finishes the job
        if ZooKeeper is unreachable now."""
        log.warning("topology-submit-abandoned", topology=topology_id)
        self.blobs.delete(topology_id)
        self._defs.pop(topology_id, None)
        try:
            self.state.teardown_blobs(topology_id)
            self.state.teardown_heartbeats(topology_id)
            self.state.teardown_errors(topology_id)
        except KazooException as exc:
            log.warning("topology-discard-incomplete", topology=topology_id, error=type(exc).__name__)

    def _schedule_now(self) -> None:
        """A scheduling round right after a submit (under :attr:`lock`). The topology is written
        already: if the round fails, the monitor loop's next round schedules it."""
        try:
            self.mk_assignments()
        except FencedError:
            self.leader.step_down()
        except KazooException as exc:
            log.warning("submit-round-deferred", error=type(exc).__name__)
            self.wakeup.set()

    # ------------------------------------------------------------------ user actions

    def _update_base(self, name_or_id: str, fn) -> tuple[str, StormBase]:
        self.require_leader()
        with self.lock:
            tid = self.topology_id(name_or_id)
            base = self.state.storm_base(tid)
            if base is None:
                raise NotFoundError(f"topology {name_or_id!r} disappeared")
            new = fn(base)
            if new != base:
                try:
                    self.state.set_storm_base(tid, new)
                except FencedError:
                    self.leader.step_down()
                    raise NotLeaderError(None) from None
            return tid, new

    def activate(self, name: str) -> str:
        tid, _ = self._update_base(name, transitions.activate)
        log.info("topology-activated", topology=tid)
        return tid

    def deactivate(self, name: str) -> str:
        tid, _ = self._update_base(name, transitions.deactivate)
        log.info("topology-deactivated", topology=tid)
        return tid

    def kill(self, name: str, wait_secs: int | None = None) -> str:
        def fn(base: StormBase) -> StormBase:
            _, config = self.definition(self.topology_id(name))
            wait = wait_secs if wait_secs is not None else config.topology_kill_wait_secs
            if wait is None:
                wait = config.topology_message_timeout_secs
            return transitions.kill(base, int(wait), self.clock.time())

        tid, new = self._update_base(name, fn)
        log.info("topology-killed", topology=tid, wait_secs=new.topology_action_options.kill.wait_secs)
        self.wakeup.set()
        return tid

    def rebalance(self, name: str, wait_secs: int | None = None, num_workers: int | None = None,
                  num_executors: Mapping[str, int] | None = None, num_tasks: Mapping[str, int] | None = None) -> str:
        """Storm's rebalance, and Gale's change of task counts (:mod:`gale.nimbus.rescale`): an
        executor count above a component's task count, or ``num_tasks``, gives it that many
        tasks. Everything is validated before anything is written."""
        tid = self.topology_id(name)
        defn, config = self.definition(tid)
        if num_workers is not None and num_workers < 1:
            raise TopologyError(f"rebalance: number of workers must be >= 1, got {num_workers}")
        base = self.state.storm_base(tid)
        if base is None:
            raise NotFoundError(f"topology {name!r} disappeared")
        plan = plan_rescale(defn, config, base.component_executors, base.component_tasks,
                            dict(num_executors or {}), dict(num_tasks or {}))
        executors, tasks = plan.executors, plan.tasks
        check_counts(base.name, "rebalance", self.config, config, defn, num_workers or base.num_workers,
                     {**base.component_executors, **executors}, {**base.component_tasks, **tasks})
        self.check_assignment_size(base.name, defn, config, num_workers or base.num_workers,
                                   {**base.component_executors, **executors}, "rebalance",
                                   {**base.component_tasks, **tasks})
        wait = wait_secs if wait_secs is not None else config.topology_message_timeout_secs

        def fn(base: StormBase) -> StormBase:
            return transitions.rebalance(base, int(wait), self.clock.time(), num_workers, executors, tasks)

        tid, _ = self._update_base(tid, fn)
        log.info("topology-rebalancing", topology=tid, wait_secs=wait, workers=num_workers, executors=executors,
                 tasks=tasks)
        self.wakeup.set()
        return tid

    # ------------------------------------------------------------------ monitor loop

    def _monitor_loop(self) -> None:
        period = float(self.config.nimbus_monitor_freq_secs)
        while not self.stopping.is_set():
            # clear before the round: a wake-up that arrives during the round is not lost
            self.wakeup.clear()
            bind(round_id=secrets.token_hex(6))  # correlation id of every line of this round
            try:
                if self._needs_register:
                    self._needs_register = False
                    self.register()
                else:
                    # keep /nimbuses/<me> current (leader flag, uptime) for the API and UI
                    self.state.set_nimbus_summary(self.address, self.summary())
                if self.is_leader():
                    self.monitor_round()
                else:
                    self.replication.sync()
            except FencedError as exc:
                log.warning("monitor-round-fenced", error=str(exc))
                self.leader.step_down()
            except KazooException as exc:
                log.warning("monitor-round-failed", error=f"{type(exc).__name__}: {exc}")
            except Exception:  # noqa: BLE001 - a bug: log it, count it, keep the loop alive
                log.exception("monitor-round-crashed")
                if self.metrics is not None:
                    self.metrics.round_errors.inc()
            self.iterations += 1
            self.wakeup.wait(period)

    def monitor_round(self) -> None:
        with self.lock:
            self.run_due_actions()
            self.mk_assignments()
            self.cleanup()

    def run_due_actions(self) -> None:
        now = self.clock.time()
        for tid, base in self.state.storm_bases().items():
            action = transitions.due_action(base, now)
            if action == "remove":
                self.remove(tid)
            elif action == "do-rebalance":
                new = transitions.do_rebalance(base)
                self.state.set_storm_base(tid, new)
                self.cache.forget(tid)
                log.info("topology-rebalanced", topology=tid, workers=new.num_workers, tasks=new.component_tasks)
                self.mk_assignments(scratch=tid)

    def remove(self, topology_id: str) -> None:
        self.state.remove_assignment(topology_id)
        self.state.remove_storm_base(topology_id)
        self.cache.forget(topology_id)
        log.info("topology-removed", topology=topology_id)
        self.cleanup()

    def cleanup(self) -> None:
        """Remove heartbeats, errors and code of topologies that no longer exist (or are not
        being submitted)."""
        live = set(self.state.storm_ids()) | set(self.pending)
        s = self.state
        for listed, teardown in ((s.heartbeat_topologies, s.teardown_heartbeats), (s.error_topologies, s.teardown_errors),
                                 (s.blob_topologies, s.teardown_blobs), (s.log_config_topologies, s.teardown_log_config)):
            for tid in listed():
                if tid not in live:
                    teardown(tid)
        for tid in self.blobs.ids():
            if tid not in live:
                self.blobs.delete(tid)
                self._defs.pop(tid, None)

    def mk_assignments(self, scratch: str | None = None) -> dict[str, Assignment]:
        """One scheduling round: read a snapshot, plan it (:func:`~gale.nimbus.plan.plan_round`),
        apply the plan with fenced writes. Returns the assignments written."""
        t0 = self.clock.perf_counter()
        cpu0 = time.thread_time()  # a measurement for the log (the round's own CPU, whatever the machine's load)
        if self._forget_heartbeats:
            # heartbeats could not be written or seen while ZooKeeper was away (or another nimbus
            # led): their last times are stale, not a sign of death. Start over: each executor's
            # current beat counts as new, and it has nimbus.task.timeout.secs to beat again.
            self._forget_heartbeats = False
            self.cache = HeartbeatCache()
            log.info("heartbeat-cache-reset", reason="ZooKeeper connection resumed or leadership began")
        snapshot = self.read_snapshot(scratch)
        t1 = self.clock.perf_counter()
        plan = plan_round(snapshot)
        t2 = self.clock.perf_counter()
        self.cache = plan.cache
        written = self.apply_plan(plan)
        t3 = self.clock.perf_counter()
        self.rounds += 1
        log.info("scheduling-round", secs=round(t3 - t0, 4), cpu_secs=round(time.thread_time() - cpu0, 4),
                 read_secs=round(t1 - t0, 4), plan_secs=round(t2 - t1, 4),
                 write_secs=round(t3 - t2, 4), topologies=len(snapshot.topologies),
                 supervisors=len(snapshot.supervisors), writes=len(plan.writes), deletions=len(plan.deletions))
        if self.metrics is not None:
            self.metrics.observe_round(t3 - t0)
        return written

    def read_snapshot(self, scratch: str | None = None) -> RoundSnapshot:
        """What a scheduling round decides on: cluster state, code and heartbeats, this instant."""
        now = self.clock.time()
        storm_ids = set(self.state.storm_ids())
        bases = self.state.storm_bases()
        supervisors = self.state.supervisor_infos()
        assignments = self.state.assignments()
        topologies: dict[str, TopologyInputs] = {}
        # live supervisors report their workers' heartbeats; workerbeats are read only for the
        # slots those reports do not vouch for (a supervisor gone, or its reports stopped)
        wanted = workerbeats_wanted(assignments, supervisors, self.cache)
        for tid, base in sorted(bases.items()):
            try:
                defn, config = self.definition(tid)
            except (NotFoundError, OSError, ValueError) as exc:
                log.error("topology-code-unavailable", topology=tid, error=str(exc))
                continue
            slots = wanted.get(tid)
            topologies[tid] = TopologyInputs(
                base=base, defn=defn, conf=config.to_dict(), code_dir=str(self.blobs.dir(tid)),
                code_checksum=self.blobs.checksum(tid),
                heartbeats=self.state.worker_heartbeats_of(tid, slots) if slots else {},
            )
        return RoundSnapshot(
            now=now, topologies=topologies, storm_ids=frozenset(storm_ids | set(bases)), assignments=assignments,
            supervisors=supervisors, cache=self.cache, timeouts=SchedulingTimeouts.from_config(self.config),
            scratch=scratch,
        )

    def apply_plan(self, plan: RoundPlan) -> dict[str, Assignment]:
        """Write a round's plan (fenced) and log and count what changed."""
        written: dict[str, Assignment] = {}
        limit = self.config.nimbus_assignment_max_bytes
        for w in plan.writes:
            size = len(w.assignment.encode())
            if size > limit:
                # submit and rebalance refuse what could grow this big; ZooKeeper would drop the
                # connection on a request over jute.maxbuffer
                log.error("assignment-too-large", topology=w.topology_id, bytes=size, limit=limit)
                continue
            self.state.set_assignment(w.topology_id, w.assignment)
            written[w.topology_id] = w.assignment
            placements = w.assignment.executors()
            log.info("assignment-written", topology=w.topology_id, executors=len(placements),
                     slots=len(set(placements.values())), moved=len(w.moved), dead=len(w.dead))
            if self.metrics is not None and w.moved and w.previous is not None:
                self.metrics.executors_reassigned.labels(reason="dead" if w.dead else "rebalance").inc(len(w.moved))
        for tid in plan.deletions:
            self.state.remove_assignment(tid)
            log.warning("assignment-removed", topology=tid, reason="its topology no longer exists")
        return written
