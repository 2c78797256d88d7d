"""Nimbus's HTTP API (FastAPI): what the CLI, supervisors and other nimbuses talk to.

Gale's own JSON API lives under ``/api/v1`` (topologies by name or id); errors are JSON objects
``{"error": "<what is wrong and what to do>", ...}`` with a 4xx status. A request that needs the
leader, sent to a standby, gets 409 with the leader's address in ``leader``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from kazoo.exceptions import KazooException
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from common.errors import ConfigError, GaleError, NotFoundError, TopologyError
from common.log import get_logger
from nimbus import views
from nimbus.daemon import Nimbus, NotLeaderError
from nimbus.transitions import TransitionError

log = get_logger("nimbus.api")


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

    @app.exception_handler(NotFoundError)
    async def _not_found(_req: Request, exc: NotFoundError):
        return error_response(404, str(exc))

    @app.exception_handler(TransitionError)
    async def _transition(_req: Request, exc: TransitionError):
        return error_response(409, str(exc))

    @app.exception_handler(TopologyError)
    async def _topology(_req: Request, exc: TopologyError):
        return error_response(400, str(exc))

    @app.exception_handler(ConfigError)
    async def _config(_req: Request, exc: ConfigError):
        return error_response(400, str(exc))

    @app.exception_handler(GaleError)
    async def _gale(_req: Request, exc: GaleError):
        return error_response(400, str(exc))

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
    token = nimbus.conf.get("nimbus.api.token")
    if not token:
        return
    if not write and not nimbus.conf.get("nimbus.api.read.token.required"):
        return
    header = request.headers.get("authorization", "")
    if header != f"Bearer {token}":
        raise ApiError(401, "missing or wrong API token: pass 'Authorization: Bearer <nimbus.api.token>' "
                            "(the CLI reads it from nimbus.api.token in your config)")


def make_router(nimbus: Nimbus) -> APIRouter:
    router = APIRouter(prefix="/api/v1")

    def writer(request: Request) -> None:
        _require_token(nimbus, request, write=True)

    def reader(request: Request) -> None:
        _require_token(nimbus, request, write=False)

    @router.get("/health", dependencies=[Depends(reader)])
    def health() -> dict[str, Any]:
        return {"status": "ok", "address": nimbus.address, "leader": nimbus.is_leader(),
                "current_leader": nimbus.leader.current_leader() if nimbus.leader else None}

    @router.get("/cluster", dependencies=[Depends(reader)])
    def cluster() -> dict[str, Any]:
        return views.cluster_summary(nimbus)

    @router.get("/topologies", dependencies=[Depends(reader)])
    def topologies() -> list[dict[str, Any]]:
        return views.topology_list(nimbus)

    @router.post("/topologies", response_model=SubmitResponse, dependencies=[Depends(writer)],
                 openapi_extra={"requestBody": {"content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
                                                "required": True}})
    async def submit(request: Request, name: str = Query(min_length=1, max_length=128),
                     inactive: bool = Query(default=False)) -> SubmitResponse:
        limit = int(nimbus.conf["nimbus.max.request.bytes"])
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
    def topology(name: str, window: str = Query(default=":all-time", pattern=r"^(600|10800|86400|:all-time)$")) -> dict[str, Any]:
        return views.topology_detail(nimbus, nimbus.topology_id(name), window)

    @router.get("/topologies/{name}/components/{component}", dependencies=[Depends(reader)])
    def component(name: str, component: str,
                  window: str = Query(default=":all-time", pattern=r"^(600|10800|86400|:all-time)$")) -> dict[str, Any]:
        return dict(views.component_detail(nimbus, nimbus.topology_id(name), component, window))

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
        return ActionResponse(id=nimbus.rebalance(name, body.wait_secs, body.num_workers, body.executors),
                              action="rebalance")

    @router.get("/topologies/{topology_id}/code", dependencies=[Depends(reader)],
                responses={200: {"content": {"application/gzip": {}}}})
    def code(topology_id: str) -> Response:
        try:
            path = nimbus.blobs.bundle_path(topology_id)
        except ValueError:
            raise ApiError(400, f"invalid topology id {topology_id!r}") from None
        if not path.is_file():
            raise ApiError(404, f"this nimbus holds no code for {topology_id!r}")
        return Response(path.read_bytes(), media_type="application/gzip",
                        headers={"X-Gale-Checksum": nimbus.blobs.checksum(topology_id) or ""})

    return router


async def _in_thread(fn, *args, **kwargs):
    import anyio
    import functools

    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


def create_app(nimbus: Nimbus) -> FastAPI:
    app = FastAPI(title="Gale nimbus API", version="1", docs_url="/api/docs", redoc_url=None)
    install_error_handlers(app)
    app.include_router(make_router(nimbus))
    for extension in _extensions():
        extension(app, nimbus)
    return app


def _extensions():
    """Optional routers (Storm REST API, web UI, metrics): modules that define ``install(app, nimbus)``."""
    import importlib

    out = []
    for name in ("nimbus.storm_api", "nimbus.ui", "nimbus.metrics"):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        out.append(module.install)
    return out
