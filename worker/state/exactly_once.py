"""The shells of exactly-once checkpoints (``topology.state.guarantee: exactly-once``): what the
checkpoint spout, the data spouts' executors and the stateful bolts' executors do with the pure
protocol of :mod:`gale.worker.state.epochs` (read it first; docs/state.md "Exactly-once").

* :class:`ExactlyOnceCheckpointer` — the ``$checkpointspout`` task's driver: feeds the
  :class:`EpochCoordinator` the clock, the sources' reports (polled from the provider) and the acks
  of its checkpoint tuples; writes the record, emits PREPARE/COMMIT/ROLLBACK, commits the sources'
  positions.
* :class:`ExactlyOnceSpoutExecutor` — a data spout's executor: a :class:`SourceTask` per task polls
  the record; ``next_tuple`` is called only while it says so; a failed or timed-out tree stops the
  task and asks for a rollback (the spout's ``fail`` is not called: it rewinds instead); root ids
  carry the generation.
* :class:`ExactlyOnceBoltExecutor` — a stateful bolt's executor: acks at once (no deferred acks: the
  cut makes them unnecessary); PREPARE stages, COMMIT commits, ROLLBACK reloads the committed state
  (and initializes a task that was not) and sets the generation; data tuples of older generations
  are acked without being executed.

Records in the provider's meta: ``<prefix>/__state`` (the coordinator's), ``<prefix>/__sources/<task>``
(a source task's report); a source task's position of checkpoint ``n`` is staged as ``n`` in the
namespace ``<prefix>/<component>/source<task index>`` (key ``position``) and committed with it.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from gale.log import get_logger
from gale.topology.components import can_rewind
from gale.topology.state import CHECKPOINT_STREAM, StateError, pack, unpack_value
from gale.worker.runtime.collector import BoltOutputCollector
from gale.worker.runtime.executor import BoltExecutor, SpoutExecutor
from gale.worker.state.checkpoint_spout import CoordinatorShell
from gale.worker.state.coordinator import COMMIT, INITSTATE, PREPARE, ROLLBACK
from gale.worker.state.epochs import (
    CommitSources,
    Committed,
    Emit,
    Epoch,
    EpochCoordinator,
    PAUSING,
    PREPARING,
    Report,
    Rewind,
    RolledBack,
    Save,
    SourceTask,
    StagePosition,
    WriteReport,
    generation_range,
)
from gale.worker.state.executor import StatefulBoltExecutor

log = get_logger("checkpoint")

POLL_SECS = 0.005  # how often a source task reads the record, and the coordinator the reports
#: the same during the first PAUSE_POLL_FOR seconds of a pause (the coordinator waiting for the sources'
#: reports, a paused source for the commit point), when the whole topology waits for the poll: a few
#: more reads per checkpoint (on Redis, a GET each), and not 1,000 a second through a long pause
PAUSE_POLL_SECS = 0.001
PAUSE_POLL_FOR = 0.1
POSITION_KEY = b"position"
PART_PREFIX = b"part:"  # merged positions: one key per part (a Kafka partition), valued [txid, position]


def state_name(prefix: str) -> str:
    return f"{prefix}/__state"


def report_name(prefix: str, task: int) -> str:
    return f"{prefix}/__sources/{task}"


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
    def __init__(self, spout: Any, conf: dict, context: Any, collector: Any, clock: Any):
        self.collector = collector
        self.provider = context.resources["state"]
        self.prefix = context.resources["state_prefix"]
        self._clock = clock
        interval = conf["topology.state.checkpoint.interval.ms"] / 1000.0
        self.coordinator = EpochCoordinator(interval, pause_timeout=float(conf["topology.message.timeout.secs"]),
                                            retry_secs=interval)
        spouts = list(context.resources["source_components"])
        self.sources = source_tasks(dict(context.task_to_component), spouts, self.prefix)
        self._levels = collector._stats.extra
        self._levels.setdefault("checkpoint_generation", 0)
        self.started = False
        self.next_poll = float("-inf")

    def _now(self) -> float:
        return self._clock()

    def next_tuple(self) -> None:
        now = self._now()
        if now < self.next_poll:
            return
        pausing = self.coordinator.epoch.phase == PAUSING and now - self.coordinator.pause_started < PAUSE_POLL_FOR
        self.next_poll = now + (PAUSE_POLL_SECS if pausing else POLL_SECS)
        try:
            if not self.started:
                record = _json(self.provider.get_meta(state_name(self.prefix)))
                saved = Epoch.from_record(record)
                if record and record.get("guarantee") != "exactly-once":
                    self._forget_positions(saved.txid)
                self.started = True
                log.info("checkpoint-recovery", guarantee="exactly-once", txid=saved.txid, state=saved.phase,
                         generation=saved.generation)
                self._perform(self.coordinator.start(saved, now))
                return
            reports = {t: Report.from_record(_json(self.provider.get_meta(report_name(self.prefix, t))))
                       for t in self.sources}
        except Exception as exc:  # noqa: BLE001 - the provider unreachable, a record unreadable
            self.collector.report_error(f"exactly-once checkpoints: cannot read the checkpoint records: {exc}")
            self.collector.incr_metric("checkpoint_failures")
            self.next_poll = now + self.coordinator.retry_secs
            return
        self._perform(self.coordinator.tick(now, reports))

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
                actions = (self.coordinator.save_failed(self._now()) if isinstance(action, Save)
                           else self.coordinator.action_failed(self._now()))


def _json(raw: bytes | None) -> Any:
    return json.loads(raw) if raw else None


# ------------------------------------------------------------------------------ a data spout's executor


def _idle() -> None:
    """``next_tuple`` of a source task that must not emit now."""


class ExactlyOnceSpoutExecutor(SpoutExecutor):
    def prepare(self) -> None:
        super().prepare()
        runtime = self.runtime
        self.provider = runtime.resources["state"]
        self.prefix = runtime.state_prefix
        all_tasks = runtime.layout.component_tasks(self.component)
        self.sources = {task: SourceTask() for task in self.tasks}
        self.namespaces = {task: source_namespace(self.prefix, self.component, all_tasks.index(task))
                           for task in self.tasks}
        self.all_namespaces = [source_namespace(self.prefix, self.component, i) for i in range(len(all_tasks))]
        self._user_next = dict(self._next_tuple)
        for task in self.tasks:
            self._next_tuple[task] = _idle
        self.next_poll = float("-inf")
        self.draining = False  # a task waits for its trees to complete before it reports "paused"
        self.pausing = False  # the record says PAUSING or PREPARING: the sources wait for the commit point
        self.pause_since = 0.0  # when this executor first saw the pause
        self.cannot_rewind = not can_rewind(type(self.spouts[self.tasks[0]]))
        if self.cannot_rewind:
            self.report_error(
                f"spout {self.component!r} ({type(self.spouts[self.tasks[0]]).__qualname__}) cannot rewind (it does not "
                "override position() and rewind()), so topology.state.guarantee exactly-once cannot hold: it emits "
                "nothing; use at-least-once, or implement both methods (docs/state.md)")

    def run_batch(self, budget: int) -> int:
        now = self.clock.monotonic()
        if now >= self.next_poll and not self.cannot_rewind:
            self._poll(now)
        work = super().run_batch(budget)
        if self.draining and not self.pending:
            # the last tree of a pause completed (its ack arrived in this batch): report at once rather
            # than at the next poll — the whole topology waits for the last source to report. Once per
            # pause (draining is set again only while trees are pending): a provider that cannot be
            # written is not asked again every round
            self.draining = False
            self._poll(now)
        return work

    def _poll(self, now: float) -> None:
        self.next_poll = now + POLL_SECS
        self._observe()  # may put next_poll further (the provider unreachable)
        if self.pausing and now - self.pause_since < PAUSE_POLL_FOR:
            self.next_poll = min(self.next_poll, now + PAUSE_POLL_SECS)

    def _pending_of(self, task: int) -> int:
        if len(self.tasks) == 1:
            return len(self.pending)
        return sum(1 for _, info in self.pending.items() if info[0] == task)

    def _observe(self) -> None:
        try:
            epoch = read_epoch(self.provider, self.prefix)
        except Exception as exc:  # noqa: BLE001 - the provider unreachable: stop until it is back
            for task in self.tasks:
                self._next_tuple[task] = _idle
            self.draining = self.pausing = False
            self.report_error(f"exactly-once: cannot read the checkpoint record: {exc}")
            self.next_poll = self.clock.monotonic() + 1.0
            return
        for task, source in self.sources.items():
            pending = self._pending_of(task) if epoch.phase == PAUSING else 0
            for action in source.observe(epoch, pending):
                try:
                    self._perform(task, action)
                except Exception as exc:  # noqa: BLE001 - the provider, or the spout's position/rewind
                    source.action_failed()
                    self.report_error(f"exactly-once: {type(action).__name__} of task {task} failed: {exc}")
                    break
            self._next_tuple[task] = self._user_next[task] if source.emitting else _idle
            self.collectors[task]._generation = source.generation
        pausing = epoch.phase in (PAUSING, PREPARING)
        if pausing and not self.pausing:
            self.pause_since = self.clock.monotonic()
        self.pausing = pausing
        paused = Report(epoch.generation, paused=epoch.txid)
        self.draining = bool(epoch.phase == PAUSING and self.pending
                             and any(s.report != paused for s in self.sources.values()))

    def _perform(self, task: int, action: Any) -> None:
        spout = self.spouts[task]
        ns = self.namespaces[task]
        if isinstance(action, Rewind):
            for root in [r for r, info in self.pending.items() if info[0] == task]:
                self.pending.pop(root)  # their acks and fails are ignored from now on
            # what this task staged for a checkpoint that did not commit must go: the checkpoint after
            # the rollback reuses its txid, and a task with nothing to stage then (a Kafka task owning
            # no partition) would leave the old, later positions to be committed with it
            self.provider.rollback([ns])
            position = self._committed_position(spout, ns)
            self.in_call = True
            try:
                spout.rewind(position)
            finally:
                self.in_call = False
            log.info("source-rewound", component=self.component, task=task, txid=action.txid, position=position)
        elif isinstance(action, StagePosition):
            self.in_call = True
            try:
                position = spout.position()
            finally:
                self.in_call = False
            self.provider.prepare(action.txid, {ns: (position_changes(self.component, spout, position, action.txid), ())})
        elif isinstance(action, WriteReport):
            self.provider.put_meta(report_name(self.prefix, task), json.dumps(action.report.to_record()).encode())

    def rewind_needed(self, task: int) -> None:
        self.sources[task].tree_failed()
        self._next_tuple[task] = _idle

    def _committed_position(self, spout: Any, ns: str) -> Any:
        merge = bool(getattr(spout, "merge_positions", False))
        names = list(self.all_namespaces) if merge else [ns]
        return committed_position(self.provider, names, merge)

    def _call(self, method: str, task: int, *args: Any) -> None:
        if method == "fail":
            # not the spout's business in this mode: the topology goes back to its last checkpoint
            self.sources[task].tree_failed()
            self._next_tuple[task] = _idle
            return
        super()._call(method, task, *args)


# ------------------------------------------------------------------------------ a stateful bolt's executor


class ExactlyOnceBoltExecutor(StatefulBoltExecutor):
    collector_class = BoltOutputCollector  # acks at once

    def __init__(self, runtime: Any, executor_id: tuple[int, int], component: str):
        super().__init__(runtime, executor_id, component)
        self.generation: dict[int, int | None] = {task: None for task in self.tasks}
        self.stale = 0

    def prepare(self) -> None:
        super().prepare()
        self.stats.extra.setdefault("state_stale_tuples", 0)

    def pending_count(self) -> int:
        return sum(len(h) for h in self.held.values())

    def _run_task(self, task: int, queue: deque, budget: int) -> int:
        if not self.initialized[task]:
            return super()._run_task(task, queue, budget)  # held until the first ROLLBACK initializes it
        # the per-tuple check of is_current, inlined (it is most of this loop's cost per tuple): a
        # tuple is current when each of its roots is in its generation's range
        lo, hi = generation_range(self.generation[task])
        done = 0
        execute_run = BoltExecutor._run_task
        run = self._run
        ack = self.collectors[task].ack
        pop = queue.popleft
        stale = 0
        while queue and done < budget:
            head = queue[0]
            if head.fields.stream == CHECKPOINT_STREAM:
                pop()
                self.on_checkpoint(task, head)
                done += 1
                lo, hi = generation_range(self.generation[task])
                continue
            limit = budget - done
            n = 0
            while n < limit and queue:
                tup = queue[0]
                if tup.fields.stream == CHECKPOINT_STREAM:
                    break
                pop()
                roots = tup.message_id
                if roots:
                    for root in roots:
                        if not lo <= root < hi:
                            break
                    else:
                        run.append(tup)
                        n += 1
                        continue
                    ack(tup)  # sent before the last rollback: its effect would be counted twice
                    stale += 1
                    done += 1
                    limit -= 1
                else:
                    run.append(tup)
                    n += 1
            if run:
                done += execute_run(self, task, run, len(run))
        if stale:
            self.stale += stale
            self.stats.extra["state_stale_tuples"] += stale
        return done

    def act(self, task: int, txid: int, action: str) -> None:
        bolt = self.bolts[task]
        state = self.states[task]
        ready = self.initialized[task]
        if action == PREPARE:
            if not ready:
                raise RuntimeError(f"PREPARE({txid}) before the state of task {task} was initialized")
            bolt.pre_prepare(txid)
            self.stats.extra["state_bytes_written"] += state.prepare(txid)
            self.stats.extra["state_keys_max"] = max(len(s.kv) for s in self.states.values())
        elif action == COMMIT:
            if ready:
                bolt.pre_commit(txid)
            state.commit(txid)
        elif action == ROLLBACK:
            generation = read_epoch(self.runtime.resources["state"], self.runtime.state_prefix).generation
            if ready:  # the bolt keeps its KeyValueState: reloaded in place (as Storm's rollback)
                bolt.pre_rollback()
                state.rollback(reload=True)
            else:
                state.rollback(reload=False)
                self.initialize(task)
            self.generation[task] = generation
        elif action == INITSTATE:
            raise ValueError("INITSTATE in an exactly-once topology (a ROLLBACK initializes the state)")
        else:
            raise ValueError(f"unknown checkpoint action {action!r}")
