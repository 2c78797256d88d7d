"""Nimbus's HTTP API (FastAPI): what the CLI, supervisors and other nimbuses talk to.

Gale's own JSON API lives under ``/api/v1`` (topologies by name or id); errors are JSON objects
``{"error": "<what is wrong and what to do>", ...}`` with a 4xx status. A request that needs the
leader, sent to a standby, gets 409 with the leader's address in ``leader``.

Every request passes :class:`RequestContext`: it gets a correlation id (the caller's
``X-Request-Id`` when it is a sane token, else a new one) bound to every log line written while it
is handled and echoed in the response's ``X-Request-Id``; a body over :data:`MAX_JSON_BODY_BYTES`
(or ``nimbus.max.request.bytes`` for code uploads) is refused with 413 before it is read; and
observers registered in ``app.state.request_observers`` (``/metrics``) see each request's route,
status and duration.

Cross-site requests: every request that is not GET/HEAD/OPTIONS must carry the content type the
CLI sends — ``application/json``, or ``application/gzip``/``application/octet-stream`` for the
code upload — else 415, before anything else happens. A web page on another site can only send
form posts (``application/x-www-form-urlencoded``, ``multipart/form-data``, ``text/plain``) or no
content type without the browser first asking nimbus (a CORS preflight nimbus never grants), so no
page a user visits can submit or kill a topology. A nimbus without an API token (listening on
loopback only) also refuses a ``Host`` header that is not one of its own names, so a site cannot
reach it by rebinding its DNS name to 127.0.0.1.
"""

from __future__ import annotations

import hmac
import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from kazoo.exceptions import KazooException
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from gale.config import stored_secret
from gale.errors import ConfigError, GaleError, NotFoundError, TopologyError
from gale.http_guard import host_problem
from gale.log import get_logger
from gale.nimbus import views
from gale.nimbus.daemon import Nimbus, NotLeaderError
from gale.nimbus.transitions import TransitionError

log = get_logger("nimbus.api")


#: the largest JSON body accepted by any route but the code upload (which has nimbus.max.request.bytes)
MAX_JSON_BODY_BYTES = 1024 * 1024
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,64}$")
UPLOAD_PATH = "/api/v1/topologies"
SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))
UPLOAD_CONTENT_TYPES = ("application/gzip", "application/octet-stream")
ACTION_CONTENT_TYPES = ("application/json",)


def content_type_problem(method: str, path: str, content_type: str) -> str | None:
    """Why a request with this method, path and Content-Type is refused (415), or None."""
    if method in SAFE_METHODS:
        return None
    media = content_type.split(";", 1)[0].strip().lower()
    allowed = UPLOAD_CONTENT_TYPES if (method == "POST" and path == UPLOAD_PATH) else ACTION_CONTENT_TYPES
    if media in allowed:
        return None
    got = f"Content-Type {media!r}" if media else "no Content-Type"
    return (f"{method} {path} needs Content-Type {' or '.join(allowed)} (got {got}); nimbus refuses other "
            "content types on actions so that no web page can trigger them with a form")


class ErrorBody(BaseModel):
    """Every error response: what is wrong and what to do about it."""

    error: str = Field(description="what went wrong and how to fix it, for a human")
    leader: str | None = Field(default=None, description="409 from a standby: the leader's host:port")


#: documented on every route: each 4xx/5xx body is an :class:`ErrorBody`
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorBody, "description": "refused: the message says why and what to do"},
    "5XX": {"model": ErrorBody, "description": "nimbus-side failure (ZooKeeper unavailable: 503)"},
}


