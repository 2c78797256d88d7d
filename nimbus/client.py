"""HTTP client for nimbus's API, used by the CLI and by supervisors (code and secret download).

Nimbus is found from ``nimbus.seeds`` (host or host:port; port defaults to ``nimbus.http.port``);
a standby answers 409 with the leader's address and the client retries there once. Every call
sends an ``X-Request-Id``; nimbus puts it on every log line of that request, and a server-side
failure names it so the matching lines can be found. Every POST carries a JSON body (``{}`` when
there is nothing to say) or the gzip bundle: nimbus refuses actions with any other content type.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import httpx

from gale.bundle import BundleError
from gale.config import api_token, as_config, stored_secret
from gale.config_keys import Config
from gale.errors import GaleError


class NimbusUnavailable(GaleError):
    pass


class ApiCallError(GaleError):
    def __init__(self, status: int, message: str, body: Any = None, request_id: str | None = None):
        self.status = status
        self.body = body
        self.request_id = request_id
        super().__init__(message)


def seed_addresses(config: Config) -> list[str]:
    """``host:port`` of every ``nimbus.seeds`` entry (the port defaults to ``nimbus.http.port``)."""
    port = config.nimbus_http_port
    return [seed if ":" in seed else f"{seed}:{port}" for seed in config.nimbus_seeds]


class NimbusClient:
    def __init__(self, conf: Config | Mapping[str, Any], addresses: list[str] | None = None, timeout: float = 30.0):
        """``conf``: the client's configuration (resolved here when it is a mapping): where
        nimbus is, and the API token."""
        self._config = as_config(conf, "client configuration")
        self.addresses = addresses or seed_addresses(self._config)
        self._auth: dict[str, str] | None = None  # read on first use: a bad token file fails the call, cleanly
        self.timeout = timeout
        self._http = httpx.Client(timeout=timeout, trust_env=False)

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header from ``nimbus.api.token`` / ``nimbus.api.token.file`` (if any)."""
        if self._auth is None:
            token = api_token(self._config)
            self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        return self._auth

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> NimbusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        errors = []
        tried: set[str] = set()
        queue = list(self.addresses)
        request_id = uuid.uuid4().hex[:16]
        kwargs["headers"] = {**self.headers, **kwargs.get("headers", {}), "X-Request-Id": request_id}
        while queue:
            address = queue.pop(0)
            if address in tried:
                continue
            tried.add(address)
            try:
                resp = self._http.request(method, f"http://{address}{path}", **kwargs)
            except httpx.TransportError as exc:
                errors.append(f"{address}: {type(exc).__name__}")
                continue
            if resp.status_code == 409:
                body = _json(resp)
                leader = body.get("leader") if isinstance(body, dict) else None
                if leader and leader not in tried:
                    queue.insert(0, leader)
                    continue
            if resp.status_code >= 400:
                body = _json(resp)
                message = body.get("error") if isinstance(body, dict) else None
                message = message or f"HTTP {resp.status_code} from nimbus {address}"
                if resp.status_code >= 500:
                    message += f" (nimbus {address}; its log lines for this call carry request_id={request_id})"
                raise ApiCallError(resp.status_code, message, body, request_id)
            return resp
        raise NimbusUnavailable(
            "nimbus is unreachable (tried " + ", ".join(errors or self.addresses)
            + "); is it running? check nimbus.seeds and nimbus.http.port in your config"
        )

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=json if json is not None else {}, **kwargs).json()

    # --------------------------------------------------------------- API

    def submit(self, name: str, bundle: bytes, inactive: bool = False) -> str:
        # submit may wait for code replication to standby nimbuses (topology.max.replication.wait.time.sec)
        resp = self.request("POST", "/api/v1/topologies", params={"name": name, "inactive": str(inactive).lower()},
                            content=bundle, headers={"Content-Type": "application/gzip"}, timeout=max(self.timeout, 300.0))
        return resp.json()["id"]

    def topologies(self) -> list[dict[str, Any]]:
        return self.get("/api/v1/topologies")

    def topology(self, name: str, window: str = ":all-time") -> dict[str, Any]:
        return self.get(f"/api/v1/topologies/{name}", params={"window": window})

    def cluster(self) -> dict[str, Any]:
        return self.get("/api/v1/cluster")

    def workers(self, name: str, window: str = ":all-time") -> list[dict[str, Any]]:
        return self.get(f"/api/v1/topologies/{name}/workers", params={"window": window})

    def kill(self, name: str, wait_secs: int | None = None) -> str:
        return self.post(f"/api/v1/topologies/{name}/kill", json={"wait_secs": wait_secs})["id"]

    def activate(self, name: str) -> str:
        return self.post(f"/api/v1/topologies/{name}/activate")["id"]

    def deactivate(self, name: str) -> str:
        return self.post(f"/api/v1/topologies/{name}/deactivate")["id"]

    def rebalance(self, name: str, wait_secs: int | None = None, num_workers: int | None = None,
                  executors: Mapping[str, int] | None = None, tasks: Mapping[str, int] | None = None) -> str:
        body = {"wait_secs": wait_secs, "num_workers": num_workers, "executors": dict(executors or {})}
        if tasks:
            body["tasks"] = dict(tasks)
        return self.post(f"/api/v1/topologies/{name}/rebalance", json=body)["id"]

    def code(self, topology_id: str) -> bytes:
        """The topology's code bundle (needs the API token when one is set: it holds the user's conf)."""
        return self.request("GET", f"/api/v1/topologies/{topology_id}/code").content

    def stored_conf(self, topology_id: str) -> dict[str, Any]:
        """The topology's stored configuration with its secret (needs the API token when one is set)."""
        return _stored_conf(self.request("GET", f"/api/v1/topologies/{topology_id}/stormconf"), topology_id)


def _stored_conf(resp: httpx.Response, topology_id: str) -> dict[str, Any]:
    body = _json(resp)
    if not isinstance(body, dict) or stored_secret(body) is None:
        raise BundleError(f"nimbus sent no usable stored configuration for {topology_id} (no topology.secret)")
    return body


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return None
