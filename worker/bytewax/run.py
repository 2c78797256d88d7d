"""Running a Bytewax dataflow in this process until its input ends: ``run_main`` and ``cluster_main``.

The dataflow becomes a topology (``gale.bytewax.topology``) run in local mode (one process, every
component with the dataflow's worker count as parallelism), with its component classes bound to the
dataflow object, so a dataflow made inside a function runs too. The run ends as Bytewax's does:

* when every task of every step has seen the end of its input (a bounded input ran out);
* when a source raised ``AbortExecution`` (every input stops; what was read is processed);
* when user code raised: the run stops and ``RuntimeError`` (Bytewax's ``BytewaxRuntimeError``) is
  raised naming the step, with the user's exception as its cause — Bytewax stops a dataflow on the first error (a topology on a cluster
  reports the error on the component and fails the tuple, so it replays, instead).

With a ``RecoveryConfig`` the state is checkpointed to a SQLite file in its directory, exactly once
(every ``epoch_interval``), and a last checkpoint is committed before the run returns, so the next
run with the same directory resumes where this one ended: after the end of a bounded input, or at
the item that aborted.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from gale.bytewax.plan import plan_flow
from gale.bytewax.topology import RECOVERY, WORKERS, build_definition
from gale.errors import GaleError
from gale.topology.checkpointing import has_checkpointing
from gale.topology.definition import Topology
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.worker.bytewax import components
from gale.worker.bytewax.monitor import MONITOR, RunMonitor
from gale.worker.state.sqlite_provider import FILE_NAME

#: the shortest checkpoint interval a run takes (Bytewax accepts a zero epoch interval)
MIN_INTERVAL_MS = 10
_CLASSES = {f"{components.__name__}:{name}": getattr(components, name) for name in (
    "FixedInput", "DynamicInput", "Step", "Stateful", "ManagedStateful", "PartitionedOutput",
    "ManagedPartitionedOutput")}


def flow_conf(workers: int = 1, epoch_interval: timedelta | None = None, recovery_config: Any = None,
              conf: dict | None = None) -> dict[str, Any]:
    """The topology configuration of a run: the worker count, and Bytewax's recovery as Gale's."""
    out: dict[str, Any] = {WORKERS: int(workers)}
    if epoch_interval is not None:
        out["topology.state.checkpoint.interval.ms"] = max(MIN_INTERVAL_MS, int(epoch_interval.total_seconds() * 1000))
    if recovery_config is not None:
        out[RECOVERY] = True
        out["topology.state.provider"] = "sqlite"
        db_dir = Path(recovery_config.db_dir)  # a directory, as Bytewax's (made when missing)
        db_dir.mkdir(parents=True, exist_ok=True)
        out["topology.state.sqlite.path"] = str(db_dir / FILE_NAME)
    out.update(conf or {})
    return out


def bound_topology(flow: Any, conf: dict[str, Any], name: str | None = None) -> Topology:
    """The topology of ``flow`` with its component classes bound to the dataflow object."""
    defn = build_definition(plan_flow(flow), "", conf, name)
    classes = {}
    for cid, comp in defn.components.items():
        base = _CLASSES.get(comp.class_path)
        if base is not None:
            classes[cid] = type(base.__name__, (base,), {"bound_flow": flow})
    return Topology(defn, classes)


class FlowRun:
    """A dataflow's topology running in this process (module docstring): :meth:`start`, then
    :meth:`wait` until it ended (or a deadline), then :meth:`stop`; ``running`` is the local topology
    (its statistics and errors)."""

    def __init__(self, topology: Topology, name: str | None = None, overrides: dict[str, Any] | None = None):
        from gale.worker.local import LocalTopology, local_conf

        self.topology = topology
        self.monitor = RunMonitor()
        self.running = LocalTopology(name or topology.name or "bytewax", topology, local_conf(topology, overrides),
                                     start=False)
        self.running.runtime.resources[MONITOR] = self.monitor
        # the checkpoint coordinator's clock (gale.worker.assembly: resources["clock"]), moved on by a
        # checkpoint interval when the run wants its last checkpoints now rather than an interval later
        self.skew = 0.0
        self.running.runtime.resources["clock"] = lambda: time.monotonic() + self.skew
        self.components = {cid for cid, comp in topology.definition.components.items() if comp.class_path in _CLASSES}
        self.tasks = {t for cid in self.components for t in self.running.layout.component_tasks(cid)}

    def start(self) -> None:
        self.running.runtime.start(active=True)

    def ended(self) -> bool:
        monitor = self.monitor
        return monitor.error is not None or bool(monitor.aborted_tasks) or monitor.ended_tasks >= self.tasks

    def wait(self, timeout: float | None = None, stop: Any = None) -> bool:
        """Until the input ended, a source aborted or user code raised (then a last checkpoint with
        recovery, or until what was read is processed after an abort); False when ``timeout`` passed or
        ``stop`` (an Event) was set first. Raises the first user error as ``RuntimeError``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        monitor = self.monitor
        while not monitor.wait(self.ended, 0.1):
            if (deadline is not None and time.monotonic() > deadline) or (stop is not None and stop.is_set()):
                return False
        self._raise_failure()
        if monitor.aborted_tasks:
            monitor.halted = True  # every input stops where it is
        if has_checkpointing(self.topology.definition):
            self._last_checkpoint(deadline)
        elif monitor.aborted_tasks:
            self._until(self._quiet, deadline)
        self._raise_failure()
        return True

    def stop(self) -> None:
        self.running.kill()

    def _until(self, done: Any, deadline: float | None) -> None:
        monitor = self.monitor
        while not monitor.wait(lambda: monitor.error is not None or done(), 0.005):
            if deadline is not None and time.monotonic() > deadline:
                raise GaleError("the dataflow did not end in time")

    def _raise_failure(self) -> None:
        if self.monitor.error is not None:
            step_id, exc = self.monitor.error
            from bytewax.errors import BytewaxRuntimeError

            raise BytewaxRuntimeError(str(exc) if step_id in str(exc) else f"{exc} (step {step_id!r})") from exc

    def _quiet(self) -> bool:
        """Nothing in flight: no tuple waiting in a queue of a step, no tree of an input pending."""
        return all(ex.queued() == 0 and ex.pending_count() == 0
                   for ex in self.running.runtime.executors.values() if ex.component in self.components)

    def _last_checkpoint(self, deadline: float | None) -> None:
        """Wait for a checkpoint started after the end (or abort): one more than any in progress now.
        Each starts at once, not an interval after the one before (Bytewax snapshots at the end too):
        the coordinator's clock moves on by an interval now and after each commit."""
        coordinator = next(ex for ex in self.running.runtime.executors.values() if ex.component == CHECKPOINT_COMPONENT)
        interval = self.running.runtime.config.topology_state_checkpoint_interval_ms / 1000.0

        def committed() -> int:
            return int(coordinator.stats.extra.get("checkpoints_committed", 0))

        seen = committed()
        target = seen + 2
        self.skew += interval
        while committed() < target:
            self._until(lambda: committed() > seen, deadline)
            seen = committed()
            self.skew += interval