class RequestContext:
    """ASGI middleware: correlation id, body size limit, access log line, request observers."""

    def __init__(self, app: Any, upload_limit: int, max_json_body: int = MAX_JSON_BODY_BYTES,
                 observers: list[Callable[[str, str, int, float], None]] | None = None,
                 allowed_hosts: set[str] | None = None):
        self.app = app
        self.upload_limit = upload_limit
        self.max_json_body = max_json_body
        self.observers = observers if observers is not None else []
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        rid = headers.get("x-request-id", "")
        if not _REQUEST_ID.match(rid):
            rid = uuid.uuid4().hex[:16]
        method = scope.get("method", "")
        path = scope.get("path", "")
        limit = self.upload_limit if (method == "POST" and path == UPLOAD_PATH) else self.max_json_body
        started = time.perf_counter()
        status = {"code": 500, "sent": False}
        tokens = structlog.contextvars.bind_contextvars(request_id=rid)

        async def send_with_id(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                status["sent"] = True
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + [(b"x-request-id", rid.encode())]
            await send(message)

        try:
            refused = host_problem(headers.get("host", ""), self.allowed_hosts, "nimbus")
            if refused:
                await _send_json(send_with_id, 403, refused)
                return
            refused = content_type_problem(method, path, headers.get("content-type", ""))
            if refused:
                await _send_json(send_with_id, 415, refused)
                return
            declared = headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                await _send_json(send_with_id, 413, f"request body of {int(declared)} bytes exceeds the limit of "
                                                    f"{limit} bytes for {method} {path}")
                return
            received = {"n": 0}

            async def limited_receive() -> dict:
                message = await receive()
                if message["type"] == "http.request":
                    received["n"] += len(message.get("body", b""))
                    if received["n"] > limit:
                        raise StarletteHTTPException(413, f"request body exceeds the limit of {limit} bytes "
                                                          f"for {method} {path}")
                return message

            await self.app(scope, limited_receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            code = status["code"]
            level = "debug" if (method in ("GET", "HEAD") and code < 400) else ("warning" if code >= 500 else "info")
            getattr(log, level)("http-request", method=method, path=path, route=route, status=code,
                                duration_ms=round(elapsed * 1000, 2))
            for observe in self.observers:
                try:
                    observe(method, route, code, elapsed)
                except Exception:  # noqa: BLE001 - metrics must never break a request
                    log.exception("request-observer-failed")
            structlog.contextvars.reset_contextvars(**tokens)


async def _send_json(send: Callable, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class ApiError(Exception):
    def __init__(self, status: int, message: str, **extra: Any):
        self.status = status
        self.message = message
        self.extra = extra


class KillRequest(BaseModel):
    wait_secs: int | None = Field(default=None, ge=0, le=86400)


class RebalanceRequest(BaseModel):
    wait_secs: int | None = Field(default=None, ge=0, le=86400)
    num_workers: int | None = Field(default=None, ge=1, le=10000)
    executors: dict[str, int] = Field(default_factory=dict)
    #: Gale: new task counts (docs/state.md, "Rescaling")
    tasks: dict[str, int] = Field(default_factory=dict)


class SubmitResponse(BaseModel):
    id: str
    name: str


class ActionResponse(BaseModel):
    id: str
    action: str


def error_response(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_req: Request, exc: ApiError):
        return error_response(exc.status, exc.message, **exc.extra)

    @app.exception_handler(NotLeaderError)
    async def _not_leader(_req: Request, exc: NotLeaderError):
        return error_response(409, str(exc), leader=exc.leader)

    def status_handler(status: int):
        async def handler(_req: Request, exc: Exception):
            return error_response(status, str(exc))

        return handler

    # the most specific class wins (Starlette looks handlers up along the exception's MRO)
    for error_class, status in ((NotFoundError, 404), (TransitionError, 409), (TopologyError, 400),
                                (ConfigError, 400), (GaleError, 400)):
        app.add_exception_handler(error_class, status_handler(status))

    @app.exception_handler(KazooException)
    async def _zk(_req: Request, exc: KazooException):
        return error_response(503, f"ZooKeeper is unavailable ({type(exc).__name__}); retry shortly")

    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError):
        problems = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            problems.append(f"{loc}: {err.get('msg')}")
        return error_response(422, "invalid request: " + "; ".join(problems))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(_req: Request, exc: Exception):
        log.exception("api-unexpected-error")
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


def _require_token(nimbus: Nimbus, request: Request, write: bool) -> None:
    token = nimbus.config.nimbus_api_token
    if not token:
        return
    if not write and not nimbus.config.nimbus_api_read_token_required:
        return
    header = request.headers.get("authorization", "")
    if not hmac.compare_digest(header.encode(), f"Bearer {token}".encode()):
        raise ApiError(401, "missing or wrong API token: pass 'Authorization: Bearer <nimbus.api.token>' "
                            "(the CLI reads it from nimbus.api.token in your config)")


def _require_cluster_token(nimbus: Nimbus, request: Request) -> None:
    """Routes that hand out code or configuration (the bundle, the stored conf with its secret): the
    token whenever one is configured, whatever ``nimbus.api.read.token.required`` says."""
    _require_token(nimbus, request, write=True)


def token_checks(nimbus: Nimbus) -> tuple[Callable[[Request], None], Callable[[Request], None]]:
    """FastAPI dependencies ``(reader, writer)`` enforcing ``nimbus.api.token`` (for extensions too)."""

    def reader(request: Request) -> None:
        _require_token(nimbus, request, write=False)

    def writer(request: Request) -> None:
        _require_token(nimbus, request, write=True)

    return reader, writer


WINDOW_PATTERN = r"^(600|10800|86400|:all-time)$"
WINDOW_DOC = "stats window in seconds: 600, 10800, 86400 or :all-time"


def make_router(nimbus: Nimbus) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["gale"], responses=ERROR_RESPONSES)
    reader, writer = token_checks(nimbus)

    @router.get("/health", dependencies=[Depends(reader)])
    def health() -> dict[str, Any]:
        return {"status": "ok", "address": nimbus.address, "leader": nimbus.is_leader(),
                "current_leader": nimbus.leader.current_leader() if nimbus.leader else None,
                "epoch": nimbus.leader.epoch if nimbus.leader and nimbus.is_leader() else None,
                "scheduling_rounds": nimbus.rounds, "zookeeper": nimbus.zk_state}

    @router.get("/cluster", dependencies=[Depends(reader)])
    def cluster() -> dict[str, Any]:
        return views.cluster_summary(nimbus)

    @router.get("/topologies", dependencies=[Depends(reader)])
    def topologies() -> list[dict[str, Any]]:
        return views.topology_list(nimbus)

    @router.post("/topologies", response_model=SubmitResponse, dependencies=[Depends(writer)],
                 openapi_extra={"requestBody": {"content": {
                     "application/gzip": {"schema": {"type": "string", "format": "binary"}},
                     "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                     "required": True, "description": "the code bundle (gzip tar) that 'nimbus submit' builds"}})
    async def submit(request: Request, name: str = Query(min_length=1, max_length=128),
                     inactive: bool = Query(default=False)) -> SubmitResponse:
        limit = nimbus.config.nimbus_max_request_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"code bundle of {int(declared)} bytes exceeds nimbus.max.request.bytes ({limit})")
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > limit:
                raise ApiError(413, f"code bundle exceeds nimbus.max.request.bytes ({limit} bytes)")
        if not body:
            raise ApiError(400, "empty request body: send the topology's code bundle (nimbus submit builds it)")
        tid = await _in_thread(nimbus.submit, name, bytes(body), initial_status="INACTIVE" if inactive else "ACTIVE")
        return SubmitResponse(id=tid, name=name)

    @router.get("/topologies/{name}", dependencies=[Depends(reader)])
    def topology(name: str, window: str = Query(default=":all-time", pattern=WINDOW_PATTERN,
                                                description=WINDOW_DOC)) -> dict[str, Any]:
        return views.topology_detail(nimbus, nimbus.topology_id(name), window)

    @router.get("/topologies/{name}/components/{component}", dependencies=[Depends(reader)])
    def component(name: str, component: str,
                  window: str = Query(default=":all-time", pattern=WINDOW_PATTERN,
                                      description=WINDOW_DOC)) -> dict[str, Any]:
        return dict(views.component_detail(nimbus, nimbus.topology_id(name), component, window))

    @router.get("/topologies/{name}/workers", dependencies=[Depends(reader)])
    def workers(name: str, window: str = Query(default=":all-time", pattern=WINDOW_PATTERN,
                                               description=WINDOW_DOC)) -> list[dict[str, Any]]:
        """Per-worker statistics: where each worker runs, its pid, log file, executors and their summed stats."""
        from gale.nimbus.storm_api import build

        return build.gale_workers(build.gather(nimbus, name, components=()), window)

    @router.post("/topologies/{name}/activate", response_model=ActionResponse, dependencies=[Depends(writer)])
    def activate(name: str) -> ActionResponse:
        return ActionResponse(id=nimbus.activate(name), action="activate")

    @router.post("/topologies/{name}/deactivate", response_model=ActionResponse, dependencies=[Depends(writer)])
    def deactivate(name: str) -> ActionResponse:
        return ActionResponse(id=nimbus.deactivate(name), action="deactivate")

    @router.post("/topologies/{name}/kill", response_model=ActionResponse, dependencies=[Depends(writer)])
    def kill(name: str, body: KillRequest | None = None) -> ActionResponse:
        return ActionResponse(id=nimbus.kill(name, (body or KillRequest()).wait_secs), action="kill")

    @router.post("/topologies/{name}/rebalance", response_model=ActionResponse, dependencies=[Depends(writer)])
    def rebalance(name: str, body: RebalanceRequest | None = None) -> ActionResponse:
        body = body or RebalanceRequest()
        return ActionResponse(id=nimbus.rebalance(name, body.wait_secs, body.num_workers, body.executors, body.tasks),
                              action="rebalance")

    def cluster_daemon(request: Request) -> None:
        _require_cluster_token(nimbus, request)

    @router.get("/topologies/{topology_id}/code", dependencies=[Depends(cluster_daemon)],
                responses={200: {"content": {"application/gzip": {}}}},
                summary="A topology's code bundle with its configuration file (the token whenever one is set)")
    def code(topology_id: str) -> Response:
        """The bundle as submitted: the user's code and their configuration file, where database URLs
        and passwords live — so, like ``stormconf``, it needs the API token whenever one is configured,
        whatever ``nimbus.api.read.token.required`` says."""
        try:
            path = nimbus.blobs.bundle_path(topology_id)
        except ValueError:
            raise ApiError(400, f"invalid topology id {topology_id!r}") from None
        if not path.is_file():
            raise ApiError(404, f"this nimbus holds no code for {topology_id!r}")
        return Response(path.read_bytes(), media_type="application/gzip",
                        headers={"X-Gale-Checksum": nimbus.blobs.checksum(topology_id) or ""})

    @router.get("/topologies/{topology_id}/stormconf", dependencies=[Depends(cluster_daemon)],
                summary="The stored topology configuration with its secret (supervisors and nimbuses only)")
    def stormconf(topology_id: str) -> Response:
        """The configuration nimbus stored at submit, including ``topology.secret``: what a
        supervisor writes (mode 0600) beside the code for its workers, and what a standby nimbus
        copies with the code. Always requires the API token when one is configured."""
        try:
            conf = nimbus.blobs.stored_conf(topology_id)
        except ValueError:
            raise ApiError(400, f"invalid topology id {topology_id!r}") from None
        if conf is None:
            raise ApiError(404, f"this nimbus holds no stored configuration for {topology_id!r}")
        if stored_secret(conf) is None:
            raise ApiError(404, f"this nimbus holds no secret for {topology_id!r} (copied by an older nimbus?); "
                                "ask another nimbus")
        return Response(json.dumps(conf, sort_keys=True), media_type="application/json",
                        headers={"Cache-Control": "no-store"})

    return router


async def _in_thread(fn, *args, **kwargs):
    import anyio
    import functools

    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


def create_app(nimbus: Nimbus, allowed_hosts: set[str] | None = None) -> FastAPI:
    """The API app. ``allowed_hosts``: the only Host header names answered (a loopback-only nimbus)."""
    app = FastAPI(
        title="Gale nimbus API", version="1", docs_url="/api/docs", redoc_url=None,
        description="Gale's own API (/api/v1/topologies...), Storm UI's REST API (/api/v1/cluster/summary, "
                    "/api/v1/topology/...), the web UI, Prometheus /metrics and HTTP service discovery. "
                    "Errors are JSON objects with an 'error' message.",
    )
    app.state.request_observers = []
    app.add_middleware(RequestContext, upload_limit=nimbus.config.nimbus_max_request_bytes,
                       observers=app.state.request_observers, allowed_hosts=allowed_hosts)
    install_error_handlers(app)
    app.include_router(make_router(nimbus))
    for extension in _extensions():
        extension(app, nimbus)
    return app


def _extensions():
    """Optional routers (Storm REST API, web UI, metrics): modules that define ``install(app, nimbus)``."""
    import importlib

    out = []
    for name in ("gale.nimbus.storm_api", "gale.nimbus.ui", "gale.nimbus.metrics", "gale.nimbus.logs_api",
                 "gale.nimbus.debug_api"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        out.append(module.install)
    return out
