"""A real local cluster for development, demos and tests: ZooKeeper (one server or an ensemble),
nimbus(es), supervisors, and on request the services topologies read and write: a Kafka-protocol
broker (Tansu, :mod:`gale.kafkaserver`), a Redis server for managed state (:mod:`gale.redisserver`)
and a PostgreSQL server for the PostgreSQL sink (:mod:`gale.pgserver`).

Every daemon is a separate process started exactly as in production (``nimbus serve``,
``supervisor serve`` with a YAML config each); only the machine is shared. ``nimbus dev-cluster``
runs one until Ctrl-C; tests use :class:`DevCluster` directly to inject faults.

Ports: a nimbus binds port 0 unless a port is asked for, and the cluster reads the port it got
from the nimbus's own ``http-listening`` log event (a restart asks for the same port again and
falls back to port 0 if another program took it meanwhile). A supervisor's slot ports (and each
slot's worker metrics port, slot + ``worker.metrics.port.offset``) must be in its config before
its workers start, so they are reserved with :func:`gale.ports.reserve_port` — outside the
kernel's ephemeral range, so no port-0 bind or outgoing connection on the machine can take them,
and locked against other dev clusters — for the cluster's lifetime. The Kafka broker prefers Kafka's
port (``kafka_port``, 9092) and takes a reserved port when another program holds that one; Redis
gets a reserved port. Both live in the cluster's directory (``kafka/tansu.log``, ``redis/redis.log``),
start after ZooKeeper and stop after the workers that use them; PostgreSQL too, except that its
directory is its own (``gale-pg-*`` in the temp directory: the server runs as the ``postgres`` user).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from gale import config as gconfig
from gale.config_keys import Config
from gale.errors import GaleError
from gale.kafkaserver import KAFKA_PORT, TansuBroker, broker_binary
from gale.ports import PortReservation, reserve_port
from gale.pgserver import PostgresServer, PostgresServerError, pg_bin
from gale.redisserver import RedisServer
from gale.zkserver import ZooKeeperEnsemble, ZooKeeperServer

if TYPE_CHECKING:  # the supervisor's module is imported by whoever passes a fork server
    from gale.supervisor.fork_server import ForkServer

_CONSOLE_LISTENING = re.compile(r"http-listening\b.*\bport=(\d+)")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def listening_port(log_text: str, server: str = "nimbus") -> int | None:
    """The port in the first ``http-listening`` event of ``server`` in a daemon's log (JSON or console)."""
    for line in log_text.splitlines():
        if "http-listening" not in line:
            continue
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "http-listening" and event.get("server") == server:
                return int(event["port"])
        elif f"server={server}" in line:
            m = _CONSOLE_LISTENING.search(line)
            if m:
                return int(m.group(1))
    return None


#: what a fork server for a dev cluster's daemons imports (``ForkServer(..., preload=DAEMON_PRELOAD)``):
#: the nimbus and supervisor daemons and the command line's submit path — not the command modules
#: themselves (``gale.nimbus.cli``, ``gale.supervisor.cli``), which each child runs as ``__main__``
DAEMON_PRELOAD = ("click", "gale.config", "gale.nimbus.cli_actions", "gale.nimbus.cli_common", "gale.nimbus.cli_queries",
                  "gale.nimbus.logs_cmd", "gale.nimbus.serve", "gale.supervisor.serve", "gale.nimbus.client",
                  "gale.bundle", "gale.topology.loader")


