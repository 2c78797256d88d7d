"""ZooKeeper from the Debian package, for development and tests: one server or an ensemble.

:class:`ZooKeeperServer` starts ``org.apache.zookeeper.server.quorum.QuorumPeerMain`` from ``/usr/share/java`` on a loopback
port reserved with :func:`gale.ports.reserve_port` (outside the kernel's ephemeral range, locked
against other Gale clusters on the machine) with its own data directory, and waits until *this*
server answers (``ruok``, then ``conf`` naming its own data directory: another server that
happens to listen on the port does not count). If the JVM exits with "address already in use"
(a program outside Gale holds the port), it retries on a newly reserved port — unless the
caller chose the port. The server's output goes to ``<data dir>/zookeeper.log``
(:meth:`ZooKeeperServer.log_tail`).

:class:`ZooKeeperEnsemble` runs N such servers as one quorum on loopback: each gets a
``server.<id>=127.0.0.1:<peer port>:<election port>`` line per member and its ``myid`` file, and
the ensemble is ready when one member leads and the others follow. Faults: :meth:`kill` (``kill
-9``) and :meth:`start_server` one member, :meth:`restart` all of them. Daemons connect with
:meth:`ZooKeeperEnsemble.client_servers` as ``storm.zookeeper.servers`` (``host:port`` entries).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gale.localserver import LocalServer
from gale.ports import PortReservation, reserve_port, reserved_port

JAVA_DIR = Path(os.environ.get("GALE_ZOOKEEPER_JARS", "/usr/share/java"))
_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "netty-handler.jar",
    "netty-common.jar",
    "netty-buffer.jar",
    "netty-transport.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "commons-cli.jar",
    "commons-io.jar",
    "metrics-core.jar",
    "snappy-java.jar",
)


class ZooKeeperError(RuntimeError):
    pass


class PortInUse(ZooKeeperError):
    """The server's port was taken by another program (its JVM exited with a BindException)."""


