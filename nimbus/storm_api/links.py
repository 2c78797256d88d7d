"""Links from the UI's pages to the log viewer (``/logs.html``): a worker's log on its supervisor,
opened where an executor or an error logged (the page searches for the text and shows its last match)."""

from __future__ import annotations

import json
import urllib.parse
from typing import TYPE_CHECKING

from gale.daemon_util import WORKER_LOG, worker_artifacts
from gale.records import ErrorInfo

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.storm_api.build import TopologySnapshot


def worker_log_file(topology_id: str, port: int) -> str:
    """A worker's log, named as its supervisor's log server names it."""
    return f"{worker_artifacts(topology_id, port)}/{WORKER_LOG}"


def log_viewer_link(topology_id: str, node: str | None, port: int | None, search: str | None = None) -> str:
    """The UI's log viewer on a worker's log (on supervisor ``node``), opened at ``search``'s last match."""
    if not node or not port:
        return ""
    query = {"supervisor": node, "file": worker_log_file(topology_id, port)}
    if search:
        query["search"] = search
    return "/logs.html?" + urllib.parse.urlencode(query)


def json_text(text: str) -> str:
    """``text`` as it appears inside a JSON log line (worker logs are JSON: search for this)."""
    return json.dumps(text)[1:-1]


def _node_for(snap: TopologySnapshot, host: str, port: int) -> str | None:
    """The supervisor id of the slot ``host:port`` (live workers first, then the assignment)."""
    for _st, node, p, worker in snap.stats.values():
        if p == port and worker.get("host") == host:
            return node
    host_of = snap.assignment.node_host if snap.assignment else {}
    for node, p in snap.placements.values():
        if p == port and host_of.get(node, node) == host:
            return node
    return None


def error_log_link(snap: TopologySnapshot, e: ErrorInfo) -> str:
    """The log viewer at an error's line: its message's last line, as the worker logged it."""
    last = (e.error.strip().splitlines() or [""])[-1][:120]
    return log_viewer_link(snap.id, _node_for(snap, e.host, e.port), e.port, json_text(last) if last else None)
