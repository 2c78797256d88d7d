"""What a server Gale starts for development and tests has in common (:mod:`gale.zkserver`,
:mod:`gale.redisserver`): a process in its own session (so a stop reaches everything it started),
a data directory that is removed at cleanup when Gale made it, a reserved loopback port released at
cleanup, a start that waits until *this* server answers, and a log whose tail goes into every error.

A subclass sets :attr:`name` (for messages), :attr:`error` (the exception it raises), implements
:meth:`_answers` (this server, not another one on the port, is serving) and :attr:`log_path`, and
launches its process in ``start``; :meth:`_wait_ready` then waits for it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from gale.ports import PortReservation

POLL_SECS = 0.02  # how often a starting server is asked whether it answers


class LocalServer:
    name = "server"
    error: type[Exception] = RuntimeError

    proc: subprocess.Popen[bytes] | None
    data_dir: Path
    host: str
    port: int
    _reservation: PortReservation | None
    _own_dir: bool

    @property
    def log_path(self) -> Path:
        raise NotImplementedError

    def _answers(self) -> bool:
        raise NotImplementedError

    def _wait_ready(self, timeout: float, exited: Callable[[int], Exception]) -> None:
        """Wait until the launched process answers. If it exits first, raise ``exited(code)``; if it
        neither answers nor exits within ``timeout`` seconds, stop it and raise :attr:`error`."""
        proc = self.proc
        assert proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise exited(proc.returncode)
            if self._answers():
                return
            time.sleep(POLL_SECS)  # polling a process we do not control: no event to wait on
        self.stop()
        raise self.error(f"{self.name} did not answer on {self.host}:{self.port} within {timeout}s; "
                         f"log:\n{self.log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the server's process group; SIGKILL if it has not exited within ``timeout``."""
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
        self._stopped()

    def _stopped(self) -> None:
        """Called after every stop (a subclass closes what it opened for the process)."""

    def kill(self) -> None:
        """SIGKILL, keeping the data directory for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.stop()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return f"(no {self.name} log)"

    def cleanup(self) -> None:
        """Stop, release the reserved port, and remove the data directory if Gale made it."""
        self.stop()
        if self._reservation is not None:
            self._reservation.release()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def start(self, *args: Any, **kwargs: Any) -> LocalServer:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def listening_on(pid: int, port: int) -> bool:
    """Process ``pid`` (or a child of it) has a TCP socket listening on ``port``."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return False
    for p in procs:
        try:
            if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   for c in p.net_connections(kind="tcp")):
                return True
        except psutil.Error:
            continue
    return False
