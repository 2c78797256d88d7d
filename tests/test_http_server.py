"""The daemons' HTTP server (uvicorn in a thread): what every API, UI and log request goes through."""

from __future__ import annotations

import socket

import httpx
import pytest
from fastapi import FastAPI

from gale.http_server import HttpServer

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


@pytest.fixture
def server():
    app = FastAPI()

    @app.get("/x")
    def x() -> dict:
        return {"ok": True}

    s = HttpServer(app, "127.0.0.1", 0, name="test")
    s.start()
    yield s
    s.stop()


def served_connections(server: HttpServer) -> list[socket.socket]:
    return [p.transport.get_extra_info("socket") for p in server._server.server_state.connections]


def test_connections_are_served_with_nagles_algorithm_off(server):
    """A response is written as headers, then body: with Nagle's algorithm on, the body waited for the
    client's delayed ACK of the headers — 40 ms on every request on Linux."""
    with httpx.Client(trust_env=False) as client:  # keep-alive: the connection stays open to be inspected
        for _ in range(3):
            assert client.get(f"http://127.0.0.1:{server.port}/x").json() == {"ok": True}
        conns = served_connections(server)
        assert len(conns) == 1
        assert conns[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_a_taken_port_is_a_clear_error(server):
    other = HttpServer(FastAPI(), "127.0.0.1", server.port, name="second")
    with pytest.raises(OSError, match=r"second: cannot listen on 127\.0\.0\.1:\d+"):
        other.start()
