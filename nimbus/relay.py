"""Nimbus's calls to the supervisors' log servers (:mod:`gale.supervisor.logserver`).

The UI and the CLI talk to nimbus only: nimbus finds a supervisor's log server in its ZooKeeper
record (``logviewer_host``/``logviewer_port``), calls it with the cluster's API token, and hands
the answer back — the supervisor's own error messages and statuses included, prefixed with which
supervisor said them. A supervisor that is gone, serves no logs or does not answer is a clear
404/502, never a hang: every call has a timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

from gale.errors import GaleError, NotFoundError

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.daemon import Nimbus

READ_TIMEOUT = 15.0


class RelayError(GaleError):
    def __init__(self, status: int, message: str, body: Any = None):
        super().__init__(message)
        self.status = status
        self.body = body if isinstance(body, dict) else {}


def log_server(nimbus: Nimbus, supervisor_id: str) -> str:
    """``http://host:port`` of a live supervisor's log server."""
    try:
        info = nimbus.state.supervisor_info(supervisor_id)
    except ValueError as exc:  # not a valid supervisor id (a '/' ...)
        raise RelayError(400, f"invalid supervisor id {supervisor_id!r}: {exc}") from None
    if info is None:
        live = ", ".join(sorted(nimbus.state.supervisor_ids())) or "none"
        raise NotFoundError(f"no live supervisor {supervisor_id!r}; live: {live}")
    if not info.logviewer_port:
        raise NotFoundError(f"supervisor {supervisor_id} serves no logs (an older supervisor, or its log server "
                            "did not start: see its own log)")
    host = info.logviewer_host or info.hostname
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{info.logviewer_port}"


def call(nimbus: Nimbus, supervisor_id: str, method: str, path: str, *, params: dict[str, Any] | None = None,
         json: Any = None, timeout: float = READ_TIMEOUT) -> httpx.Response:
    """``method path`` on the supervisor's log server; :class:`RelayError` for its errors."""
    base = log_server(nimbus, supervisor_id)
    headers = nimbus.internal_headers()
    try:
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            resp = client.request(method, base + path, params={k: v for k, v in (params or {}).items() if v is not None},
                                  json=json if method != "GET" else None, headers=headers)
    except httpx.TimeoutException:
        raise RelayError(504, f"supervisor {supervisor_id}'s log server ({base}) did not answer within {timeout:.0f} s") from None
    except httpx.TransportError as exc:
        raise RelayError(502, f"supervisor {supervisor_id}'s log server ({base}) is unreachable: {type(exc).__name__}") from None
    if resp.status_code >= 400:
        try:
            body = resp.json()
        except ValueError:
            body = {}
        message = body.get("error") if isinstance(body, dict) else None
        raise RelayError(resp.status_code, f"supervisor {supervisor_id}: {message or f'HTTP {resp.status_code}'}", body)
    return resp
