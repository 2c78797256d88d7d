"""The cluster under test: two "nodes" on this machine, and the observations faults rely on.

* host node: ZooKeeper (the cluster's own server, or an ensemble of three, so it can be restarted),
  the workload's services (RabbitMQ; or a Kafka-protocol broker and Redis), two nimbuses and ``HOST_SUPERVISORS`` supervisors, all bound to and advertising the
  veth host address;
* namespaced node: one supervisor (and so its workers) inside :class:`~tests.chaos.netns.NetNamespace`,
  advertising the namespace's address.

Every supervisor has one slot and the topology asks for as many workers as there are supervisors,
so when a lost node comes back nimbus spreads the topology over it again (fewer workers than
requested while slots are free) and every fault finds work on every node.

Observations come from outside the daemons: ZooKeeper read directly (the project's own
:class:`~gale.layout.Layout` and :mod:`gale.records`, every read bounded by a timeout so a
ZooKeeper restart never blocks a fault), nimbus's HTTP API,
ZooKeeper's ``cons`` four-letter word (which client connection has which session), and ``/proc``
(psutil) for processes. The workload (:mod:`tests.chaos.workload`) observes its own services.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import psutil
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from gale.layout import Layout
from gale.records import Assignment
from gale.zkserver import ZooKeeperEnsemble, ZooKeeperServer, four_letter
from gale.nimbus.client import NimbusClient
from gale.nimbus.devcluster import DevCluster
from tests.chaos.netns import NetNamespace, sweep_stale

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY_NAME = "chaos"
HOST_SUPERVISORS = 2
NS_SUPERVISOR_ID = "sup-netns"

#: timeouts: fast enough for a bounded run, with the orderings Storm recommends
#: (nimbus.task.timeout > supervisor.worker.timeout > a worker freeze long enough to expire its session)
CONF: dict[str, Any] = {
    "nimbus.monitor.freq.secs": 1,
    "nimbus.task.timeout.secs": 15,
    "nimbus.task.launch.secs": 40,
    "supervisor.worker.timeout.secs": 12,
    "supervisor.worker.start.timeout.secs": 40,
    "supervisor.worker.shutdown.sleep.secs": 1,
    "supervisor.monitor.frequency.secs": 1,
    "supervisor.heartbeat.frequency.secs": 1,
    "task.heartbeat.frequency.secs": 1,
    "task.refresh.poll.secs": 2,
    "storm.zookeeper.session.timeout": 6000,
    "topology.message.timeout.secs": 10,
    "topology.min.replication.count": 2,
    "topology.max.replication.wait.time.sec": 30,
}
SESSION_TIMEOUT_SECS = CONF["storm.zookeeper.session.timeout"] / 1000.0
ZK_READ_TIMEOUT_SECS = 5.0


class Stopping(Exception):
    """The run is stopping (interrupted, or failed elsewhere): a fault must not go on."""


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def process_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def tcp_connections_to(pid: int, port: int) -> list[tuple[str, int]]:
    """Local (ip, port) of ``pid``'s established IPv4 TCP connections to remote ``port``.

    Read from ``/proc/<pid>/net/tcp``, which shows the process's own network namespace (psutil
    reads the caller's, so it misses the namespaced workers' sockets).
    """
    try:
        inodes = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    out = []
    for line in lines:
        f = line.split()
        local, remote, st, inode = f[1], f[2], f[3], f[9]
        if st != "01" or inode not in inodes or int(remote.split(":")[1], 16) != port:
            continue
        hex_ip, hex_port = local.split(":")
        ip = ".".join(str(b) for b in reversed(bytes.fromhex(hex_ip)))
        out.append((ip, int(hex_port, 16)))
    return out


_CONS = re.compile(r"/([0-9.]+):(\d+)\[\d+\]\(.*?sid=(0x[0-9a-f]+)")


class ChaosCluster:
    def __init__(self, base: Path, *, zookeepers: int = 1):
        self.zookeepers = zookeepers
        self.base = Path(base)
        self.base.mkdir(parents=True, exist_ok=True)
        self.state_dir = self.base / "state"
        self.state_dir.mkdir(exist_ok=True)
        self.ns = NetNamespace()
        self.host = self.ns.host_ip
        self.zk: ZooKeeperServer | ZooKeeperEnsemble | None = None
        self.dev: DevCluster | None = None
        self.observer: KazooClient | None = None
        self.layout = Layout("/storm")
        self.topology_id: str | None = None
        #: the workload's Redis server, when it has one (the target of the redis_kill fault)
        self.redis: Any = None
        #: the workload's PostgreSQL server, when it has one (the target of the postgres_kill fault)
        self.postgres: Any = None
        self.stopped_pids: set[int] = set()  # SIGSTOPped by a fault and not resumed yet
        #: set when the run stops: fault threads still running must not start or kill anything more
        self.closing = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self, services: Callable[[], None] | None = None) -> ChaosCluster:
        """Create the namespace, start ZooKeeper, nimbuses and supervisors; ``services`` (the
        workload's brokers, reachable at :attr:`host`) start on a thread meanwhile."""
        for name in sweep_stale():
            log(f"removed a stale namespace {name}")
        self.ns.create()
        log(f"namespace {self.ns.name}: host {self.ns.host_ip}, namespace {self.ns.ns_ip} ({self.ns.host_if})")
        services_error: list[BaseException] = []

        def start_services() -> None:
            try:
                if services is not None:
                    services()
            except BaseException as exc:  # noqa: BLE001 - reported by the joining thread
                services_error.append(exc)

        services_thread = threading.Thread(target=start_services, name="chaos-services-start", daemon=True)
        services_thread.start()
        if self.zookeepers > 1:
            self.zk = ZooKeeperEnsemble(self.zookeepers, base_dir=self.base / "zookeeper", host=self.host,
                                        tick_time_ms=500)
        else:
            self.zk = ZooKeeperServer(host=self.host, data_dir=self.base / "zookeeper", tick_time_ms=500)
        self.zk.start()
        self.dev = DevCluster(self.base / "cluster", supervisors=HOST_SUPERVISORS, slots=1, nimbuses=2,
                              zookeeper=self.zk, root="/storm", conf=CONF, advertise_host=self.host)
        self.dev.start(timeout=120)
        self.dev.add_supervisor(command_prefix=self.ns.prefix,
                                conf={"storm.local.hostname": self.ns.ns_ip, "supervisor.id": NS_SUPERVISOR_ID})
        self.dev.wait_for_supervisors(self.n_supervisors, 120)
        self.observer = KazooClient(hosts=self.zk.address, timeout=10.0)
        self.observer.start(timeout=20)
        services_thread.join(150)
        if services_error:
            raise services_error[0]
        if services_thread.is_alive():
            raise RuntimeError("the workload's services did not start within 150 s")
        log(f"cluster up: ZooKeeper {self.zk.address}, nimbus {self.dev.nimbus_ports}, base {self.base}")
        return self

    @property
    def n_supervisors(self) -> int:
        return HOST_SUPERVISORS + 1

    @property
    def ns_index(self) -> int:
        return HOST_SUPERVISORS

    def submit(self, topology: Path, conf: dict[str, Any], timeout: float = 180.0) -> str:
        """Submit ``topology`` as :data:`TOPOLOGY_NAME` with the ``-c`` overrides ``conf`` (plus
        ``chaos.state.dir`` and ``chaos.workers``: one worker per supervisor)."""
        overrides = {**conf, "chaos.state.dir": str(self.state_dir), "chaos.workers": self.n_supervisors}
        args = ["submit", str(topology), "--name", TOPOLOGY_NAME, "--wait", "--wait-timeout", str(timeout)]
        for k, v in overrides.items():
            args += ["-c", f"{k}={v}"]
        proc = self.cli(*args, timeout=timeout + 60)
        self.topology_id = proc.stdout.strip().splitlines()[-1]
        log(f"submitted {self.topology_id}")
        return self.topology_id

    def cli(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        env = dict(os.environ, GALE_CONFIG=str(self.dev.client_config_path()))
        proc = subprocess.run([sys.executable, "-m", "gale.nimbus.cli", *args], capture_output=True, text=True, env=env,
                              timeout=timeout, cwd=ROOT)
        if proc.returncode != 0:
            raise RuntimeError(f"nimbus {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def stop(self) -> None:
        """Stop and remove everything, whatever state a fault left it in."""
        self.closing.set()
        for pid in list(self.stopped_pids):
            self.resume(pid)
        if self.ns.created and self.ns.partitioned:
            try:
                self.ns.heal()
            except Exception:  # noqa: BLE001
                pass
        if self.observer is not None:
            try:
                self.observer.stop()
                self.observer.close()
            except Exception:  # noqa: BLE001
                pass
        if self.dev is not None:
            try:
                self.dev.stop()
            except Exception as exc:  # noqa: BLE001
                log(f"dev cluster stop: {exc!r}")
            for d in self.dev.supervisor_procs + self.dev.nimbus_procs:
                d.kill()
        if self.ns.created:
            for pid in self.ns.pids():  # anything still inside (workers of a killed supervisor)
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + 10
            while self.ns.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
            self.ns.cleanup()
        if self.zk is not None:
            self.zk.stop()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------------ processes

    def guard(self) -> None:
        if self.closing.is_set():
            raise Stopping("the run is stopping")

    def suspend(self, pid: int) -> None:
        self.guard()
        self.stopped_pids.add(pid)
        os.kill(pid, signal.SIGSTOP)

    def resume(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.stopped_pids.discard(pid)

    def kill_worker(self, pid: int) -> None:
        self.guard()
        os.kill(pid, signal.SIGKILL)

    def kill_supervisor(self, i: int) -> None:
        self.guard()
        self.dev.kill_supervisor(i, with_workers=True)

    def restart_supervisor(self, i: int) -> None:
        self.guard()
        self.dev.add_supervisor(i)

    def kill_nimbus(self, i: int) -> None:
        self.guard()
        self.dev.nimbus_procs[i].kill()

    def restart_nimbus(self, i: int) -> None:
        self.guard()
        self.dev.add_nimbus(i)

    def kill_zookeeper(self) -> None:
        self.guard()
        self.zk.kill()

    def start_zookeeper(self) -> None:
        self.guard()
        self.zk.start()

    # ensemble members (zookeepers > 1)

    def zk_members(self) -> list[ZooKeeperServer]:
        return list(self.zk.servers) if isinstance(self.zk, ZooKeeperEnsemble) else [self.zk]

    def kill_zk_member(self, i: int) -> None:
        self.guard()
        self.zk.kill(i)

    def start_zk_member(self, i: int) -> None:
        self.guard()
        self.zk.start_server(i)

    def zk_leader(self) -> int | None:
        return self.zk.leader() if isinstance(self.zk, ZooKeeperEnsemble) else None

    def partition(self) -> None:
        self.guard()
        self.ns.partition()

    def heal(self) -> None:
        self.ns.heal()

    def supervisor_pid(self, i: int) -> int | None:
        d = self.dev.supervisor_procs[i]
        return d.proc.pid if d.alive() else None

    def workers(self) -> dict[int, int]:
        """Live worker pid → supervisor index."""
        out = {}
        for i in range(self.n_supervisors):
            for pid in self.dev.worker_pids(i):
                if process_alive(pid):
                    out[pid] = i
        return out

    # ------------------------------------------------------------------ ZooKeeper views

    def supervisor_id(self, i: int) -> str:
        return self.dev.supervisor_id(i)

    def _zk(self, async_result: Any) -> Any:
        try:
            return async_result.get(timeout=ZK_READ_TIMEOUT_SECS)
        except NoNodeError:
            return None

    def supervisor_owner(self, i: int) -> int | None:
        """Session id owning supervisor ``i``'s ephemeral node, or None when the node is absent."""
        stat = self._zk(self.observer.exists_async(self.layout.supervisor(self.supervisor_id(i))))
        return stat.ephemeralOwner if stat is not None else None

    def registered(self) -> set[str]:
        return set(self._zk(self.observer.get_children_async(self.layout.supervisors_dir)) or ())

    def executors_on(self, i: int) -> int:
        path = self.layout.assignment(self.topology_id)
        got = self._zk(self.observer.get_async(path))
        if got is None:
            return 0
        a = Assignment.decode(got[0], path)
        return sum(len(v) for v in a.executors_on(self.supervisor_id(i)).values())

    def leader_epoch(self) -> int:
        data, _ = self._zk(self.observer.get_async(self.layout.leader_epoch))
        return int(data.decode() or 0)

    def zk_sessions(self) -> dict[tuple[str, int], str]:
        """Client (ip, port) → session id, from ZooKeeper's ``cons`` (every running member's)."""
        found = {}
        for server in self.zk_members():
            if not server.running():
                continue
            try:
                out = four_letter(server.host, server.port, "cons", timeout=2.0)
            except OSError:
                continue
            found.update({(m.group(1), int(m.group(2))): m.group(3) for m in _CONS.finditer(out)})
        return found

    def zk_session_of(self, pid: int) -> str | None:
        """The session id of the ZooKeeper connection process ``pid`` holds, if any."""
        mine = {conn for server in self.zk_members() for conn in tcp_connections_to(pid, server.port)}
        if not mine:
            return None
        for addr, sid in self.zk_sessions().items():
            if addr in mine:
                return sid
        return None

    # ------------------------------------------------------------------ nimbus views

    def nimbus(self) -> NimbusClient:
        return NimbusClient(self.dev.client_conf(), timeout=10.0)

    def topology(self) -> dict[str, Any] | None:
        try:
            with self.nimbus() as client:
                return client.topology(TOPOLOGY_NAME)
        except Exception:  # noqa: BLE001 - unreachable or no leader: not observable right now
            return None

    def spout_failed(self, component: str = "mq") -> int | None:
        t = self.topology()
        if t is None:
            return None
        return int((t["components"][component]["stats"] or {}).get("failed", 0))

    def component_stat(self, component: str, key: str) -> int | None:
        """A counter of ``component``'s stats (its ``extra`` metrics included), as nimbus reports it."""
        t = self.topology()
        if t is None or component not in t["components"]:
            return None
        stats = t["components"][component]["stats"] or {}
        return int(stats.get(key, (stats.get("extra") or {}).get(key, 0)))

    def component_workers(self, component: str) -> set[int]:
        """Pids of the workers running ``component``'s executors, as nimbus reports them."""
        t = self.topology()
        if t is None or component not in t["components"]:
            return set()
        return {e["worker"]["pid"] for e in t["components"][component]["executor_list"]
                if (e.get("worker") or {}).get("pid")}

    def heartbeats(self) -> dict[int, int]:
        """Worker pid → its latest heartbeat time (secs), as nimbus reports the topology."""
        t = self.topology()
        if t is None:
            return {}
        out: dict[int, int] = {}
        for comp in t["components"].values():
            for e in comp["executor_list"]:
                w = e.get("worker") or {}
                if w.get("pid") and w.get("heartbeat_secs"):
                    out[w["pid"]] = max(out.get(w["pid"], 0), int(w["heartbeat_secs"]))
        return out

    def heartbeats_after(self, marks: dict[int, int], pids=None) -> bool:
        """Every worker in ``marks`` (or just ``pids``) wrote a heartbeat newer than its mark: the
        positive marker that the cluster went on since ``marks`` was read."""
        now = self.heartbeats()
        return all(now.get(pid, 0) > mark for pid, mark in marks.items() if pids is None or pid in pids)

    def leader_index(self) -> int | None:
        for i, d in enumerate(self.dev.nimbus_procs):
            if d.alive() and (self.dev.health(i) or {}).get("leader"):
                return i
        return None

    def health_problems(self) -> list[str]:
        """What keeps the cluster from being healthy (empty: healthy)."""
        problems = []
        try:
            missing = {self.supervisor_id(i) for i in range(self.n_supervisors)} - self.registered()
            if missing:
                problems.append(f"supervisors not registered: {sorted(missing)}")
        except Exception as exc:  # noqa: BLE001
            problems.append(f"ZooKeeper: {type(exc).__name__}")
        if self.leader_index() is None:
            problems.append("no nimbus leader")
        t = self.topology()
        if t is None:
            problems.append("topology status unavailable")
        else:
            if t["executors_running"] < t["executors"]:
                problems.append(f"{t['executors_running']}/{t['executors']} executors running")
            if t["workers"] < t["requested_workers"]:
                problems.append(f"{t['workers']}/{t['requested_workers']} workers")
        return problems

    def wait_healthy(self, timeout: float) -> tuple[bool, float, list[str]]:
        t0 = time.monotonic()
        problems: list[str] = []
        while time.monotonic() - t0 < timeout:
            problems = self.health_problems()
            if not problems:
                return True, time.monotonic() - t0, []
            time.sleep(0.5)
        return False, time.monotonic() - t0, problems

    # ------------------------------------------------------------------ diagnostics

    def log_tails(self, lines: int = 30) -> str:
        parts = []
        for d in self.dev.nimbus_procs + self.dev.supervisor_procs:
            parts.append(f"--- {d.name}\n{d.log_tail(lines)}")
        for p in sorted(self.dev.base.glob("supervisor-*/logs/workers-artifacts/*/*/worker.*")):
            try:
                parts.append(f"--- {p}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:]))
            except OSError:
                pass
        return "\n".join(parts)
