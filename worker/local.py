"""Local mode: run a topology inside one process (Storm's LocalCluster), and a testing helper.

::

    from gale.worker.local import LocalCluster
    with LocalCluster() as cluster:
        running = cluster.submit_topology("wc", {"topology.max.spout.pending": 1000}, topology)
        time.sleep(10)
        print(running.component_stats())

:func:`complete_topology` feeds fixed input through a topology (its spouts replaced by ones that
emit the given tuples with message ids) and returns every emitted tuple per component and stream,
once every input tuple tree has been acked or failed (Storm's ``Testing.completeTopology``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from gale import config as gconfig
from gale.config import as_config
from gale.clock import REAL_CLOCK
from gale.errors import GaleError
from gale.records import ExecutorStats
from gale.stats_summary import component_summary
from gale.topology.composition import validate_composition
from gale.topology.definition import Topology, TopologyDef, TopologyTasks
from gale.topology.components import Spout
from gale.worker.assembly import Assembly
from gale.worker.runtime.runtime import WorkerRuntime


def local_conf(topology: Topology, overrides: Mapping[str, Any] | None = None,
               cluster: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults ← the cluster's configuration ← the topology's ← ``overrides`` (a submit's), validated:
    nimbus's order (a topology's own keys win over the cluster's)."""
    base = {**gconfig.defaults(), **(cluster or {})}
    conf = gconfig.topology_config(base, {**topology.conf, **(overrides or {})})
    validate_composition(topology.definition, conf)
    return conf


class LocalTopology:
    """One topology running in this process."""

    def __init__(self, name: str, topology: Topology, conf: dict[str, Any], clock: Any = REAL_CLOCK,
                 capture: Any = None, threads: int | None = None, start: bool = True, spawn: bool = True,
                 factory: Any = None):
        self.name = name
        self.topology = topology
        self.conf = conf
        workers = int(as_config(conf, "topology configuration").topology_workers)
        self.layout = TopologyTasks(topology.definition, conf, workers)
        self.runtime = WorkerRuntime(
            topology,
            topology_id=f"{name}-local",
            conf=conf,
            layout=self.layout,
            executors=self.layout.executors,
            clock=clock,
            capture=capture,
            code_dir=topology.code_dir or "",
            factory=factory if factory is not None else Assembly(),
        )
        self.started = time.monotonic()
        if start:
            self.runtime.start(active=True, threads=threads, spawn=spawn)

    def activate(self) -> None:
        self.runtime.set_active(True)

    def deactivate(self) -> None:
        self.runtime.set_active(False)

    def kill(self) -> None:
        self.runtime.stop()

    def executor_stats(self) -> dict[str, ExecutorStats]:
        self.runtime.roll_stats()
        return self.runtime.executor_stats()

    def component_stats(self, window: str = ":all-time") -> dict[str, dict[str, Any]]:
        return component_summary(self.executor_stats().values(), window)

    @property
    def errors(self) -> dict[str, list[str]]:
        return self.runtime.errors


class LocalCluster:
    """Run topologies in this process; kill them or shut everything down when done. ``conf`` is the
    cluster's configuration (a daemon config): a topology's own keys override it, and the ``conf``
    given to :meth:`submit_topology` overrides both, as with nimbus."""

    def __init__(self, conf: Mapping[str, Any] | None = None, clock: Any = REAL_CLOCK):
        self.conf = dict(conf or {})
        self.clock = clock
        self.topologies: dict[str, LocalTopology] = {}

    def submit_topology(self, name: str, conf: Mapping[str, Any] | None, topology: Topology,
                        threads: int | None = None) -> LocalTopology:
        if name in self.topologies:
            raise GaleError(f"topology {name!r} is already running in this local cluster")
        effective = local_conf(topology, conf, cluster=self.conf)
        running = LocalTopology(name, topology, effective, self.clock, threads=threads)
        self.topologies[name] = running
        return running

    def kill_topology(self, name: str) -> None:
        running = self.topologies.pop(name, None)
        if running is None:
            raise GaleError(f"no topology named {name!r} in this local cluster")
        running.kill()

    def shutdown(self) -> None:
        for name in list(self.topologies):
            self.kill_topology(name)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# ------------------------------------------------------------------------------- testing helper


