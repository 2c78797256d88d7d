"""The shells of exactly-once checkpoints (``topology.state.guarantee: exactly-once``): what the
checkpoint spout does with the pure protocol of :mod:`gale.worker.state.epochs` (read it first;
docs/state.md "Exactly-once"), and the records both it and the sources keep.

* :class:`ExactlyOnceCheckpointer` — the ``$checkpointspout`` task's driver: feeds the
  :class:`EpochCoordinator` the clock, the sources' reports (control messages, in band) and the
  acks of its checkpoint tuples; writes the record, sends each epoch to every source task, emits
  PREPARE/COMMIT/ROLLBACK (their roots carry the generation, which the stateful tasks take from a
  ROLLBACK), commits the sources' positions.
* The sources' side is a layer of their spout executors: :mod:`gale.worker.state.sources`. The
  stateful tasks' side is the checkpoint and state layers (:mod:`gale.worker.state.gate`,
  :mod:`gale.worker.state.managed`): they ack at once (the cut makes held acks unnecessary), a
  ROLLBACK reloads (or first loads) the committed state and sets the task's generation, and data
  tuples of older generations are acked without being executed.

Records in the provider's meta: ``<prefix>/__state`` (the coordinator's) only; a source task's
position of checkpoint ``n`` is staged as ``n`` in the namespace ``<prefix>/<component>/source<task
index>`` (key ``position``) and committed with it.
"""

from __future__ import annotations

import json
from typing import Any

from gale.config_keys import Config
from gale.log import get_logger
from gale.topology.state import StateError, pack, unpack_value
from gale.worker.state.checkpoint_spout import CoordinatorShell
from gale.worker.state.liveness import is_hello
from gale.worker.state.epochs import (
    CommitSources,
    Committed,
    Emit,
    Epoch,
    EpochCoordinator,
    Report,
    RolledBack,
    Save,
    epoch_message,
    newer_report,
    read_control,
)

log = get_logger("checkpoint")

#: how often the coordinator sends the current epoch to every source task again (besides at each
#: change): a message lost with a dead worker, or a source task that restarted, catches up within it
REBROADCAST_SECS = 1.0
#: how long the coordinator waits before reading the record again when the provider is unreachable
RETRY_READ_SECS = 1.0
POSITION_KEY = b"position"
PART_PREFIX = b"part:"  # merged positions: one key per part (a Kafka partition), valued [txid, position]


def state_name(prefix: str) -> str:
    return f"{prefix}/__state"


def source_namespace(prefix: str, component: str, index: int) -> str:
    return f"{prefix}/{component}/source{index}"


def position_changes(component: str, spout: Any, position: Any, txid: int) -> dict[bytes, bytes]:
    """The provider keys a source task stages for checkpoint ``txid``. A spout with
    ``merge_positions`` (its position is a dict of parts a task may hand to another: Kafka's
    partitions) stages one key per part, valued ``[txid, position]``: the parts it does not own now
    keep the value of the checkpoint that last saw them (a partition without an owner at a checkpoint
    must not lose its place), and a rewind takes, per part, the newest over every task."""
    try:
        if getattr(spout, "merge_positions", False):
            if not isinstance(position, dict) or not all(isinstance(k, str) for k in position):
                raise StateError(f"with merge_positions, position() must return a dict with str keys, got {position!r}")
            return {PART_PREFIX + k.encode(): pack([txid, v]) for k, v in position.items()}
        return {POSITION_KEY: pack(position)}
    except StateError as exc:
        raise StateError(f"spout {component!r} position() returned what a checkpoint cannot hold: {exc}") from None


def committed_position(provider: Any, namespaces: list[str], merge: bool) -> Any:
    """The committed position in ``namespaces`` (one task's; or, merged, every task's)."""
    loaded = provider.load(namespaces)
    if not merge:
        raw = loaded.get(namespaces[0], {}).get(POSITION_KEY)
        return unpack_value(raw) if raw is not None else None
    newest: dict[str, tuple[int, Any]] = {}
    for ns in namespaces:
        for key, raw in loaded.get(ns, {}).items():
            if key.startswith(PART_PREFIX):
                txid, value = unpack_value(raw)
                part = key[len(PART_PREFIX):].decode()
                if part not in newest or txid > newest[part][0]:
                    newest[part] = (txid, value)
    return {part: value for part, (_, value) in newest.items()} or None


def read_epoch(provider: Any, prefix: str) -> Epoch:
    raw = provider.get_meta(state_name(prefix))
    return Epoch.from_record(json.loads(raw) if raw else None)


def source_tasks(task_to_component: dict[int, str], spouts: list[str], prefix: str) -> dict[int, str]:
    """Every data spout task → its position namespace."""
    out = {}
    for component in spouts:
        tasks = sorted(t for t, c in task_to_component.items() if c == component)
        for i, t in enumerate(tasks):
            out[t] = source_namespace(prefix, component, i)
    return out


# ------------------------------------------------------------------------------ the coordinator's shell


