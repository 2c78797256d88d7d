"""The exactly-once layer of a data spout's executor (``topology.state.guarantee: exactly-once``).

Each task has a :class:`~gale.worker.state.epochs.SourceTask` (the pure protocol). The epochs reach
it in band: the checkpoint coordinator sends each one to every source task as a control message
(``gale.worker.runtime.executor``, ``CONTROL``), on the path of the acker's verdicts; the task
answers with its report the same way, to the coordinator's task. Nothing is polled: the provider
keeps only what must survive — the staged and committed positions (and the coordinator's record).

* The task is asked for tuples (``next_tuple``) only while its source task says it may emit; its
  root ids carry its generation (the collector stamps them).
* A failed or timed-out tree stops the task and asks for a rollback (the spout's ``fail`` is not
  called: it rewinds instead); so does ``collector.rewind_needed()`` (a Kafka consumer group moved
  partitions).
* On PAUSING it drains — waits until every tree of the task is complete — then stages its position
  as part of the checkpoint and reports "paused"; on ROLLING_BACK it drops its pending trees, rewinds
  to the committed position and reports "rewound".
* A task that starts says hello, so the coordinator sends it the epoch at once.
"""

from __future__ import annotations

from typing import Any

from gale.log import get_logger
from gale.topology.components import can_rewind
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.worker.state.epochs import (
    PAUSING,
    Epoch,
    epoch_order,
    Report,
    Rewind,
    SourceTask,
    StagePosition,
    WriteReport,
    read_control,
    report_message,
)
from gale.worker.state.exactly_once import committed_position, position_changes, source_namespace

log = get_logger("checkpoint")


def _idle() -> None:
    """``next_tuple`` of a source task that must not emit now."""


class ExactlyOnceSource:
    """See the module docstring."""

    name = "exactly-once-source"

    def __init__(self, executor: Any):
        self.executor = executor
        self.sources: dict[int, SourceTask] = {}
        self.epoch: Epoch | None = None  # the last epoch received
        self.draining: set[int] = set()  # tasks waiting for their trees to complete before reporting "paused"
        self.hello = True  # the tasks say hello at their first round
        self.cannot_rewind = False

    def attach(self) -> None:
        ex = self.executor
        ex.preparers.append(self.prepare)
        ex.afters.append(self.after_round)
        ex.on_fail = self.tree_failed
        ex.on_rewind = self.tree_failed
        ex.layers[self.name] = self

    def prepare(self) -> None:
        """After the spouts were opened: every task waits for its first epoch."""
        ex = self.executor
        runtime = ex.runtime
        self.provider = runtime.resources["state"]
        self.prefix = runtime.resources["state_prefix"]
        self.coordinator = runtime.layout.component_tasks(CHECKPOINT_COMPONENT)[0]
        all_tasks = runtime.layout.component_tasks(ex.component)
        self.namespaces = {task: source_namespace(self.prefix, ex.component, all_tasks.index(task))
                           for task in ex.tasks}
        self.all_namespaces = [source_namespace(self.prefix, ex.component, i) for i in range(len(all_tasks))]
        self.user_next = dict(ex.next_tuple)
        for task in ex.tasks:
            self.sources[task] = SourceTask()
            ex.next_tuple[task] = _idle
            ex.control[task] = lambda payload, task=task: self.on_control(task, payload)
        spout = ex.spouts[ex.tasks[0]]
        if not can_rewind(type(spout)):  # refused at submit (the definition says so); a guard for older ones
            self.cannot_rewind = True
            ex.report_error(
                f"spout {ex.component!r} ({type(spout).__qualname__}) cannot rewind (it does not override position() "
                "and rewind()), so topology.state.guarantee exactly-once cannot hold: it emits nothing; use "
                "at-least-once, or implement both methods (docs/state.md)")

    # --- in band
    def on_control(self, task: int, payload: tuple) -> None:
        epoch = read_control(payload)
        if not isinstance(epoch, Epoch):
            raise ValueError(f"source task {task} was sent a report: {payload!r}")
        if self.cannot_rewind:
            return
        if self.epoch is None or epoch_order(epoch) > epoch_order(self.epoch):
            self.epoch = epoch  # (a late copy of an older epoch is not taken back to)
        self._observe(task, resend=True)

    def _send_report(self, task: int, report: Report | None) -> None:
        self.executor.runtime.send_control(self.coordinator, report_message(task, report))

    def after_round(self) -> None:
        if self.hello and not self.cannot_rewind:
            self.hello = False
            for task in self.executor.tasks:
                self._send_report(task, None)
        if self.draining and self.epoch is not None:
            for task in sorted(self.draining):
                if not self._pending_of(task):
                    # the task's last tree of a pause completed (its ack arrived this round): report
                    # at once — the whole topology waits for the last source to report
                    self._observe(task)

    def tree_failed(self, task: int, msg_id: Any = None) -> None:
        """A tree of ``task`` failed or timed out (or its source moved): stop; ask for a rollback."""
        self.sources[task].tree_failed()
        self.executor.next_tuple[task] = _idle
        if self.epoch is not None:
            self._observe(task)

    # --- the protocol
    def _pending_of(self, task: int) -> int:
        ex = self.executor
        if len(ex.tasks) == 1:
            return len(ex.pending)
        return sum(1 for _, info in ex.pending.items() if info[0] == task)

    def _observe(self, task: int, resend: bool = False) -> None:
        ex = self.executor
        epoch = self.epoch
        source = self.sources[task]
        pending = self._pending_of(task) if epoch.phase == PAUSING else 0
        wrote = False
        for action in source.observe(epoch, pending):
            try:
                self._perform(task, action)
            except Exception as exc:  # noqa: BLE001 - the provider, or the spout's position/rewind
                source.action_failed()
                ex.report_error(f"exactly-once: {type(action).__name__} of task {task} failed: {exc}")
                break
            wrote = wrote or isinstance(action, WriteReport)
        if resend and not wrote and source.report is not None:
            self._send_report(task, source.report)  # the coordinator may not have it (a worker died)
        ex.next_tuple[task] = self.user_next[task] if source.emitting else _idle
        ex.collectors[task]._generation = source.generation
        paused = Report(epoch.generation, paused=epoch.txid)
        if epoch.phase == PAUSING and source.report != paused and source.generation == epoch.generation \
                and not source.failed:
            self.draining.add(task)
        else:
            self.draining.discard(task)

    def _perform(self, task: int, action: Any) -> None:
        ex = self.executor
        spout = ex.spouts[task]
        ns = self.namespaces[task]
        if isinstance(action, Rewind):
            for root in [r for r, info in ex.pending.items() if info[0] == task]:
                ex.pending.pop(root)  # their acks and fails are ignored from now on
            # what this task staged for a checkpoint that did not commit must go: the checkpoint after
            # the rollback reuses its txid, and a task with nothing to stage then (a Kafka task owning
            # no partition) would leave the old, later positions to be committed with it
            self.provider.rollback([ns])
            merge = bool(getattr(spout, "merge_positions", False))
            position = committed_position(self.provider, list(self.all_namespaces) if merge else [ns], merge)
            ex.enter_call()
            try:
                spout.rewind(position)
            finally:
                ex.leave_call()
            log.info("source-rewound", component=ex.component, task=task, txid=action.txid, position=position)
        elif isinstance(action, StagePosition):
            ex.enter_call()
            try:
                position = spout.position()
            finally:
                ex.leave_call()
            self.provider.prepare(action.txid, {ns: (position_changes(ex.component, spout, position, action.txid), ())})
        elif isinstance(action, WriteReport):
            self._send_report(task, action.report)

