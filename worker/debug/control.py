"""A worker's control socket: the supervisor asks its workers things no other channel carries.

The worker listens on ``control.sock`` in its own directory (``<storm.local.dir>/workers/<id>``, mode
0700 like the rest of it): only the supervisor's user reaches it. One request per connection, one
JSON line each way: ``{"op": "threaddump"}`` → ``{"ok": true, "text": ...}`` (or ``{"ok": false,
"error": ...}``). Unix socket paths are limited to about 100 bytes, so both ends name the socket
through a descriptor of the directory (``/proc/self/fd/<n>/control.sock``), whatever its length.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gale.errors import GaleError
from gale.log import get_logger

log = get_logger("worker.control")

SOCKET_NAME = "control.sock"
MAX_REQUEST = 64 * 1024
MAX_REPLY = 16 * 1024 * 1024


class ControlError(GaleError):
    """The worker could not be asked (not running, no control socket, no answer in time)."""


def _via_fd(directory: Path) -> tuple[int, str]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    return fd, f"/proc/self/fd/{fd}/{SOCKET_NAME}"


def _read_line(conn: socket.socket, limit: int) -> bytes:
    buf = bytearray()
    while b"\n" not in buf:
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf.extend(chunk)
        if len(buf) > limit:
            raise ValueError(f"message longer than {limit} bytes")
    return bytes(buf).split(b"\n", 1)[0]


class ControlServer:
    """Answers requests with ``handlers[op](request) -> dict`` on a daemon thread."""

    def __init__(self, directory: str | Path, handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]):
        self.directory = Path(directory)
        self.handlers = handlers
        self.sock: socket.socket | None = None
        self._stopped = False

    def start(self) -> None:
        path = self.directory / SOCKET_NAME
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        fd, name = _via_fd(self.directory)
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(name)
            os.chmod(path, 0o600)
            sock.listen(8)
        finally:
            os.close(fd)
        self.sock = sock
        threading.Thread(target=self._serve, name="debug-control", daemon=True).start()

    def stop(self) -> None:
        self._stopped = True
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass

    def _serve(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._answer, args=(conn,), name="debug-control-request", daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5.0)
            try:
                request = json.loads(_read_line(conn, MAX_REQUEST) or b"null")
                op = request.get("op") if isinstance(request, dict) else None
                handler = self.handlers.get(op) if isinstance(op, str) else None
                if handler is None:
                    reply = {"ok": False, "error": f"unknown request {op!r}; this worker answers {sorted(self.handlers)}"}
                else:
                    reply = {"ok": True, **handler(request)}
            except Exception as exc:  # noqa: BLE001 - a bad request or a failing handler: say so, keep serving
                log.warning("control-request-failed", error=f"{type(exc).__name__}: {exc}")
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            try:
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                pass


def ask(directory: str | Path, request: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send ``request`` to the worker whose directory is ``directory``; its reply (``ok`` true)."""
    directory = Path(directory)
    if not (directory / SOCKET_NAME).exists():
        raise ControlError(f"the worker has no control socket in {directory} (not running, or still starting)")
    fd, name = _via_fd(directory)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(name)
                sock.sendall(json.dumps(request).encode() + b"\n")
                line = _read_line(sock, MAX_REPLY)
            except (OSError, ValueError) as exc:
                raise ControlError(f"the worker did not answer on its control socket: {exc}") from None
    finally:
        os.close(fd)
    try:
        reply = json.loads(line)
    except ValueError:
        raise ControlError("the worker's answer was not JSON (it may have exited while answering)") from None
    if not isinstance(reply, dict) or not reply.get("ok"):
        raise ControlError(f"the worker refused: {reply.get('error') if isinstance(reply, dict) else reply!r}")
    return reply