class ExactlyOnceCheckpointer(CoordinatorShell):
    def __init__(self, spout: Any, config: Config, context: Any, collector: Any, clock: Any):
        self.collector = collector
        self.provider = context.resources["state"]
        self.prefix = context.resources["state_prefix"]
        self._clock = clock
        interval = config.topology_state_checkpoint_interval_ms / 1000.0
        self.coordinator = EpochCoordinator(interval, pause_timeout=float(config.topology_message_timeout_secs),
                                            retry_secs=interval)
        spouts = list(context.resources["source_components"])
        self.sources = source_tasks(dict(context.task_to_component), spouts, self.prefix)
        #: each source task's last report (None: none yet, or it said hello since)
        self.reports: dict[int, Report | None] = {t: None for t in self.sources}
        self._levels = collector._stats.extra
        self._levels.setdefault("checkpoint_generation", 0)
        self.started = False
        self.retry_at = float("-inf")
        self.next_broadcast = float("-inf")
        #: ``send(task, payload)``: a control message to a source task (set by ``attach_control``)
        self.send: Any = None

    def _now(self) -> float:
        return self._clock()

    def attach_control(self, send: Any) -> None:
        self.send = send

    def on_control(self, payload: tuple) -> None:
        """A source task's report (or hello), or a bolt executor's hello."""
        if is_hello(payload):
            if self._restarted(payload):
                self.coordinator.restarted(f"bolt task(s) {payload[1]}-{payload[3]} restarted")
            return
        message = read_control(payload)
        if isinstance(message, Epoch):
            raise ValueError(f"the checkpoint coordinator was sent an epoch: {payload!r}")
        task, report = message
        if task not in self.sources:
            raise ValueError(f"report from task {task}, which is not a source of this topology")
        if newer_report(report, self.reports[task]):
            self.reports[task] = report
        if self.started and (report is None or report.generation != self.coordinator.epoch.generation):
            self._send_epoch(task)  # a task behind the current epoch: tell it now, not at the next broadcast

    def next_tuple(self) -> None:
        now = self._now()
        if not self.started:
            if now < self.retry_at:
                return
            try:
                record = _json(self.provider.get_meta(state_name(self.prefix)))
                saved = Epoch.from_record(record)
                if record and record.get("guarantee") != "exactly-once":
                    self._forget_positions(saved.txid)
            except Exception as exc:  # noqa: BLE001 - the provider unreachable, a record unreadable
                self.collector.report_error(f"exactly-once checkpoints: cannot read the checkpoint record: {exc}")
                self.collector.incr_metric("checkpoint_failures")
                self.retry_at = now + RETRY_READ_SECS
                return
            self.started = True
            self.collector._generation = saved.generation
            log.info("checkpoint-recovery", guarantee="exactly-once", txid=saved.txid, state=saved.phase,
                     generation=saved.generation)
            self._perform(self.coordinator.start(saved, now))
            return
        self._perform(self.coordinator.tick(now, self.reports))
        if now >= self.next_broadcast:
            self._broadcast(now)

    def _broadcast(self, now: float) -> None:
        self.next_broadcast = now + REBROADCAST_SECS
        for task in self.sources:
            self._send_epoch(task)

    def _send_epoch(self, task: int) -> None:
        if self.send is not None:
            self.send(task, epoch_message(self.coordinator.epoch))

    def _forget_positions(self, txid: int) -> None:
        """The record is an at-least-once run's (the topology's guarantee was switched): the sources'
        positions are those of the exactly-once run before it, which the state has moved past — a
        rewind to them would count again what the at-least-once run counted. They are deleted (with
        what was staged), so the sources start where the spout starts (Kafka: the group's offsets)."""
        names = sorted(set(self.sources.values()))
        self.provider.rollback(names)
        stale = {ns: ({}, list(keys)) for ns, keys in self.provider.load(names).items() if keys}
        if stale:
            self.provider.prepare(txid, stale)
            self.provider.commit(txid, list(stale))
        log.warning("exactly-once-after-at-least-once", txid=txid, positions_forgotten=sorted(stale))

    def _perform(self, actions: list) -> None:
        while actions:
            action, actions = actions[0], actions[1:]
            try:
                if isinstance(action, Save):
                    self.provider.put_meta(state_name(self.prefix), json.dumps(action.epoch.to_record()).encode())
                    self._levels["checkpoint_generation"] = action.epoch.generation
                    # checkpoint tuples carry the generation in their roots (a ROLLBACK's tells the
                    # stateful tasks the new one), and the sources learn the new epoch now
                    self.collector._generation = action.epoch.generation
                    self._broadcast(self._now())
                elif isinstance(action, CommitSources):
                    self.provider.commit(action.txid, list(self.sources.values()))
                elif isinstance(action, Emit):
                    self._emit_checkpoint(action.txid, action.action)
                elif isinstance(action, Committed):
                    self._committed(action.txid, action.duration)
                elif isinstance(action, RolledBack):
                    self.collector.incr_metric("checkpoint_rollbacks")
                    self._levels["checkpoint_rollback_to_max"] = max(
                        action.to_txid, self._levels.get("checkpoint_rollback_to_max", 0))
                    log.warning("checkpoint-rollback", to_txid=action.to_txid, generation=action.generation,
                                reason=action.reason)
            except Exception as exc:  # noqa: BLE001 - the provider is unreachable
                self.collector.report_error(f"exactly-once checkpoints: {type(action).__name__} failed: {exc}")
                self.collector.incr_metric("checkpoint_failures")
                if isinstance(action, Save):
                    actions = self.coordinator.save_failed(self._now())
                    self.collector._generation = self.coordinator.epoch.generation
                else:
                    actions = self.coordinator.action_failed(self._now())


def _json(raw: bytes | None) -> Any:
    return json.loads(raw) if raw else None
