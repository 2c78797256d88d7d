"""Storm UI's debugging actions: event sampling and dynamic log levels (the token, the leader)::

    POST /api/v1/topology/<id>/debug/<enable|disable>/<pct>                     the whole topology
    POST /api/v1/topology/<id>/component/<component>/debug/<enable|disable>/<pct>
    GET  /api/v1/topology/<id>/logconfig
    POST /api/v1/topology/<id>/logconfig   {"namedLoggerLevels": {"ROOT": {"target_level": "DEBUG",
                                            "timeout": 60, "components": ["count"]}}}

Sampling is stored as Storm stores it, in the topology's StormBase (``component_debug``, keyed by
component, or by the topology id for all of its components); the workers follow it
(:mod:`gale.worker.debug.sampling`) and the sampled tuples are read back with
``GET .../component/<component>/events`` (:mod:`gale.nimbus.logs_api`). Log levels are Storm's
``LogConfig`` in ``/storm/logconfigs/<id>``: each logger's level until a time, after which its
workers put the logger's own level back; a ``target_level`` of ``""``/``null`` or a ``timeout`` of 0
clears an entry at once. Bad input — an unknown action, component or level, a percentage outside
(0, 100], a timeout outside 1 to :data:`TIMEOUT_MAX` seconds, a malformed logger name — is refused
with 400 and the reason, before anything is written.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Path

from gale.cluster_state import FencedError
from gale.errors import GaleError
from gale.records import DebugOptions, LogConfig, LoggerLevel, StormBase

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.daemon import Nimbus

TIMEOUT_MAX = 86400
LOGGERS_MAX = 50
LOGGER_NAME = re.compile(r"^(ROOT|[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*)$")
#: log4j's level names (Storm's UI sends them) → Python's
LEVEL_NAMES = {"TRACE": "DEBUG", "DEBUG": "DEBUG", "INFO": "INFO", "WARN": "WARNING", "WARNING": "WARNING",
               "ERROR": "ERROR", "FATAL": "CRITICAL", "CRITICAL": "CRITICAL"}


class DebugRequestError(GaleError):
    """Refused debugging input (400)."""


def sampling_percentage(action: str, spct: str) -> tuple[bool, float]:
    """(enable, percentage) from Storm's path segments, or :class:`DebugRequestError`."""
    if action not in ("enable", "disable"):
        raise DebugRequestError(f"unknown debug action {action!r}: use enable or disable")
    try:
        pct = float(spct)
    except ValueError:
        raise DebugRequestError(f"sampling percentage {spct!r} is not a number") from None
    if action == "disable":
        return False, 0.0
    if not (math.isfinite(pct) and 0 < pct <= 100):
        raise DebugRequestError(f"sampling percentage {spct} is out of range: more than 0 and at most 100")
    return True, pct


def with_debug(base: StormBase, key: str, enable: bool, pct: float) -> StormBase:
    debug = dict(base.component_debug)
    if enable:
        debug[key] = DebugOptions(enable=True, samplingpct=pct)
    else:
        debug.pop(key, None)
    return base.model_copy(update={"component_debug": debug})


def log_config_update(current: LogConfig | None, request: Any, components: set[str], now: float) -> LogConfig:
    """``current`` with the request's entries applied and ended ones dropped (pure)."""
    if not isinstance(request, dict) or not isinstance(request.get("namedLoggerLevels"), dict):
        raise DebugRequestError('send {"namedLoggerLevels": {"<logger>": {"target_level": "DEBUG", "timeout": 60}}}')
    named = request["namedLoggerLevels"]
    if len(named) > LOGGERS_MAX:
        raise DebugRequestError(f"{len(named)} loggers in one request: at most {LOGGERS_MAX}")
    levels = {k: v for k, v in (current.named_logger_level if current else {}).items()
              if v.reset_log_level_timeout_epoch > now}
    for name, entry in named.items():
        if not isinstance(name, str) or not LOGGER_NAME.match(name) or len(name) > 200:
            raise DebugRequestError(f"logger name {name!r} is not ROOT or a dotted logger name (letters, digits, _ and -)")
        if not isinstance(entry, dict):
            raise DebugRequestError(f"logger {name}: expected an object with target_level and timeout")
        level, timeout = entry.get("target_level"), entry.get("timeout", 0)
        if level in (None, "") or timeout == 0:
            levels.pop(name, None)  # clear
            continue
        if not isinstance(level, str) or level.upper() not in LEVEL_NAMES:
            raise DebugRequestError(f"logger {name}: level {level!r} is not one of {', '.join(LEVEL_NAMES)}")
        if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= TIMEOUT_MAX:
            raise DebugRequestError(f"logger {name}: timeout {timeout!r} is out of range: 1 to {TIMEOUT_MAX} seconds")
        scope = entry.get("components") or []
        if not isinstance(scope, list) or not all(isinstance(c, str) for c in scope):
            raise DebugRequestError(f"logger {name}: components must be a list of component names")
        unknown = sorted(set(scope) - components)
        if unknown:
            raise DebugRequestError(f"logger {name}: unknown components {unknown}; the topology's: {', '.join(sorted(components))}")
        levels[name] = LoggerLevel(target_log_level=LEVEL_NAMES[level.upper()], reset_log_level_timeout_epoch=now + timeout,
                                   components=sorted(scope))
    return LogConfig(named_logger_level=levels)


