"""A standalone ZooKeeper server from the Debian package, for development and tests.

Starts ``org.apache.zookeeper.server.quorum.QuorumPeerMain`` from ``/usr/share/java`` on a free
loopback port with its own data directory, waits until it answers ``ruok``, and stops it. The
server's output goes to ``<data dir>/zookeeper.log`` (see :meth:`ZooKeeperServer.log_tail`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

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


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


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


class ZooKeeperServer:
    """One standalone ZooKeeper process. Use as a context manager or call start()/stop()."""

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        data_dir: str | os.PathLike[str] | None = None,
        tick_time_ms: int = 2000,
        max_session_timeout_ms: int = 60000,
        java: str | None = None,
    ):
        self.host = host
        self.port = port or free_port(host)
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
                    "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,dump",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    "maxClientCnxns=0",
                    "",
                ]
            )
        )
        return cfg

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        if self.proc is not None and self.proc.poll() is None:
            return self
        cfg = self._write_config()
        self._log_fh = open(self.log_path, "ab")
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ZooKeeperError(
                    f"ZooKeeper exited with code {self.proc.returncode} during start; log:\n{self.log_tail()}"
                )
            try:
                if four_letter(self.host, self.port, "ruok", timeout=0.5) == "imok":
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise ZooKeeperError(f"ZooKeeper did not answer on {self.address} within {timeout}s; log:\n{self.log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def kill(self) -> None:
        """Stop abruptly (SIGKILL), keeping the data directory for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.stop()

    def restart(self, down_secs: float = 0.0) -> None:
        """Stop and start again on the same port and data directory (sessions survive if short)."""
        self.stop()
        if down_secs:
            time.sleep(down_secs)
        self.start()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no ZooKeeper log)"

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
