"""Shared plumbing of the nimbus and supervisor processes: signals, readiness, logging setup."""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from gale import log as glog
from gale.config_keys import Config


def log_dir(config: Config) -> Path:
    """``storm.log.dir``, default ``<storm.local.dir>/logs``."""
    return Path(config.storm_log_dir or Path(config.storm_local_dir) / "logs")


#: where a supervisor keeps its workers' logs and debugging artifacts, under its log directory
WORKER_ARTIFACTS = "workers-artifacts"
#: a worker's own log file in its artifacts directory
WORKER_LOG = "worker.log"


def worker_artifacts(topology_id: str, port: int) -> str:
    """A worker's artifacts directory relative to the log directory (Storm's layout), with ``/``."""
    return f"{WORKER_ARTIFACTS}/{topology_id}/{int(port)}"


def configure_daemon_logging(config: Config, daemon: str, to_file: bool = False, keep_file: bool = False,
                             **context: Any) -> None:
    """Log to stderr (systemd's journal), or to ``<storm.log.dir>/<daemon>.log`` instead
    (``to_file``) or as well (``keep_file``: a supervisor's, which its log server shows; rotated as
    a worker's log, ``worker.log.max.bytes`` and ``worker.log.backups``)."""
    file = log_dir(config) / f"{daemon}.log" if to_file else None
    also = log_dir(config) / f"{daemon}.log" if keep_file and not to_file else None
    glog.configure(fmt=config.storm_log_format, file=file, also_file=also, max_bytes=config.worker_log_max_bytes,
                   backups=config.worker_log_backups, daemon=daemon, **context)


class StopSignals:
    """SIGTERM/SIGINT handlers installed at once (before a daemon starts, so a stop that arrives
    during start-up is not lost and does not kill the process mid-start); :meth:`wait` blocks
    until one arrives and restores the previous handlers."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.received: list[int] = []
        self._old = {s: signal.signal(s, self._handler) for s in (signal.SIGTERM, signal.SIGINT)}

    def _handler(self, signum: int, _frame: Any) -> None:
        self.received.append(signum)
        self.event.set()

    def wait(self) -> int:
        try:
            while not self.event.wait(0.5):
                pass
        finally:
            for s, h in self._old.items():
                signal.signal(s, h)
        return self.received[0] if self.received else 0


def sd_notify(message: str) -> bool:
    """Tell systemd (Type=notify) about readiness/stopping; a no-op outside systemd."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(addr)
            sock.sendall(message.encode())
        return True
    except OSError:
        return False
