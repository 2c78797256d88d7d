"""``$checkpointspout``: the shell of the checkpoint :class:`Coordinator`.

It reads the recorded transaction state (the provider's meta record ``<topology>/__state``) at its
first ``next_tuple``, then feeds the coordinator the clock on every ``next_tuple`` and the acks and fails of its
checkpoint tuples, and performs what comes out: :class:`Save` writes the record (before the emit
that follows it), :class:`Emit` sends ``(txid, action)`` on ``$checkpoint`` with the message id
``(txid, action)``. A failed save counts as a failed step (recovery, retried with a delay).
"""

from __future__ import annotations

import json
import time
from typing import Any

from gale.config import as_config
from gale.log import get_logger
from gale.topology.checkpointing import EXACTLY_ONCE
from gale.topology.components import Spout
from gale.topology.state import CHECKPOINT_FIELDS, CHECKPOINT_STREAM
from gale.worker.state.coordinator import Committed, Coordinator, Emit, Save, TxState
from gale.worker.state.liveness import Incarnations

log = get_logger("checkpoint")


class CoordinatorShell:
    """What the shells of both coordinators (at-least-once here, exactly-once in
    :mod:`gale.worker.state.exactly_once`) do alike: the acks and fails of their checkpoint tuples,
    the emit of one, and the figures of a commit. A shell has ``coordinator``, ``collector``,
    ``_levels``, ``_now`` and ``_perform``."""

    coordinator: Any
    collector: Any
    _levels: dict
    incarnations: Incarnations

    def _watch_restarts(self, context: Any) -> None:
        """Know the bolt tasks whose hellos (``gale.worker.state.liveness``) tell of restarts."""
        bolts = set(context.resources.get("bolt_components", ()))
        self.incarnations = Incarnations({t for t, c in context.task_to_component.items() if c in bolts})
        self.collector.declare_metrics(["checkpoint_task_restarts"])

    def _restarted(self, payload: tuple) -> bool:
        """A bolt executor's hello: True when it was restarted since its last one (logged, counted)."""
        tasks = self.incarnations.hello(payload)
        if tasks is None:
            return False
        self.collector.incr_metric("checkpoint_task_restarts")
        log.warning("checkpoint-task-restarted", tasks=f"{tasks[0]}-{tasks[1]}", note="recovering now")
        return True

    def ack(self, msg_id: Any) -> None:
        txid, action = msg_id
        self._perform(self.coordinator.acked(txid, action, self._now()))

    def fail(self, msg_id: Any) -> None:
        txid, action = msg_id
        if self.coordinator.in_flight == (txid, action):
            self.collector.incr_metric("checkpoint_failures")
            log.warning("checkpoint-failed", txid=txid, action=action)
        self._perform(self.coordinator.failed(txid, action, self._now()))

    def _emit_checkpoint(self, txid: int, action: str) -> None:
        self.collector.emit([txid, action], msg_id=(txid, action), stream=CHECKPOINT_STREAM)

    def _committed(self, txid: int, duration: float) -> None:
        self.collector.incr_metric("checkpoints_committed")
        self._levels["checkpoint_txid_max"] = txid
        self._levels["checkpoint_duration_ms"] = round(duration * 1000.0, 3)
        self._levels["checkpoint_commit_time_secs"] = round(time.time(), 3)

    def _perform(self, actions: list) -> None:  # pragma: no cover - each shell's own
        raise NotImplementedError

    def _now(self) -> float:  # pragma: no cover - each shell's own
        raise NotImplementedError


class CheckpointSpout(CoordinatorShell, Spout):
    def __init__(self, clock: Any = None):
        #: the clock: given here (tests), else the worker's (``context.resources["clock"]``), so a
        #: runtime on a simulated clock checkpoints on it
        self._clock = clock

    def declare_output_fields(self, declarer) -> None:
        declarer.declare_stream(CHECKPOINT_STREAM, list(CHECKPOINT_FIELDS))

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self._now = self._clock or context.resources.get("clock") or time.monotonic
        config = as_config(conf, "topology configuration")
        if config.topology_state_guarantee == EXACTLY_ONCE:
            from gale.worker.state.exactly_once import ExactlyOnceCheckpointer

            collector.declare_metrics(["checkpoints_committed", "checkpoint_failures", "checkpoint_rollbacks"])
            self._eo = ExactlyOnceCheckpointer(self, config, context, collector, self._now)
            self._eo._watch_restarts(context)
            self.next_tuple, self.ack, self.fail = self._eo.next_tuple, self._eo.ack, self._eo.fail
            return
        self.provider = context.resources["state"]
        prefix = context.resources["state_prefix"]
        self.meta_name = f"{prefix}/__state"
        self.coordinator = Coordinator(config.topology_state_checkpoint_interval_ms / 1000.0)
        collector.declare_metrics(["checkpoints_committed", "checkpoint_failures"])
        # levels (latest values) beside the counters; gale's own component, so it may hold the dict
        self._levels = collector._stats.extra
        self._opened = False
        self._retry_at = float("-inf")
        self._watch_restarts(context)

    def attach_control(self, send: Any) -> None:
        """The way to the source tasks, ``send(task, payload)`` (exactly-once: its epochs go to them
        as control messages; an at-least-once coordinator sends none)."""
        eo = getattr(self, "_eo", None)
        if eo is not None:
            eo.attach_control(send)

    def on_control(self, payload: tuple) -> None:
        """A control message for this task: a bolt executor's hello, or (exactly-once) a source
        task's report."""
        eo = getattr(self, "_eo", None)
        if eo is not None:
            eo.on_control(payload)
        elif self._restarted(payload) and self._opened:
            self._perform(self.coordinator.restarted(self._now()))

    def _start(self) -> None:
        now = self._now()
        if now < self._retry_at:
            return
        try:
            raw = self.provider.get_meta(self.meta_name)
            saved = TxState.from_record(json.loads(raw) if raw else None)
        except Exception as exc:  # noqa: BLE001 - provider unreachable, record unreadable
            self.collector.report_error(f"cannot read the checkpoint state {self.meta_name}: {exc}")
            self._retry_at = now + self.coordinator.interval  # not on every next_tuple call
            return
        self._opened = True
        log.info("checkpoint-recovery", txid=saved.txid, state=saved.phase)
        self._perform(self.coordinator.start(saved, self._now()))

    def next_tuple(self) -> None:
        if not self._opened:
            self._start()
            return
        self._perform(self.coordinator.tick(self._now()))

    def _perform(self, actions: list) -> None:
        while actions:
            action, actions = actions[0], actions[1:]
            if isinstance(action, Save):
                try:
                    self.provider.put_meta(self.meta_name, json.dumps(action.state.to_record()).encode())
                except Exception as exc:  # noqa: BLE001 - the provider is unreachable
                    self.collector.report_error(f"cannot record checkpoint state {action.state}: {exc}")
                    self.collector.incr_metric("checkpoint_failures")
                    actions = self.coordinator.save_failed(self._now())
            elif isinstance(action, Emit):
                self._emit_checkpoint(action.txid, action.action)
            elif isinstance(action, Committed):
                self._committed(action.txid, action.duration)
