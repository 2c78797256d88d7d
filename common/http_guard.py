"""What every Gale HTTP server checks before a request reaches its routes, and where it listens.

Shared by nimbus's API (:mod:`gale.nimbus.api`, whose middleware adds request ids and body limits
for code uploads) and the supervisors' log servers (:mod:`gale.supervisor.logserver`):

* :func:`is_loopback` — whether an address only ever means this machine;
* :func:`host_problem` — a server without an API token listens on loopback only and refuses a
  ``Host`` header that is not one of its own names, so a web site cannot reach it by rebinding its
  DNS name to 127.0.0.1;
* :class:`Guard` — an ASGI middleware for the small servers: the Host check, JSON only on actions
  (a web page on another site can only send form posts without asking first, a CORS preflight
  never granted), and a body size limit.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Callable
from typing import Any

SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))


def is_loopback(host: str) -> bool:
    """True when ``host`` (an address or a name) only ever means this machine's loopback interface."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def host_problem(host_header: str, allowed: set[str] | None, what: str = "server") -> str | None:
    """Why a Host header is refused by a loopback-only server (DNS rebinding), or None."""
    if allowed is None or not host_header:
        return None
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host in allowed:
        return None
    return (f"Host {host_header!r} is not a name of this {what}: without an API token it answers only on the "
            f"loopback interface and under its own names ({', '.join(sorted(allowed))})")


class Guard:
    """ASGI middleware: :func:`host_problem` (403), ``application/json`` on every action (415) and
    bodies of at most ``max_body`` bytes (413), answered as JSON ``{"error": ...}``."""

    def __init__(self, app: Any, allowed_hosts: set[str] | None = None, max_body: int = 64 * 1024):
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.max_body = max_body

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        method = scope.get("method", "")
        refused = host_problem(headers.get("host", ""), self.allowed_hosts)
        status = 403
        if refused is None and method not in SAFE_METHODS:
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                status = 415
                refused = (f"{method} {scope.get('path', '')} needs Content-Type application/json (got "
                           f"{media or 'none'}): actions refuse other content types so that no web page can send them")
        declared = headers.get("content-length", "")
        if refused is None and declared.isdigit() and int(declared) > self.max_body:
            status = 413
            refused = f"request body of {declared} bytes exceeds the limit of {self.max_body} bytes"
        if refused is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": refused}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
