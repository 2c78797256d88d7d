"""What every Bytewax component shares (``gale.worker.bytewax.components``): its core step found in
the dataflow, its outlets, its epoch, and how it tells the run (a ``RunMonitor``, in one process) and
the statistics (``bytewax_ended_tasks``) that its input ended or user code failed."""

from __future__ import annotations

import time
from typing import Any

from gale.bytewax.plan import find_core_step
from gale.config import as_config
from gale.worker.bytewax.flows import resolve_flow
from gale.worker.bytewax.monitor import MONITOR
from gale.worker.bytewax.outlets import Outlets


class FlowComponent:
    """What every Bytewax component shares: its core step, its outlets, the end of its input."""

    #: the dataflow, when the class is bound to it in this process (``run_main``)
    bound_flow: Any = None

    def __init__(self, flow: str = "", step: str = "", edges: list | None = None, inputs: list | None = None):
        self.flow_ref = flow
        self.step_id = step
        self.edges = edges or []
        self.inputs = inputs or []

    def _setup(self, conf: dict, context: Any) -> None:
        flow = self.bound_flow if self.bound_flow is not None else resolve_flow(self.flow_ref)
        self.op, self.ancestors = find_core_step(flow, self.step_id)
        config = as_config(conf, "topology configuration")
        self.config = config
        groups = int(config.topology_state_key_groups)
        self.outlets = Outlets(self.edges, context, groups, self.step_id)
        for outlet in self.outlets.all:
            if outlet.kind == "part":
                to_op, _ = find_core_step(flow, outlet.to)
                outlet.bind_sink(to_op.sink)
        self.task_id = context.task_id
        self.index = context.this_task_index
        self.count = len(context.this_component_tasks)
        self.monitor = context.resources.get(MONITOR)
        self.ended = False
        self.counted_end = False
        self.started = time.monotonic()
        recovery = config.topology_bytewax_recovery
        self.epoch_secs = config.topology_state_checkpoint_interval_ms / 1000.0 if recovery else 10.0
        # the inputs' ends still to come: (source stream key, source task)
        self.expected = frozenset((f"{producer}:{stream}", task) for producer, stream in self.inputs
                                  for task in context.component_tasks(producer))
        self.seen_ends: set[tuple[str, int]] = set()

    @property
    def epoch(self) -> int:
        return 1 + int((time.monotonic() - self.started) / self.epoch_secs)

    def _failed(self, exc: BaseException) -> None:
        if self.monitor is not None:
            self.monitor.failed(self.step_id, exc)

    def _finished(self) -> None:
        if not self.counted_end:  # a task is counted once, however often its input ends (rollbacks)
            self.counted_end = True
            self.collector.incr_metric("bytewax_ended_tasks")
        self.ended = True
        if self.monitor is not None:
            self.monitor.ended(self.step_id, self.task_id)
