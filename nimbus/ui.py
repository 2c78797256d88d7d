"""Gale's web UI, served by nimbus on ``nimbus.http.port`` (Storm UI's page names).

Pages (static HTML + ``/ui/app.js``; every number comes from the Storm REST API of
:mod:`gale.nimbus.storm_api`, polled every few seconds without a full reload — ``?refresh=SECS``):

* ``/`` (``/index.html``) — cluster: summary, nimbuses, topologies, supervisors;
* ``/topology.html?id=<id>[&window=600]`` — status, actions (activate, deactivate, rebalance, kill,
  each behind a confirmation dialog), stats per window, a live throughput/latency chart, spouts and
  bolts tables with their last error, workers with their log files;
* ``/component.html?topology_id=<id>&id=<component>`` — stats per window, inputs, outputs,
  executors (where they run, their stats, the worker's log file), the last 10 errors;
* ``/supervisor.html?id=<supervisor id>`` (or ``?host=``) — slots and the workers it runs;
* ``/logs.html?supervisor=<id>&file=<path>[&search=<text>]`` — the log viewer (through nimbus, from the
  supervisor's log server): files, pages, search; thread dumps and flame graphs are files there too.

The topology page draws the topology as a graph (``graph.js``: components coloured by capacity,
edges with live tuples/s) and its state at a glance; ``debug.js`` adds the debugging actions
(thread dump, CPU profile, log levels, event sampling).

No external resources (the UI works on machines without internet); a strict Content-Security-Policy
allows only this origin's script, styles and API.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fastapi import APIRouter, FastAPI
from fastapi.responses import Response

from gale.errors import NotFoundError

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.daemon import Nimbus

STATIC = Path(__file__).resolve().parent / "ui_static"
PAGES = {
    "/": ("index.html", "Cluster page: summary, nimbuses, topologies, supervisors."),
    "/index.html": ("index.html", "Cluster page (Storm UI's name)."),
    "/topology.html": ("topology.html", "Topology page: stats, live chart, spouts, bolts, workers, actions."),
    "/component.html": ("component.html", "Component page: stats, inputs, outputs, executors, errors."),
    "/supervisor.html": ("supervisor.html", "Supervisor page: slots and workers."),
    "/logs.html": ("logs.html", "Log viewer: a worker's (or supervisor's) log files, paged and searchable."),
}
_JS = "application/javascript; charset=utf-8"
ASSETS = {"app.js": _JS, "graph.js": _JS, "debug.js": _JS, "logs.js": _JS, "app.css": "text/css; charset=utf-8"}
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                                "img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _file(name: str, media_type: str) -> Response:
    return Response((STATIC / name).read_bytes(), media_type=media_type, headers=SECURITY_HEADERS)


def _page(name: str):
    def page() -> Response:  # no parameters: query strings are the page script's business
        return _file(name, "text/html; charset=utf-8")

    return page


def make_router() -> APIRouter:
    router = APIRouter(tags=["ui"])
    html = {200: {"content": {"text/html": {}}, "description": "an HTML page"}}
    for path, (name, summary) in PAGES.items():
        router.add_api_route(path, _page(name), methods=["GET"], response_class=Response, summary=summary,
                             responses=html, name=f"ui:{path}")

    @router.get("/ui/{asset}", response_class=Response,
                responses={200: {"content": {"application/javascript": {}, "text/css": {}}},
                           404: {"description": "no such asset"}})
    def asset(asset: str) -> Response:
        """The UI's script and stylesheet."""
        media_type = ASSETS.get(asset)
        if media_type is None:
            raise NotFoundError(f"no UI asset {asset!r}; the UI has {', '.join(sorted(ASSETS))}")
        return _file(asset, media_type)

    return router


def install(app: FastAPI, nimbus: Nimbus) -> None:
    app.include_router(make_router())
