"""A standalone Redis server from the Debian package (``redis-server``), for development and tests.

Like :mod:`gale.zkserver`: a loopback port reserved with :func:`gale.ports.reserve_port`, its own
directory (``redis.conf``, the append-only file, ``redis.log``), and a start that waits until *this*
server answers (``PING``, then ``CONFIG GET dir`` naming its own directory). Durability: the
append-only file with ``appendfsync always``, so a committed checkpoint survives ``kill -9`` of the
server (the tests kill it mid-commit).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from gale.localserver import LocalServer
from gale.ports import PortReservation, reserve_port


class RedisServerError(RuntimeError):
    pass


def _command(host: str, port: int, *args: str, timeout: float = 1.0) -> bytes:
    """One RESP command on a fresh connection; the raw reply."""
    payload = f"*{len(args)}\r\n".encode() + b"".join(f"${len(a.encode())}\r\n{a}\r\n".encode() for a in args)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(payload)
        data = b""
        while not data.endswith(b"\r\n") or (data.startswith(b"*") and data.count(b"\r\n") < 5):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


class RedisServer(LocalServer):
    """One redis-server process. Use as a context manager or call start()/stop()."""

    name = "redis-server"
    error = RedisServerError

    def __init__(self, *, port: int | None = None, host: str = "127.0.0.1", data_dir: str | os.PathLike[str] | None = None,
                 executable: str | None = None):
        self.host = host
        self._reservation: PortReservation | None = None if port else reserve_port()
        self.port = port or self._reservation.port  # type: ignore[union-attr]
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="gale-redis-"))
        self.executable = executable or shutil.which("redis-server") or "/usr/bin/redis-server"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "redis.log"

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "redis.conf"
        cfg.write_text("\n".join([
            f"bind {self.host}",
            f"port {self.port}",
            f"dir {self.data_dir}",
            f"logfile {self.log_path}",
            "daemonize no",
            "protected-mode yes",
            "appendonly yes",
            "appendfsync always",
            'save ""',
            "",
        ]))
        return cfg

    def start(self, timeout: float = 30.0) -> RedisServer:
        if not Path(self.executable).exists():
            raise RedisServerError(f"{self.executable} not found: install the Debian package (apt-get install redis-server; "
                                   "deploy/install-system-deps.sh does)")
        if self.running():
            return self
        cfg = self._write_config()
        self.proc = subprocess.Popen([self.executable, str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

        def exited(code: int) -> Exception:
            self.proc = None
            return RedisServerError(f"redis-server exited with code {code} during start; log:\n{self.log_tail()}")

        self._wait_ready(timeout, exited)
        return self

    def _answers(self) -> bool:
        try:
            if not _command(self.host, self.port, "PING", timeout=0.5).startswith(b"+PONG"):
                return False
            return str(self.data_dir).encode() in _command(self.host, self.port, "CONFIG", "GET", "dir", timeout=0.5)
        except OSError:
            return False
