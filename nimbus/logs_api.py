"""Logs and worker debugging through nimbus: the UI's log viewer, ``nimbus logs``, thread dumps,
CPU profiles and the sampled tuples, relayed to the supervisors' log servers (:mod:`.relay`)::

    GET  /api/v1/supervisor/<id>/logs                          files of its log directory, its workers
    GET  /api/v1/supervisor/<id>/log?file=&start=&length=      a page (the tail without start)
    GET  /api/v1/supervisor/<id>/log/search?file=&search=&start=&max=&ignore_case=
    GET  /api/v1/supervisor/<id>/log/raw?file=                 the file (a flame graph is SVG)
    POST /api/v1/supervisor/<id>/workers/<port>/threaddump     (token) every thread's Python stack
    POST /api/v1/supervisor/<id>/workers/<port>/profile        (token) {"duration_secs", "rate"}: py-spy
    GET  /api/v1/topology/<id>/component/<component>/events?limit=   sampled tuples (newest last)

Reads follow the API's rules (``nimbus.api.read.token.required``); thread dumps and profiles need
the token whenever one is set, as every action does. Files are named relative to the supervisor's
log directory; the supervisor validates them (no path outside it is reachable: docs/ui.md).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query
from fastapi.responses import JSONResponse, Response

from gale.daemon_util import WORKER_LOG
from gale.nimbus.relay import RelayError, call

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.daemon import Nimbus

#: how much of each worker's events.log the sampled-tuples view reads (its tail)
EVENTS_TAIL_BYTES = 256 * 1024
EVENTS_LIMIT_MAX = 500
PROFILE_SLACK_SECS = 30.0

SUPERVISOR_ID = Path(min_length=1, max_length=256, description="supervisor id")
PORT = Path(ge=1, le=65535, description="the worker's slot port")


def make_router(nimbus: Nimbus) -> APIRouter:
    from gale.nimbus.api import ERROR_RESPONSES, _in_thread, token_checks

    reader, writer = token_checks(nimbus)
    router = APIRouter(prefix="/api/v1", tags=["logs"], responses=ERROR_RESPONSES)
    read = [Depends(reader)]

    def relayed(sid: str, path: str, **params: Any) -> dict[str, Any]:
        return call(nimbus, sid, "GET", path, params=params).json()

    @router.get("/supervisor/{sid}/logs", dependencies=read)
    def files(sid: str = SUPERVISOR_ID) -> dict[str, Any]:
        """The files of a supervisor's log directory (newest first) and the workers it runs."""
        return relayed(sid, "/api/v1/logs")

    @router.get("/supervisor/{sid}/log", dependencies=read)
    def page(sid: str = SUPERVISOR_ID, file: str = Query(default=""), start: int | None = Query(default=None),
             length: int | None = Query(default=None)) -> dict[str, Any]:
        """A page of a log file: ``length`` bytes from ``start`` (default: the last 64 KiB)."""
        return relayed(sid, "/api/v1/log", file=file, start=start, length=length)

    @router.get("/supervisor/{sid}/log/search", dependencies=read)
    def search(sid: str = SUPERVISOR_ID, file: str = Query(default=""), search: str = Query(default=""),
               start: int = Query(default=0), max: int | None = Query(default=None),
               ignore_case: bool = Query(default=False)) -> dict[str, Any]:
        """Lines of a log file containing ``search`` from byte ``start``; ``next`` continues."""
        return relayed(sid, "/api/v1/log/search", file=file, search=search, start=start, max=max,
                       ignore_case=str(ignore_case).lower())

    @router.get("/supervisor/{sid}/log/raw", dependencies=read, response_class=Response)
    def raw(sid: str = SUPERVISOR_ID, file: str = Query(default="")) -> Response:
        """A file as it is (a thread dump as text, a flame graph as SVG whose scripts never run)."""
        resp = call(nimbus, sid, "GET", "/api/v1/log/raw", params={"file": file})
        kept = {k: v for k, v in resp.headers.items()
                if k.lower() in ("content-security-policy", "x-content-type-options", "cache-control", "content-disposition")}
        return Response(resp.content, media_type=resp.headers.get("content-type", "text/plain"), headers=kept)

    @router.post("/supervisor/{sid}/workers/{port}/threaddump", dependencies=[Depends(writer)])
    async def threaddump(sid: str = SUPERVISOR_ID, port: int = PORT) -> dict[str, Any]:
        """Every thread's Python stack in the worker on ``port``, saved beside its log."""
        resp = await _in_thread(call, nimbus, sid, "POST", f"/api/v1/workers/{port}/threaddump", json={}, timeout=20.0)
        return resp.json()

    @router.post("/supervisor/{sid}/workers/{port}/profile", dependencies=[Depends(writer)])
    async def profile(sid: str = SUPERVISOR_ID, port: int = PORT,
                      body: dict[str, Any] | None = Body(default=None, examples=[{"duration_secs": 10, "rate": 100}])
                      ) -> dict[str, Any]:
        """A CPU profile (py-spy) of the worker on ``port`` for ``duration_secs`` (1-60, default 10) at
        ``rate`` samples a second (1-250, default 100): a flame graph SVG beside its log."""
        body = body or {}
        secs = body.get("duration_secs", 10)
        if not isinstance(secs, int) or isinstance(secs, bool):
            raise RelayError(400, f"duration_secs must be a whole number of seconds, got {secs!r}")
        resp = await _in_thread(call, nimbus, sid, "POST", f"/api/v1/workers/{port}/profile", json=body,
                                timeout=min(secs, 3600) + PROFILE_SLACK_SECS)
        return resp.json()

    @router.get("/topology/{id}/component/{component}/events", dependencies=read)
    def events(id: str = Path(min_length=1, max_length=256), component: str = Path(min_length=1, max_length=256),
               limit: int = Query(default=100, description=f"newest events returned, 1 to {EVENTS_LIMIT_MAX}")
               ) -> dict[str, Any]:
        """The tuples sampled from a component (enable sampling with POST .../debug/enable/<pct>), newest last."""
        from gale.nimbus.storm_api import build

        if not 1 <= limit <= EVENTS_LIMIT_MAX:
            raise RelayError(400, f"limit {limit} is out of range: 1 to {EVENTS_LIMIT_MAX}")
        snap = build.gather(nimbus, id, components=())
        if component not in snap.layout.component_executors:
            raise RelayError(400, f"topology {snap.id} has no component {component!r}; its components: "
                                  f"{', '.join(snap.components(sys=True))}")
        found, problems = [], []
        for slot in build.worker_slots(snap):
            if component not in slot["components"]:
                continue
            name = worker_file(snap.id, slot["port"], "events.log")
            try:
                text = call(nimbus, slot["node"], "GET", "/api/v1/log",
                            params={"file": name, "length": EVENTS_TAIL_BYTES}).json()["data"]
            except RelayError as exc:
                if exc.status != 404:
                    problems.append(str(exc))
                continue
            for line in text.splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # the first line of a tail, cut
                if isinstance(event, dict) and event.get("component") == component:
                    found.append({**event, "host": slot["host"], "port": slot["port"], "supervisorId": slot["node"]})
        found.sort(key=lambda e: e.get("ts", 0))
        base = snap.base.component_debug
        options = base.get(component) or base.get(snap.id)
        return {"topologyId": snap.id, "component": component, "events": found[-limit:],
                "sampling": bool(options and options.enable), "samplingPct": options.samplingpct if options else 0.0,
                "problems": problems}

    return router


def worker_file(topology_id: str, port: int, name: str = WORKER_LOG) -> str:
    from gale.daemon_util import worker_artifacts

    return f"{worker_artifacts(topology_id, port)}/{name}"


def install(app: FastAPI, nimbus: Nimbus) -> None:
    @app.exception_handler(RelayError)
    async def _relay(_req, exc: RelayError):
        extra = {k: v for k, v in exc.body.items() if k != "error"}
        return JSONResponse({"error": str(exc), **extra}, status_code=exc.status)

    app.include_router(make_router(nimbus))