def run_topology(topology: Topology, timeout: float | None = None) -> None:
    """Run a dataflow's topology here until it ends; raise its first error."""
    run = FlowRun(topology)
    try:
        run.start()
        if not run.wait(timeout):
            raise GaleError(f"the dataflow did not end within {timeout} s")
    finally:
        run.stop()


def _checked_topology(flow: Any, conf: dict[str, Any]) -> Topology:
    """The dataflow's topology; a dataflow Gale refuses raises as Bytewax's entry points raise
    (``BytewaxRuntimeError``), the refusal (naming the step) as its message and cause."""
    from gale.errors import TopologyError

    try:
        return bound_topology(flow, conf)
    except TopologyError as exc:
        from bytewax.errors import BytewaxRuntimeError

        raise BytewaxRuntimeError(str(exc)) from exc


def run_main(flow: Any, *, epoch_interval: timedelta | None = None, recovery_config: Any = None) -> None:
    """``bytewax.testing.run_main`` on Gale: run ``flow`` in this process with one worker."""
    run_topology(_checked_topology(flow, flow_conf(1, epoch_interval, recovery_config)))


def cluster_main(flow: Any, addresses: list[str], proc_id: int, *, epoch_interval: timedelta | None = None,
                 recovery_config: Any = None, worker_count_per_proc: int = 1) -> None:
    """``bytewax.testing.cluster_main`` on Gale: run ``flow`` here with ``worker_count_per_proc`` tasks
    per step (its parallelism). Gale's cluster is nimbus and supervisors (``nimbus submit``), so
    ``addresses`` of other processes are refused."""
    if addresses and len(addresses) > 1:
        raise GaleError(
            f"cluster_main was given {len(addresses)} process addresses; Gale runs a dataflow over several "
            "processes as a topology on its cluster: nimbus submit <file.py> -c topology.workers=N")
    if proc_id not in (0, None):
        raise GaleError(f"cluster_main: proc_id {proc_id} of a single process; use 0")
    run_topology(_checked_topology(flow, flow_conf(worker_count_per_proc, epoch_interval, recovery_config)))
