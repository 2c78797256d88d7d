"""Shared Prometheus plumbing for every Gale daemon and worker (``gale.metrics``).

Each process exports its own :class:`~prometheus_client.CollectorRegistry` (never the process-global
one); nimbus, supervisors and workers all make theirs with :func:`new_registry`. It lives here, in
the foundation, so that workers and supervisors need not import nimbus (and FastAPI) for it.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)


def new_registry() -> CollectorRegistry:
    """A daemon's own registry with the process, platform and GC collectors.

    Counters' ``*_created`` series are switched off (a process-wide exposition setting): Prometheus
    does not need them and they double the series count.
    """
    disable_created_metrics()
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