def log_config_view(topology_id: str, config: LogConfig | None, now: float) -> dict[str, Any]:
    """Storm's ``GET .../logconfig`` shape (entries in force), with seconds left and scopes."""
    named = {}
    for name, e in sorted((config.named_logger_level if config else {}).items()):
        if e.reset_log_level_timeout_epoch > now:
            named[name] = {"target_level": e.target_log_level, "timeout_epoch": int(e.reset_log_level_timeout_epoch * 1000),
                           "timeout": max(0, int(e.reset_log_level_timeout_epoch - now)), "components": e.components}
    return {"topologyId": topology_id, "namedLoggerLevels": named}


def make_router(nimbus: Nimbus) -> APIRouter:
    from gale.nimbus.api import ERROR_RESPONSES, _in_thread, token_checks
    from gale.nimbus.daemon import NotLeaderError

    reader, writer = token_checks(nimbus)
    router = APIRouter(prefix="/api/v1", tags=["storm"], responses=ERROR_RESPONSES)
    topology_id = Path(min_length=1, max_length=256, description="topology id (or name)")

    def components_of(tid: str) -> set[str]:
        defn, _ = nimbus.definition(tid)
        return set(defn.components)

    def set_debug(name: str, component: str | None, action: str, spct: str) -> dict[str, Any]:
        enable, pct = sampling_percentage(action, spct)
        tid = nimbus.topology_id(name)
        if component is not None and component not in components_of(tid):
            raise DebugRequestError(f"topology {tid} has no component {component!r}; its components: "
                                    f"{', '.join(sorted(components_of(tid)))}")
        tid, _ = nimbus._update_base(tid, lambda base: with_debug(base, component or tid, enable, pct))
        return {"topologyOperation": "debug", "topologyId": tid, "component": component, "status": "success",
                "debug": enable, "samplingPct": pct}

    @router.post("/topology/{id}/debug/{action}/{spct}", dependencies=[Depends(writer)])
    async def debug_topology(id: str = topology_id, action: str = Path(), spct: str = Path()) -> dict[str, Any]:
        """Sample ``spct`` percent of every component's emits (enable), or stop (disable)."""
        return await _in_thread(set_debug, id, None, action, spct)

    @router.post("/topology/{id}/component/{component}/debug/{action}/{spct}", dependencies=[Depends(writer)])
    async def debug_component(id: str = topology_id, component: str = Path(min_length=1, max_length=256),
                              action: str = Path(), spct: str = Path()) -> dict[str, Any]:
        """Sample ``spct`` percent of a component's emits (enable), or stop (disable)."""
        return await _in_thread(set_debug, id, component, action, spct)

    @router.get("/topology/{id}/logconfig", dependencies=[Depends(reader)])
    def get_log_config(id: str = topology_id) -> dict[str, Any]:
        """The timed log levels in force for the topology's workers."""
        tid = nimbus.topology_id(id)
        return log_config_view(tid, nimbus.state.log_config(tid), nimbus.clock.time())

    def set_log_config(name: str, body: Any) -> dict[str, Any]:
        nimbus.require_leader()
        with nimbus.lock:
            tid = nimbus.topology_id(name)
            now = nimbus.clock.time()
            new = log_config_update(nimbus.state.log_config(tid), body, components_of(tid), now)
            try:
                nimbus.state.set_log_config(tid, new)
            except FencedError:
                nimbus.leader.step_down()
                raise NotLeaderError(None) from None
        return log_config_view(tid, new, now)

    @router.post("/topology/{id}/logconfig", dependencies=[Depends(writer)])
    async def post_log_config(id: str = topology_id, body: Any = Body(default=None)) -> dict[str, Any]:
        """Set (or clear) loggers' levels for a time on the topology's workers (Storm's semantics)."""
        return await _in_thread(set_log_config, id, body)

    return router


def install(app: FastAPI, nimbus: Nimbus) -> None:
    app.include_router(make_router(nimbus))
