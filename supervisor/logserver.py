"""The supervisor's log server (Storm's logviewer): its workers' logs and its own, over HTTP.

Routes (``/api/v1``; files are named relative to the log directory, see :mod:`.logfiles`)::

    GET  /health
    GET  /logs                                  every servable file: name, size, mtime
    GET  /log?file=&start=&length=              a page of a file (its tail without start)
    GET  /log/search?file=&search=&start=&max=&ignore_case=
    GET  /log/raw?file=                         the file itself (flame graphs are SVG)
    POST /workers/<port>/threaddump             every thread's Python stack, saved beside its log
    POST /workers/<port>/profile                {"duration_secs": 10, "rate": 100}: a py-spy flame graph

Nimbus relays these for the UI and the CLI (``gale.nimbus.logs_api``), so a browser talks to
nimbus only. The rules are the API's (docs/security.md): the token (``nimbus.api.token``, which
every supervisor has) for every action — thread dumps and profiles — and for reads when
``nimbus.api.read.token.required``; without a token the server listens on the loopback interface
only (``logviewer.host`` otherwise needs ``nimbus.api.insecure``) and refuses other Host names.
It listens on ``logviewer.port`` (taken: any free port), published in the supervisor's ZooKeeper
record.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from gale.config_keys import Config
from gale.daemon_util import WORKER_LOG
from gale.errors import ConfigError, GaleError, NotFoundError
from gale.http_guard import Guard, is_loopback
from gale.log import get_logger
from gale.supervisor import logfiles
from gale.supervisor.logfiles import WorkerRef
from gale.supervisor.profiler import (DURATION_DEFAULT, RATE_DEFAULT, ProfileBusy, ProfileError, Profiler,
                                      WorkerExited)
from gale.worker.debug.control import ControlError, ask

log = get_logger("supervisor.logserver")


@dataclass(frozen=True)
class ListenPlan:
    host: str
    loopback_only: bool


def listen_plan(config: Config, token: str | None) -> ListenPlan:
    """Where the log server listens: ``logviewer.host``, or 0.0.0.0 with a token and 127.0.0.1
    without; a non-loopback address without a token needs ``nimbus.api.insecure``."""
    host = config.logviewer_host
    if token:
        return ListenPlan(host or "0.0.0.0", False)
    if host is None or is_loopback(host):
        return ListenPlan(host or "127.0.0.1", True)
    if config.nimbus_api_insecure:
        return ListenPlan(host, False)
    raise ConfigError(f"logviewer.host is {host!r}, which other machines can reach, but no API token is configured: "
                      "anyone could read the workers' logs and profile them. Set nimbus.api.token (docs/security.md), "
                      "bind logviewer.host to 127.0.0.1, or set nimbus.api.insecure: true to accept the risk")


class ProfileRequest(BaseModel):
    duration_secs: int = DURATION_DEFAULT
    rate: int = RATE_DEFAULT


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{int(time.time() * 1000) % 1000:03d}"


def make_app(config: Config, token: str | None, log_root: Path, workers: Callable[[], dict[int, WorkerRef]],
             supervisor_id: str, allowed_hosts: set[str] | None = None, profiler: Profiler | None = None) -> FastAPI:
    """The log server's app. ``workers()``: this supervisor's workers by slot port, now."""
    app = FastAPI(title="Gale supervisor log server", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(Guard, allowed_hosts=allowed_hosts, max_body=4096)
    profiler = profiler or Profiler()
    _errors(app)

    def check(request: Request, write: bool) -> None:
        if not token or (not write and not config.nimbus_api_read_token_required):
            return
        header = request.headers.get("authorization", "")
        if not hmac.compare_digest(header.encode(), f"Bearer {token}".encode()):
            raise StarletteHTTPException(401, "missing or wrong API token: pass 'Authorization: Bearer "
                                              "<nimbus.api.token>' (nimbus relays the UI's requests with it)")

    def reader(request: Request) -> None:
        check(request, write=False)

    def writer(request: Request) -> None:
        check(request, write=True)

    router = APIRouter(prefix="/api/v1")
    read = [Depends(reader)]

    @router.get("/health", dependencies=read)
    def health() -> dict[str, Any]:
        return {"status": "ok", "supervisor": supervisor_id}

    @router.get("/logs", dependencies=read)
    def files() -> dict[str, Any]:
        refs = workers()
        return {"supervisor": supervisor_id, "files": logfiles.list_files(log_root),
                "workers": [{"port": w.port, "topology": w.topology_id, "worker": w.worker_id, "pid": w.pid,
                             "log": f"{w.artifacts}/{WORKER_LOG}"} for w in sorted(refs.values(), key=lambda w: w.port)]}

    @router.get("/log", dependencies=read)
    def page(file: str = Query(default=""), start: int | None = Query(default=None),
             length: int = Query(default=logfiles.PAGE_DEFAULT)) -> dict[str, Any]:
        return logfiles.read_page(logfiles.resolve(log_root, file), start, length)

    @router.get("/log/search", dependencies=read)
    def search(file: str = Query(default=""), search: str = Query(default=""), start: int = Query(default=0),
               max: int = Query(default=logfiles.MATCHES_DEFAULT), ignore_case: bool = Query(default=False)) -> dict[str, Any]:
        return logfiles.search(logfiles.resolve(log_root, file), search, start, max, ignore_case)

    @router.get("/log/raw", dependencies=read)
    def raw(file: str = Query(default="")) -> FileResponse:
        f = logfiles.resolve(log_root, file)
        svg = f.name.endswith(".svg")
        # a flame graph is shown as an image; its scripts never run (no script source allowed)
        headers = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
                   "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
        return FileResponse(f.path, media_type="image/svg+xml" if svg else "text/plain; charset=utf-8",
                            headers=headers, content_disposition_type="inline", filename=Path(f.name).name)

    def worker_on(port: int) -> WorkerRef:
        ref = workers().get(port)
        if ref is None or ref.pid is None:
            running = sorted(p for p, w in workers().items() if w.pid is not None)
            raise NotFoundError(f"no worker runs on port {port} of supervisor {supervisor_id}; running on: "
                                f"{', '.join(map(str, running)) or 'none'}")
        return ref

    @router.post("/workers/{port}/threaddump", dependencies=[Depends(writer)])
    def threaddump(port: int) -> dict[str, Any]:
        """Every thread's Python stack in the worker on ``port``, saved as a file beside its log."""
        ref = worker_on(port)
        try:
            reply = ask(ref.worker_dir, {"op": "threaddump"}, timeout=10.0)
        except ControlError as exc:
            raise StarletteHTTPException(409, f"worker on port {port}: {exc}") from None
        name = f"{ref.artifacts}/threaddump-{_stamp()}.txt"
        target = log_root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(reply["text"])
        log.info("thread-dump", port=port, worker=ref.worker_id, file=name)
        return {"supervisor": supervisor_id, "port": port, "topology": ref.topology_id, "worker": ref.worker_id,
                "pid": ref.pid, "file": name, "threads": reply.get("threads"), "text": reply["text"]}

    @router.post("/workers/{port}/profile", dependencies=[Depends(writer)])
    def profile(port: int, body: ProfileRequest | None = None) -> dict[str, Any]:
        """A CPU profile of the worker on ``port`` (py-spy), saved as a flame graph beside its log."""
        body = body or ProfileRequest()
        ref = worker_on(port)
        name = f"{ref.artifacts}/profile-{_stamp()}.svg"
        target = log_root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        log.info("profile-started", port=port, worker=ref.worker_id, pid=ref.pid, secs=body.duration_secs, rate=body.rate)
        try:
            result = profiler.record(ref.worker_id, ref.pid, ref.alive, body.duration_secs, body.rate, target)
        except WorkerExited as exc:
            log.warning("profile-worker-exited", port=port, worker=ref.worker_id, pid=ref.pid)
            raise WorkerExited(str(exc), name if exc.output else None) from None
        return {"supervisor": supervisor_id, "port": port, "topology": ref.topology_id, "worker": ref.worker_id,
                "pid": ref.pid, "file": name, "durationSecs": result.duration_secs, "samples": result.samples,
                "rate": body.rate}

    app.include_router(router)
    return app


def _errors(app: FastAPI) -> None:
    def reply(status: int, message: str, **extra: Any) -> JSONResponse:
        return JSONResponse({"error": message, **extra}, status_code=status)

    @app.exception_handler(WorkerExited)
    async def _exited(_req, exc: WorkerExited):
        return reply(409, str(exc), workerExited=True, partialFile=exc.output)

    @app.exception_handler(GaleError)
    async def _gale(_req, exc: GaleError):
        status = (404 if isinstance(exc, NotFoundError) else 409 if isinstance(exc, ProfileBusy)
                  else 503 if isinstance(exc, ProfileError) and "not installed" in str(exc) else 400)
        return reply(status, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req, exc: RequestValidationError):
        problems = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()[:5]]
        return reply(400, "invalid request: " + "; ".join(problems))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req, exc: StarletteHTTPException):
        return reply(exc.status_code, str(exc.detail))
