"""Running an ASGI app (FastAPI) with uvicorn in a background thread of a daemon."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from gale.log import get_logger

log = get_logger("http")


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the daemon owns signals, not uvicorn
        pass


class HttpServer:
    def __init__(self, app: Any, host: str, port: int, name: str = "http"):
        self.app = app
        self.host = host
        self.port = port
        self.name = name
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    def start(self, timeout: float = 15.0) -> None:
        # bind first so a port conflict is an immediate, clear error (and port 0 works). The protocol
        # is named: asyncio turns Nagle's algorithm off only on connections of a socket whose proto is
        # IPPROTO_TCP, and an accepted connection takes its listener's. With it on, a response's body,
        # written after its headers, waited for the client's delayed ACK of them: 40 ms a request.
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM,
                             socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise OSError(f"{self.name}: cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from exc
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self._sock = sock
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=5, log_config=None)
        self._server = _Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"{self.name}-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"{self.name}: HTTP server thread exited during start")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: HTTP server did not start within {timeout}s")
            time.sleep(0.01)
        log.info("http-listening", server=self.name, host=self.host, port=self.port)

    def stop(self, timeout: float = 5.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