class FixedTupleSpout(Spout):
    """Emits a fixed list of value lists, each with its index as message id; never replays."""

    _tracker: _Tracker | None = None

    def __init__(self, tuples: Sequence[Sequence[Any]], stream: str = "default"):
        self.tuples = [list(t) for t in tuples]
        self.stream = stream
        self.acked: list[int] = []
        self.failed: list[int] = []

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        # split the input among this component's tasks
        idx, n = context.this_task_index, len(context.this_component_tasks)
        self._mine = [i for i in range(len(self.tuples)) if i % n == idx]
        self._pos = 0
        if self._tracker is not None:
            self._tracker.expected += len(self._mine)

    def next_tuple(self):
        if self._pos < len(self._mine):
            i = self._mine[self._pos]
            self._pos += 1
            self.collector.emit(self.tuples[i], msg_id=i, stream=self.stream)

    def ack(self, msg_id):
        self.acked.append(msg_id)
        if self._tracker is not None:
            self._tracker.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)
        if self._tracker is not None:
            self._tracker.failed.append(msg_id)


class _Tracker:
    def __init__(self) -> None:
        self.expected = 0
        self.acked: list[int] = []
        self.failed: list[int] = []


class CompleteTopologyResult:
    def __init__(self, emitted: dict[str, dict[str, list[list[Any]]]], acked: list[int], failed: list[int],
                 errors: dict[str, list[str]], stats: dict[str, dict[str, Any]]):
        self.emitted = emitted
        self.acked = sorted(acked)
        self.failed = sorted(failed)
        self.errors = errors
        self.stats = stats

    def read(self, component: str, stream: str = "default") -> list[list[Any]]:
        """Every tuple ``component`` emitted on ``stream``, in emit order."""
        return self.emitted.get(component, {}).get(stream, [])


def complete_topology(
    topology: Topology,
    mock_sources: Mapping[str, Sequence[Sequence[Any]]],
    conf: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> CompleteTopologyResult:
    """Run ``topology`` with its spouts replaced by fixed inputs until every input tuple tree is
    acked or failed; return every emitted tuple per component/stream and the acked/failed ids."""
    defn = topology.definition
    unknown = set(mock_sources) - set(defn.spouts())
    if unknown:
        raise GaleError(f"mock sources for unknown spouts {sorted(unknown)}; spouts are {defn.spouts()}")
    tracker = _Tracker()
    components = {}
    classes = dict(topology.classes)
    for cid, comp in defn.components.items():
        if cid in mock_sources:
            stream = "default" if "default" in comp.streams else sorted(comp.streams)[0]
            components[cid] = comp.model_copy(
                update={"class_path": "gale.worker.local:FixedTupleSpout", "args": [], "kwargs": {}}
            )
            tuples = [list(t) for t in mock_sources[cid]]

            class _Fixed(FixedTupleSpout):
                def __init__(self, _t=tuples, _s=stream):
                    super().__init__(_t, _s)
                    self._tracker = tracker

            classes[cid] = _Fixed
        else:
            components[cid] = comp
            if cid not in classes:
                classes[cid] = topology.component_class(cid)
    mocked = Topology(TopologyDef(name=defn.name, conf=defn.conf, components=components), classes)
    emitted: dict[str, dict[str, list[list[Any]]]] = defaultdict(lambda: defaultdict(list))

    def capture(component: str, stream: str, values: Sequence[Any]) -> None:
        emitted[component][stream].append(list(values))

    effective = local_conf(mocked, conf)
    running = LocalTopology(defn.name or "complete", mocked, effective, capture=capture)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if tracker.expected and len(tracker.acked) + len(tracker.failed) >= tracker.expected:
                break
            time.sleep(0.005)
        else:
            raise GaleError(
                f"complete_topology: {len(tracker.acked) + len(tracker.failed)} of {tracker.expected} input tuples "
                f"completed within {timeout}s"
            )
        stats = running.component_stats()
    finally:
        running.kill()
    return CompleteTopologyResult(
        {c: dict(s) for c, s in emitted.items()}, tracker.acked, tracker.failed, running.errors, stats
    )