class Daemon:
    """One daemon of a dev cluster: started by exec, or forked by ``launcher`` (a
    :class:`gale.supervisor.fork_server.ForkServer` that imported the daemons: its ``spawn`` gives a
    process with :class:`subprocess.Popen`'s ``pid``, ``poll``, ``wait`` and signals, or None for an
    exec)."""

    def __init__(self, name: str, args: list[str], log_path: Path, env: dict[str, str] | None = None,
                 launcher: ForkServer | None = None):
        self.name = name
        self.args = args
        self.log_path = log_path
        self.env = env
        self.launcher = launcher
        self.proc: Any = None  # subprocess.Popen, or the launcher's forked process
        #: where this run's lines start in the (appended) log file
        self.log_offset = 0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.log_offset = out.tell()
            self.proc = None if self.launcher is None else self.launcher.spawn(
                self.args, Path.cwd(), dict(os.environ if self.env is None else self.env), self.log_path)
            if self.proc is None:
                self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=self.env, start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def run_log(self) -> str:
        """This run's lines (since the last :meth:`start`)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self.log_offset)
                return fh.read().decode(errors="replace")
        except FileNotFoundError:
            return ""


class DevCluster:
    def __init__(
        self,
        base_dir: str | Path | None = None,
        *,
        supervisors: int = 2,
        slots: int = 2,
        nimbuses: int = 1,
        http_port: int = 0,
        zookeeper: ZooKeeperServer | ZooKeeperEnsemble | None = None,
        zookeepers: int = 1,
        root: str = "/storm",
        conf: dict[str, Any] | None = None,
        log_format: str = "json",
        advertise_host: str = "127.0.0.1",
        kafka: bool = False,
        kafka_port: int = KAFKA_PORT,
        redis: bool = False,
        postgres: bool = False,
        fork_server: ForkServer | None = None,
    ):
        """``kafka`` starts a Tansu broker (on ``kafka_port`` when free, 0: any free port), ``redis`` a
        Redis server and ``postgres`` a PostgreSQL server with the cluster; :attr:`kafka`,
        :attr:`redis` and :attr:`postgres` hold them. ``fork_server`` (a
        :class:`gale.supervisor.fork_server.ForkServer` that imported the daemons, see
        :data:`DAEMON_PRELOAD`) forks the nimbus and supervisor daemons instead of exec'ing them."""
        self.fork_server = fork_server
        self._own_dir = base_dir is None
        self.base = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="gale-dev-"))
        self.base.mkdir(parents=True, exist_ok=True)
        self.n_supervisors = supervisors
        self.n_slots = slots
        self.n_nimbuses = nimbuses
        self._own_zk = zookeeper is None
        self.zk = zookeeper
        #: servers of the cluster's own ZooKeeper (when none is given): 1, or an ensemble of 3, 5...
        self.n_zookeepers = zookeepers
        self.root = root
        self.extra = dict(conf or {})
        extra = Config.resolve(self.extra, where="dev-cluster configuration", allow_user_keys=False)
        #: what every worker's /metrics port is offset from its slot port by
        self.metrics_port_offset = extra.worker_metrics_port_offset
        self.log_format = log_format
        #: the address daemons advertise and nimbus binds (a veth address when some supervisors run in
        #: network namespaces and must reach nimbus, ZooKeeper and the host's workers)
        self.advertise_host = advertise_host
        if not _is_loopback(advertise_host) and not extra.nimbus_api_token and not extra.nimbus_api_token_file:
            # nimbus will listen where other machines (namespaces) reach it: it needs an API token
            self.extra["nimbus.api.token"] = secrets.token_hex(16)
        #: the port each nimbus listens on (0 until it reported one; ``http_port`` is the first's wish)
        self.nimbus_ports = [http_port] + [0] * (nimbuses - 1) if nimbuses else []
        #: slot (+ worker metrics) ports held for the cluster's lifetime
        self.reservations: list[PortReservation] = []
        self.nimbus_procs: list[Daemon] = []
        self.supervisor_procs: list[Daemon] = []
        self.supervisor_confs: list[dict[str, Any]] = []
        #: per supervisor: argv prefix of its command (e.g. ``["ip", "netns", "exec", ns]``), kept for restarts
        self.supervisor_prefixes: list[list[str]] = []
        self.kafka = TansuBroker(prefer_port=kafka_port or None, data_dir=self.base / "kafka") if kafka else None
        self.redis = RedisServer(data_dir=self.base / "redis") if redis else None
        # in a directory of its own: the server runs as the postgres user, which the cluster's may not admit
        self.postgres = PostgresServer() if postgres else None

    # ------------------------------------------------------------------ config

    def base_conf(self) -> dict[str, Any]:
        if isinstance(self.zk, ZooKeeperEnsemble):
            zk_conf = {"storm.zookeeper.servers": self.zk.client_servers()}  # host:port of every member
        else:
            zk_conf = {"storm.zookeeper.servers": [self.zk.host], "storm.zookeeper.port": self.zk.port}
        conf = {
            **zk_conf,
            "storm.zookeeper.root": self.root,
            "storm.local.hostname": self.advertise_host,
            "storm.log.format": self.log_format,
            # the nimbuses that reported their port (all of them once the cluster started)
            "nimbus.seeds": [f"{self.advertise_host}:{p}" for p in self.nimbus_ports if p] or [self.advertise_host],
            "nimbus.host": self.advertise_host,
        }
        conf.update(self.extra)
        return conf

    def client_conf(self) -> dict[str, Any]:
        """A full config for clients (CLI, NimbusClient) of this cluster."""
        return gconfig.daemon_config(overrides=self.base_conf())

    def _write_conf(self, name: str, conf: dict[str, Any]) -> Path:
        gconfig.validate(conf, where=f"dev-cluster config {name}", allow_user_keys=False)
        path = self.base / "conf" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(conf, sort_keys=True))
        return path

    def client_config_path(self) -> Path:
        return self._write_conf("client", self.base_conf())

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 60.0) -> DevCluster:
        """Start ZooKeeper (unless given one), the Kafka broker and Redis (when asked for), the
        nimbuses and the supervisors; if any of it fails, stop what was started before raising (a
        failed start leaves no daemon behind). A missing broker binary or redis-server fails first,
        before anything starts."""
        self.check_services()
        try:
            if self.zk is None and self.n_zookeepers > 1:
                self.zk = ZooKeeperEnsemble(self.n_zookeepers, base_dir=self.base / "zookeeper")
            elif self.zk is None:
                self.zk = ZooKeeperServer(data_dir=self.base / "zookeeper")
            if not self.zk.running():
                self.zk.start()
            if self.kafka is not None:
                self.kafka.start()
            if self.redis is not None:
                self.redis.start()
            if self.postgres is not None:
                self.postgres.start()
            if self.fork_server is not None:
                from gale.supervisor.fork_server import READY_SECS

                # it imports while ZooKeeper starts; what it has left costs less than the daemons'
                # own imports would if they were exec'd for want of it
                self.fork_server.wait_ready(READY_SECS)
            # every daemon starts at once (a supervisor registers in ZooKeeper, it needs no nimbus),
            # then the cluster waits for all of them: the interpreters' start-ups overlap
            for i in range(self.n_nimbuses):
                self._launch_nimbus(i, self.nimbus_ports[i])
            for _ in range(self.n_supervisors):
                self.add_supervisor()
            for i in range(self.n_nimbuses):
                self._await_nimbus(i, timeout)
            self.wait_for_leader(timeout)
            self.wait_for_supervisors(self.n_supervisors, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def check_services(self) -> None:
        """A :class:`GaleError` naming what is missing when a requested service cannot be started."""
        if self.kafka is not None and self.kafka.executable is None:
            self.kafka.executable = broker_binary()  # BrokerNotFound is a GaleError with the fix in it
        if self.redis is not None and not Path(self.redis.executable).exists():
            raise GaleError(f"the dev cluster's Redis needs redis-server, not found at {self.redis.executable}: "
                            "apt-get install redis-server (make deps installs it)")
        if self.postgres is not None:
            try:
                pg_bin("postgres")
            except PostgresServerError as exc:
                raise GaleError(f"the dev cluster's PostgreSQL: {exc}") from None

    def add_nimbus(self, i: int, timeout: float = 60.0) -> Daemon:
        """(Re)start nimbus ``i`` and wait until it listens: on its previous port when it had one
        (on port 0 if another program took that port meanwhile), else on the port the kernel gives."""
        self._launch_nimbus(i, self.nimbus_ports[i] if i < len(self.nimbus_ports) else 0)
        return self._await_nimbus(i, timeout)

    def _launch_nimbus(self, i: int, port: int) -> Daemon:
        while len(self.nimbus_ports) <= i:
            self.nimbus_ports.append(0)
        self.nimbus_ports[i] = port
        conf = self.base_conf()
        conf.update({"nimbus.http.port": port, "storm.local.dir": str(self.base / f"nimbus-{i}")})
        path = self._write_conf(f"nimbus-{i}", conf)
        d = Daemon(f"nimbus-{i}", [sys.executable, "-m", "gale.nimbus.cli", "serve", "--config", str(path)],
                   self.base / "logs" / f"nimbus-{i}.log", launcher=self.fork_server)
        d.start()
        if i < len(self.nimbus_procs):
            self.nimbus_procs[i] = d
        else:
            self.nimbus_procs.append(d)
        return d

    def _await_nimbus(self, i: int, timeout: float, retried: bool = False) -> Daemon:
        """Wait for nimbus ``i``'s ``http-listening`` event and record its port; a nimbus that
        found its (earlier) port taken is started again on port 0."""
        d = self.nimbus_procs[i]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = listening_port(d.run_log())
            if port is not None:
                self.nimbus_ports[i] = port
                return d
            if not d.alive():
                text = d.run_log()
                if "Address already in use" in text and self.nimbus_ports[i] and not retried:
                    self._launch_nimbus(i, 0)
                    return self._await_nimbus(i, max(1.0, deadline - time.monotonic()), retried=True)
                raise GaleError(f"{d.name} exited during start:\n{d.log_tail()}")
            time.sleep(0.05)
        raise GaleError(f"{d.name} did not listen within {timeout}s:\n{d.log_tail()}")

    def add_supervisor(self, index: int | None = None, *, command_prefix: list[str] | None = None,
                       conf: dict[str, Any] | None = None) -> Daemon:
        """Start supervisor ``index`` (a new one when None; a restart keeps its config and prefix).

        ``command_prefix`` runs the daemon through another command (``["ip", "netns", "exec", ns]``);
        ``conf`` overrides keys of a new supervisor's config (e.g. ``storm.local.hostname``).
        """
        i = len(self.supervisor_procs) if index is None else index
        offset = self.metrics_port_offset
        overrides = dict(conf or {})
        if index is not None and index < len(self.supervisor_confs):
            conf = self.supervisor_confs[index]
            conf.update(overrides)
        else:
            conf = self.base_conf()
            slots = [reserve_port(offsets=(0, offset) if offset else (0,)) for _ in range(self.n_slots)]
            self.reservations.extend(slots)
            conf.update({
                "storm.local.dir": str(self.base / f"supervisor-{i}"),
                "supervisor.slots.ports": sorted(r.port for r in slots),
                "supervisor.id": f"sup{i}-127.0.0.1",
                # several supervisors share this machine: each log server takes a free port
                "logviewer.port": 0,
            })
            conf.update(overrides)
            self.supervisor_confs.append(conf)
        while len(self.supervisor_prefixes) <= i:
            self.supervisor_prefixes.append([])
        if command_prefix is not None:
            self.supervisor_prefixes[i] = list(command_prefix)
        path = self._write_conf(f"supervisor-{i}", conf)
        d = Daemon(f"supervisor-{i}", [*self.supervisor_prefixes[i], sys.executable, "-m", "gale.supervisor.cli", "serve",
                                       "--config", str(path)],
                   self.base / "logs" / f"supervisor-{i}.log", launcher=self.fork_server)
        d.start()
        if i < len(self.supervisor_procs):
            self.supervisor_procs[i] = d
        else:
            self.supervisor_procs.append(d)
        return d

    def supervisor_config(self, i: int) -> Config:
        """Supervisor ``i``'s configuration, resolved."""
        return Config.resolve(self.supervisor_confs[i], where=f"dev-cluster config supervisor-{i}",
                              allow_user_keys=False)

    def supervisor_id(self, i: int) -> str:
        return self.supervisor_config(i).supervisor_id

    def nimbus_url(self, i: int = 0) -> str:
        return f"http://{self.advertise_host}:{self.nimbus_ports[i]}"

    def health(self, i: int = 0) -> dict[str, Any] | None:
        try:
            return httpx.get(f"{self.nimbus_url(i)}/api/v1/health", timeout=2.0, trust_env=False).json()
        except (httpx.HTTPError, ValueError):
            return None

    def wait_for_leader(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, d in enumerate(self.nimbus_procs):
                if not d.alive():
                    continue
                h = self.health(i)
                if h and h.get("leader"):
                    return i
            dead = [d for d in self.nimbus_procs if not d.alive()]
            if dead and len(dead) == len(self.nimbus_procs):
                raise GaleError(f"nimbus exited during start:\n{dead[0].log_tail()}")
            time.sleep(0.1)
        raise GaleError("no nimbus became leader within "
                        f"{timeout}s:\n" + "\n".join(d.log_tail(20) for d in self.nimbus_procs))

    def cluster(self) -> dict[str, Any]:
        for i, d in enumerate(self.nimbus_procs):
            if d.alive():
                try:
                    r = httpx.get(f"{self.nimbus_url(i)}/api/v1/cluster", timeout=5.0, trust_env=False)
                except httpx.HTTPError:
                    continue
                if r.status_code == 200:
                    return r.json()
                # a nimbus still starting (or between ZooKeeper sessions) answers with an error: ask the next
        raise GaleError("no nimbus reachable with a cluster summary")

    def wait_for_supervisors(self, n: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if len(self.cluster()["supervisors"]) >= n:
                    return
            except GaleError:
                pass
            for d in self.supervisor_procs:
                if d.proc is not None and d.proc.poll() is not None:
                    raise GaleError(f"{d.name} exited during start:\n{d.log_tail()}")
            time.sleep(0.2)
        raise GaleError(f"{n} supervisors did not register within {timeout}s")

    def worker_pids(self, i: int | None = None) -> list[int]:
        """pids of the workers of supervisor ``i`` (or all)."""
        pids = []
        for j in range(len(self.supervisor_confs)) if i is None else [i]:
            root = Path(self.supervisor_config(j).storm_local_dir) / "workers"
            if not root.is_dir():
                continue
            for wdir in root.iterdir():
                for p in (wdir / "pids").glob("*"):
                    if p.name.isdigit():
                        pids.append(int(p.name))
        return sorted(pids)

    def kill_supervisor(self, i: int, with_workers: bool = False) -> None:
        """kill -9 a supervisor (and optionally its workers)."""
        pids = self.worker_pids(i) if with_workers else []
        self.supervisor_procs[i].kill()
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self) -> None:
        for d in self.supervisor_procs:
            if d.alive():
                # stop workers too: a dev cluster leaves nothing behind
                d.proc.send_signal(signal.SIGTERM)
        for d in self.supervisor_procs:
            d.stop()
        for pid in self.worker_pids():
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for d in self.nimbus_procs:
            d.stop()
        for server in (self.redis, self.kafka, self.postgres):
            if server is not None:
                server.stop()
        if self._own_zk and self.zk is not None:
            self.zk.stop()

    def cleanup(self) -> None:
        self.stop()
        for server in (self.redis, self.kafka, self.postgres):
            if server is not None:
                server.cleanup()
        for r in self.reservations:
            r.release()
        self.reservations = []
        if self._own_dir:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def service_lines(cluster: DevCluster) -> list[str]:
    """What to tell a user about the cluster's Kafka broker and Redis: the config to pass and the log."""
    lines = []
    if cluster.kafka is not None:
        k = cluster.kafka
        port = (f"port {k.port}" if not k.prefer_port or k.got_preferred_port
                else f"port {k.prefer_port} is taken: port {k.port}")
        lines.append(f"Kafka      kafka.bootstrap.servers={k.bootstrap}  (Tansu, in memory, {port}; log {k.log_path})")
    if cluster.redis is not None:
        r = cluster.redis
        lines.append(f"Redis      topology.state.redis.url={r.url}  (log {r.log_path})")
    if cluster.postgres is not None:
        pg = cluster.postgres
        lines.append(f"PostgreSQL postgres.url={pg.url}  (prepared transactions on; log {pg.log_path})")
    return lines


def run_dev_cluster(supervisors: int, slots: int, base_dir: str | None, http_port: int, demo: bool,
                    demo_duration: float, zookeepers: int = 1, demo_state: bool = False, *,
                    kafka: bool = False, kafka_port: int = KAFKA_PORT, redis: bool = False,
                    postgres: bool = False, demo_kill_after: float = 20.0) -> int:
    import click

    if zookeepers < 1 or zookeepers % 2 == 0:
        raise GaleError(f"--zookeepers must be an odd number >= 1 (a quorum is a majority), got {zookeepers}")
    if not 0 <= kafka_port <= 65535:
        raise GaleError(f"--kafka-port must be a port number (0: any free port), got {kafka_port}")
    from gale.supervisor.fork_server import ForkServer

    # the state demo keeps its counts in the cluster's Redis
    cluster = DevCluster(base_dir, supervisors=supervisors, slots=slots, http_port=http_port, zookeepers=zookeepers,
                         kafka=kafka, kafka_port=kafka_port, redis=redis or demo_state,
                         postgres=postgres or demo_state)
    try:
        cluster.check_services()  # a missing broker binary or redis-server: one line, before anything starts
    except GaleError:
        cluster.cleanup()  # nothing ran: leave no temp directory either
        raise
    # the daemons are forked from one process that imported them (about 0.3 s of CPU each less than an
    # exec); it imports while ZooKeeper starts; its own errors go to logs/fork-server.log, as a supervisor's
    (cluster.base / "logs").mkdir(parents=True, exist_ok=True)
    fork_log = open(cluster.base / "logs" / "fork-server.log", "ab")  # noqa: SIM115 - kept while the cluster runs
    try:
        forks = ForkServer([sys.executable], dict(os.environ), stderr=fork_log, preload=list(DAEMON_PRELOAD))
    except BaseException:
        fork_log.close()
        cluster.cleanup()  # nothing ran yet: leave no temp directory
        raise
    cluster.fork_server = forks
    what = "ZooKeeper" if zookeepers == 1 else f"a ZooKeeper ensemble of {zookeepers}"
    services = "".join(f", {name}" for name, on in (("a Kafka broker", kafka), ("Redis", redis or demo_state),
                                                     ("PostgreSQL", postgres or demo_state)) if on)
    click.echo(f"starting {what}{services}, nimbus and {supervisors} supervisors x {slots} slots in {cluster.base} ...")
    stop = {"flag": False}

    def on_signal(*_):
        stop["flag"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        forks.start()
        cluster.start()
        config_path = cluster.client_config_path()
        click.echo(f"ZooKeeper  {cluster.zk.address} (root {cluster.root})")
        for line in service_lines(cluster):
            click.echo(line)
        click.echo(f"nimbus     {cluster.nimbus_url()}  (API /api/v1, UI /)")
        for i in range(supervisors):
            click.echo(f"supervisor {cluster.supervisor_id(i)} slots {list(cluster.supervisor_config(i).supervisor_slots_ports)}")
        click.echo(f"logs       {cluster.base / 'logs'}")
        click.echo(f"client config: export GALE_CONFIG={config_path}")
        if demo_state:
            from gale.nimbus.demo_state import run_state_demo

            return run_state_demo(cluster, config_path, demo_duration, stop, kill_after=demo_kill_after)
        if demo:
            from gale.nimbus.demo import run_demo

            return run_demo(cluster, config_path, demo_duration, stop)
        click.echo("Ctrl-C stops everything.")
        while not stop["flag"]:
            time.sleep(0.5)
        return 0
    finally:
        click.echo("stopping the dev cluster ...")
        cluster.stop()
        forks.close()
        fork_log.close()
