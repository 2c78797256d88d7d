"""Storm UI's REST API, served by nimbus next to Gale's own ``/api/v1/topologies`` routes.

The paths and field names are Storm's (``docs/STORM-UI-REST-API.md``), so Storm exporters and
dashboards (``storm_exporter`` and the like) work unchanged::

    GET  /api/v1/cluster/configuration          GET  /api/v1/topology/summary
    GET  /api/v1/cluster/summary                GET  /api/v1/topology/<id>?window=&sys=
    GET  /api/v1/nimbus/summary                 GET  /api/v1/topology/<id>/metrics?window=&sys=
    GET  /api/v1/supervisor/summary             GET  /api/v1/topology/<id>/component/<component>?window=&sys=
    GET  /api/v1/supervisor?id=|host=           GET  /api/v1/topology-workers/<id>
                                                GET  /api/v1/topology/<id>/visualization?window=&sys=
    POST /api/v1/topology/<id>/activate         POST /api/v1/topology/<id>/deactivate
    POST /api/v1/topology/<id>/rebalance/<wait-time>   (body: {"rebalanceOptions": {...}})
    POST /api/v1/topology/<id>/kill/<wait-time>

``<id>`` is a topology id or, as a convenience, its name. Unlike Storm (500 on any error), errors
are 4xx JSON ``{"error": ...}`` that say what to fix; actions sent to a standby nimbus get 409
with the leader's address. Field meanings: :mod:`gale.nimbus.storm_api.build`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query

from gale.errors import NotFoundError
from gale.nimbus.storm_api import build, models

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.daemon import Nimbus

WINDOW = Query(default=":all-time", pattern=r"^(600|10800|86400|:all-time)$",
               description="stats window in seconds: 600, 10800, 86400 or :all-time")
SYS = Query(default="0", pattern=r"^(0|1|true|false)$",
            description="1 or true: include system components (__acker) and system streams")
TOPOLOGY_ID = Path(min_length=1, max_length=256, description="topology id (or name)")
WAIT_TIME = Path(ge=0, le=86400, description="seconds between deactivating the spouts and the action")


def _sys(value: str) -> bool:
    return value in ("1", "true")


def make_router(nimbus: Nimbus) -> APIRouter:
    from gale.nimbus.api import ERROR_RESPONSES, _in_thread, token_checks

    reader, writer = token_checks(nimbus)
    router = APIRouter(prefix="/api/v1", tags=["storm"], responses=ERROR_RESPONSES)
    read = [Depends(reader)]
    write = [Depends(writer)]

    # ------------------------------------------------------------------ cluster

    @router.get("/cluster/configuration", dependencies=read)
    def cluster_configuration() -> dict[str, Any]:
        """This nimbus's configuration (secrets hidden)."""
        return build.safe_conf(nimbus.config)

    @router.get("/cluster/summary", response_model=models.ClusterSummary, dependencies=read)
    def cluster_summary() -> dict[str, Any]:
        """Supervisors, topologies, slots total/used/free, executors and tasks."""
        from gale.nimbus import views

        return build.cluster_view(views.cluster_summary(nimbus), int(time.time() - nimbus.started_at))

    @router.get("/nimbus/summary", response_model=models.NimbusSummary, dependencies=read)
    def nimbus_summary() -> dict[str, Any]:
        """Every registered nimbus: host, port, Leader / Not a Leader, uptime, version."""
        from gale.nimbus import views

        return {"nimbuses": build.nimbus_rows(views.cluster_summary(nimbus))}

    @router.get("/supervisor/summary", response_model=models.SupervisorSummary, dependencies=read)
    def supervisor_summary() -> dict[str, Any]:
        """Every live supervisor: host, uptime, slots total/used/free."""
        from gale.nimbus import views

        return {"supervisors": build.supervisor_rows(views.cluster_summary(nimbus), time.time()),
                "schedulerDisplayResource": False}

    @router.get("/supervisor", response_model=models.SupervisorPage, dependencies=read)
    def supervisor(id: str | None = Query(default=None, max_length=256, description="supervisor id"),
                   host: str | None = Query(default=None, max_length=256, description="supervisor host name"),
                   sys: str = SYS) -> dict[str, Any]:
        """One supervisor by id (or those on a host) and the workers it runs."""
        from gale.nimbus import views

        if not id and not host:
            raise NotFoundError("pass ?id=<supervisor id> or ?host=<host name>; ids are listed by "
                                "GET /api/v1/supervisor/summary")
        cluster = views.cluster_summary(nimbus)
        rows = [s for s in build.supervisor_rows(cluster, time.time()) if (s["id"] == id if id else s["host"] == host)]
        if not rows:
            what = f"id {id!r}" if id else f"host {host!r}"
            raise NotFoundError(f"no live supervisor with {what}; live: "
                                f"{', '.join(s['id'] for s in cluster['supervisors']) or 'none'}")
        ids = {s["id"] for s in rows}
        workers = []
        for tid, a in sorted(nimbus.state.assignments().items()):
            if not any(node in ids for node, _ in a.executors().values()):
                continue
            try:
                snap = build.gather(nimbus, tid, components=())
            except NotFoundError:
                continue
            workers += [build.worker_view(snap, s, ":all-time", _sys(sys))
                        for s in build.worker_slots(snap) if s["node"] in ids]
        return {"supervisors": rows, "workers": workers, "schedulerDisplayResource": False}

    # ------------------------------------------------------------------ topologies

    @router.get("/topology/summary", response_model=models.TopologySummary, dependencies=read)
    def topology_summary() -> dict[str, Any]:
        """Every topology: id, name, status, uptime, tasks, workers, executors."""
        from gale.nimbus import views

        rows = []
        for t in views.topology_list(nimbus):
            try:
                replication = max(1, len(nimbus.state.blob_holders(t["id"])))
            except Exception:  # noqa: BLE001 - display only
                replication = 1
            rows.append(build.topology_summary_row(t, replication))
        return {"topologies": rows, "schedulerDisplayResource": False}

    @router.get("/topology-workers/{id}", response_model=models.TopologyWorkers, dependencies=read)
    def topology_workers(id: str = TOPOLOGY_ID) -> dict[str, Any]:
        """host:port of every worker of a topology."""
        snap = build.gather(nimbus, id, components=())
        return {"hostPortList": [{"host": s["host"], "port": s["port"]} for s in build.worker_slots(snap)],
                "logviewerPort": None}

    @router.get("/topology/{id}", response_model=models.TopologyPage, dependencies=read)
    def topology(id: str = TOPOLOGY_ID, window: str = WINDOW, sys: str = SYS) -> dict[str, Any]:
        """A topology: stats per window, spouts, bolts (with their last error), workers, configuration."""
        return build.topology_view(build.gather(nimbus, id), window, _sys(sys))

    @router.get("/topology/{id}/metrics", response_model=models.TopologyMetrics, dependencies=read)
    def topology_metrics(id: str = TOPOLOGY_ID, window: str = WINDOW, sys: str = SYS) -> dict[str, Any]:
        """Per-stream emitted/transferred/acked/failed/latencies of every component."""
        return build.topology_metrics_view(build.gather(nimbus, id, components=()), window, _sys(sys))

    @router.get("/topology/{id}/visualization", dependencies=read)
    def visualization(id: str = TOPOLOGY_ID, window: str = WINDOW, sys: str = SYS) -> dict[str, Any]:
        """The topology as a graph (Storm UI's visualization): components placed left to right with what
        they are and their figures, subscriptions with cumulative counts (the page draws live rates)."""
        from gale.nimbus.graph_view import visualization as draw

        return draw(build.gather(nimbus, id), window, _sys(sys))

    @router.get("/topology/{id}/component/{component}", response_model=models.ComponentPage, dependencies=read)
    def component(id: str = TOPOLOGY_ID, component: str = Path(min_length=1, max_length=256),
                  window: str = WINDOW, sys: str = SYS) -> dict[str, Any]:
        """A component: stats per window, input/output stats, executors (where they run), last 10 errors."""
        snap = build.gather(nimbus, id, components=[component])
        return build.component_view(snap, component, window, _sys(sys))

    # ------------------------------------------------------------------ actions

    def done(action: str, tid: str) -> dict[str, Any]:
        return {"topologyOperation": action, "topologyId": tid, "status": "success"}

    @router.post("/topology/{id}/activate", response_model=models.OperationResult, dependencies=write)
    async def activate(id: str = TOPOLOGY_ID) -> dict[str, Any]:
        """Activate the topology's spouts."""
        return done("activate", await _in_thread(nimbus.activate, id))

    @router.post("/topology/{id}/deactivate", response_model=models.OperationResult, dependencies=write)
    async def deactivate(id: str = TOPOLOGY_ID) -> dict[str, Any]:
        """Deactivate the topology's spouts (bolts keep draining in-flight tuples)."""
        return done("deactivate", await _in_thread(nimbus.deactivate, id))

    @router.post("/topology/{id}/rebalance/{wait_time}", response_model=models.OperationResult, dependencies=write)
    async def rebalance(id: str = TOPOLOGY_ID, wait_time: int = WAIT_TIME,
                        body: models.RebalanceBody | None = Body(default=None)) -> dict[str, Any]:
        """Pause the spouts for wait-time seconds, then re-plan (optionally with new worker/executor counts)."""
        opts = (body or models.RebalanceBody()).rebalanceOptions
        tid = await _in_thread(nimbus.rebalance, id, wait_time, opts.numWorkers, dict(opts.executors), dict(opts.tasks))
        return done("rebalance", tid)

    @router.post("/topology/{id}/kill/{wait_time}", response_model=models.OperationResult, dependencies=write)
    async def kill(id: str = TOPOLOGY_ID, wait_time: int = WAIT_TIME) -> dict[str, Any]:
        """Deactivate the spouts now and remove the topology after wait-time seconds."""
        return done("kill", await _in_thread(nimbus.kill, id, wait_time))

    return router


def install(app: FastAPI, nimbus: Nimbus) -> None:
    app.include_router(make_router(nimbus))