@dataclass(frozen=True)
class Peer:
    """One member of an ensemble as the others see it (a ``server.<id>=host:peer:election`` line)."""

    server_id: int
    host: str
    peer_port: int
    election_port: int

    def line(self) -> str:
        return f"server.{self.server_id}={self.host}:{self.peer_port}:{self.election_port}"


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody else is handed until this process exits (see :mod:`gale.ports`): for tests
    that start a server of their own on it. ``host`` is accepted for compatibility; the port is
    checked free on every address."""
    return reserved_port()


def four_letter(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def classpath() -> str:
    missing = [j for j in ("zookeeper.jar", "zookeeper-jute.jar") if not (JAVA_DIR / j).exists()]
    if missing:
        raise ZooKeeperError(
            f"ZooKeeper jars not found in {JAVA_DIR} ({', '.join(missing)}); "
            "install the Debian package: apt-get install zookeeper (make deps does this)"
        )
    jars = [str(JAVA_DIR / j) for j in _JARS if (JAVA_DIR / j).exists()]
    return ":".join(jars)


class ZooKeeperServer(LocalServer):
    """One standalone ZooKeeper process. Use as a context manager or call start()/stop()."""

    name = "ZooKeeper"
    error = ZooKeeperError

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        data_dir: str | os.PathLike[str] | None = None,
        tick_time_ms: int = 2000,
        max_session_timeout_ms: int = 60000,
        java: str | None = None,
        server_id: int | None = None,
        peers: Sequence[Peer] = (),
    ):
        """``server_id`` and ``peers`` (every member, this one included) make this server a member
        of an ensemble (:class:`ZooKeeperEnsemble` builds them); without them it runs standalone."""
        self.server_id = server_id
        self.peers = tuple(peers)
        self.host = host
        #: the port is ours to change when the caller did not choose it
        self._reservation: PortReservation | None = None if port else reserve_port()
        self.port = port or self._reservation.port
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="gale-zk-"))
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.java = java or shutil.which("java") or "java"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_fh = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={self.data_dir / 'data'}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,conf,srvr,stat,mntr,cons,dump",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    "maxClientCnxns=0",
                    *self._quorum_lines(),
                    "",
                ]
            )
        )
        if self.peers:
            (self.data_dir / "data" / "myid").write_text(f"{self.server_id}\n")
        return cfg

    def _quorum_lines(self) -> list[str]:
        if not self.peers:
            return []
        # initLimit/syncLimit in ticks: followers connect and sync within 10 ticks, stay within 5
        return ["initLimit=10", "syncLimit=5", "standaloneEnabled=false",
                *(peer.line() for peer in self.peers)]

    def mode(self) -> str | None:
        """``leader``, ``follower``, ``standalone``, or None (not running, or not serving: no quorum)."""
        try:
            out = four_letter(self.host, self.port, "srvr", timeout=1.0)
        except OSError:
            return None
        for line in out.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def mntr(self) -> dict[str, str]:
        """ZooKeeper's ``mntr`` counters (empty when the server does not answer)."""
        try:
            out = four_letter(self.host, self.port, "mntr", timeout=2.0)
        except OSError:
            return {}
        pairs = (line.split("\t", 1) for line in out.splitlines() if "\t" in line)
        return {k: v.strip() for k, v in pairs}

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.running() else None

    def start(self, timeout: float = 30.0, attempts: int = 5) -> ZooKeeperServer:
        """Start and wait until this server answers; on "address already in use" move to a newly
        reserved port (when the port was not the caller's choice) and try again."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(timeout)
            except PortInUse:
                if self._reservation is None or attempt == attempts:
                    raise
                self._reservation.release()
                self._reservation = reserve_port()
                self.port = self._reservation.port
        raise AssertionError("unreachable")

    def _start_once(self, timeout: float) -> ZooKeeperServer:
        cfg = self._write_config()
        self._log_fh = open(self.log_path, "ab")
        log_start = self._log_fh.tell()
        self.proc = subprocess.Popen(
            [
                self.java,
                "-Xmx256m",
                "-XX:+UseSerialGC",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp",
                classpath(),
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(cfg),
            ],
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

        def exited(code: int) -> Exception:
            attempt_log = self._log_since(log_start)
            self.stop()
            if "BindException" in attempt_log or "Address already in use" in attempt_log:
                return PortInUse(f"ZooKeeper could not bind {self.address}: address already in use")
            return ZooKeeperError(f"ZooKeeper exited with code {code} during start; log:\n{self.log_tail()}")

        self._wait_ready(timeout, exited)
        return self

    def _answers(self) -> bool:
        """This server (not another one on the same port) is up: ``conf`` names our data directory."""
        try:
            if four_letter(self.host, self.port, "ruok", timeout=0.5) != "imok":
                return False
            return f"dataDir={self.data_dir / 'data'}" in four_letter(self.host, self.port, "conf", timeout=0.5)
        except OSError:
            return False

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def _stopped(self) -> None:
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def restart(self, down_secs: float = 0.0) -> None:
        """Stop and start again on the same port and data directory (sessions survive if short).
        The port stays reserved meanwhile, so it is still free unless a program outside Gale took it
        (then this fails with :class:`PortInUse`: clients know only this port)."""
        self.stop()
        if down_secs:
            time.sleep(down_secs)  # the outage's length is the point here (fault injection), not a wait
        self.start(attempts=1)

    def client_servers(self) -> list[str]:
        """``storm.zookeeper.servers`` for daemons of this server (``host:port``)."""
        return [self.address]


class ZooKeeperEnsemble:
    """N ZooKeeper servers forming one quorum on loopback, each with its own ports and data dir.

    ::

        with ZooKeeperEnsemble(3) as zk:           # ready: one leader, the others following
            conf["storm.zookeeper.servers"] = zk.client_servers()
            zk.kill(zk.leader())                   # kill -9 of the leader; a follower takes over
            zk.wait_for_quorum()
            zk.start_server(i)                     # back, with its data
            zk.restart()                           # the whole ensemble down and up again

    Members start concurrently (a member alone cannot serve: a majority must be up to elect a
    leader). Data and logs survive kills and restarts (``<base>/zk<id>``).
    """

    def __init__(self, size: int = 3, *, base_dir: str | os.PathLike[str] | None = None, host: str = "127.0.0.1",
                 tick_time_ms: int = 2000, max_session_timeout_ms: int = 60000):
        if size < 1:
            raise ValueError(f"an ensemble needs at least one server, got {size}")
        self._own_dir = base_dir is None
        self.base = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="gale-zk-ensemble-"))
        self.host = host
        peers = [Peer(i, host, free_port(host), free_port(host)) for i in range(1, size + 1)]
        self.servers = [
            ZooKeeperServer(host=host, data_dir=self.base / f"zk{p.server_id}", tick_time_ms=tick_time_ms,
                            max_session_timeout_ms=max_session_timeout_ms, server_id=p.server_id, peers=peers)
            for p in peers
        ]

    @property
    def size(self) -> int:
        return len(self.servers)

    @property
    def port(self) -> int:
        """The first member's client port (single-server callers)."""
        return self.servers[0].port

    @property
    def address(self) -> str:
        """The connect string of every member: ``host:port,host:port,...``."""
        return ",".join(s.address for s in self.servers)

    def client_servers(self) -> list[str]:
        """``storm.zookeeper.servers`` for daemons of this ensemble (``host:port`` each)."""
        return [s.address for s in self.servers]

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 60.0) -> ZooKeeperEnsemble:
        """Start every member that is not running, concurrently, and wait for the quorum."""
        self._start_members([i for i, s in enumerate(self.servers) if not s.running()], timeout)
        self.wait_for_quorum(timeout)
        return self

    def _start_members(self, indexes: list[int], timeout: float) -> None:
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                self.servers[i].start(timeout)
            except BaseException as exc:  # noqa: BLE001 - reported by the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,), name=f"zk{i + 1}-start", daemon=True) for i in indexes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]

    def wait_for_quorum(self, timeout: float = 60.0) -> int:
        """Wait until one running member leads and every other running member follows; returns
        the leader's index. Raises :class:`ZooKeeperError` if that takes longer than ``timeout``."""
        deadline = time.monotonic() + timeout
        modes: list[str | None] = []
        while time.monotonic() < deadline:
            modes = [s.mode() if s.running() else "down" for s in self.servers]
            up = [m for m in modes if m != "down"]
            if up and up.count("leader") == 1 and all(m in ("leader", "follower") for m in up):
                return modes.index("leader")
            time.sleep(0.05)
        raise ZooKeeperError(f"the ensemble formed no quorum within {timeout}s (modes: {modes}); "
                             f"log of zk1:\n{self.servers[0].log_tail(30)}")

    def leader(self) -> int | None:
        """The leading member's index (None while no member leads)."""
        for i, s in enumerate(self.servers):
            if s.running() and s.mode() == "leader":
                return i
        return None

    def followers(self) -> list[int]:
        return [i for i, s in enumerate(self.servers) if s.running() and s.mode() == "follower"]

    def kill(self, i: int) -> None:
        """``kill -9`` of member ``i`` (its data stays for :meth:`start_server`)."""
        self.servers[i].kill()

    def start_server(self, i: int, timeout: float = 60.0) -> None:
        """Start member ``i`` again (same ports and data); it rejoins the quorum."""
        self.servers[i].start(timeout)

    def restart(self, down_secs: float = 0.0, timeout: float = 60.0) -> None:
        """Stop every member, then start them all again and wait for the quorum."""
        self.stop()
        if down_secs:
            time.sleep(down_secs)
        self.start(timeout)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def running(self) -> bool:
        """Some member is running."""
        return any(s.running() for s in self.servers)

    def mntr(self) -> list[dict[str, str]]:
        """Each member's ``mntr`` counters (empty for a member that does not answer)."""
        return [s.mntr() for s in self.servers]

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(f"--- zk{s.server_id}\n{s.log_tail(lines)}" for s in self.servers)

    def cleanup(self) -> None:
        self.stop()
        for s in self.servers:
            s.cleanup()
        if self._own_dir:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> ZooKeeperEnsemble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
