"""Executors of bolts in a topology with checkpoints (used only when the topology has a stateful
bolt, so the stateless path is untouched).

:class:`CheckpointBoltExecutor` (Storm's ``CheckpointTupleForwarder``) runs any bolt: data tuples as
usual; a ``$checkpoint`` tuple is counted by the task's :class:`CheckpointBarrier` and, once it has
arrived from every checkpoint input task, acted on (:meth:`act`), forwarded on the bolt's own
``$checkpoint`` stream anchored to it, and acked.

:class:`StatefulBoltExecutor` (Storm's ``StatefulBoltExecutor``) adds the state: tuples are held
until INITSTATE, the bolt's acks are deferred (:class:`DeferredAcks`) and the actions prepare,
commit or roll back the task's :class:`TaskState`. A failing action (the provider unreachable, a
hook raising) fails the checkpoint tuple: the coordinator rolls back and retries.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from gale.topology.checkpointing import checkpoint_inputs, data_inputs
from gale.topology.state import CHECKPOINT_STREAM
from gale.topology.tuple import Tuple
from gale.worker.runtime.acker import ACK, FAIL
from gale.worker.runtime.collector import BoltOutputCollector
from gale.worker.runtime.executor import BoltExecutor
from gale.worker.runtime.windows.executor import WindowedBoltExecutor
from gale.worker.state.barrier import PROCESS, CheckpointBarrier, DeferredAcks
from gale.worker.state.coordinator import COMMIT, INITSTATE, PREPARE, ROLLBACK
from gale.worker.state.task_state import TaskState

class CheckpointBoltExecutor(BoltExecutor):
    def __init__(self, runtime: Any, executor_id: tuple[int, int], component: str):
        super().__init__(runtime, executor_id, component)
        defn = runtime.defn
        n_inputs = sum(len(runtime.layout.component_tasks(c)) for c in checkpoint_inputs(defn, component))
        self.barriers = {task: CheckpointBarrier(n_inputs) for task in self.tasks}
        self._run: deque = deque()  # the data tuples handed to BoltExecutor._run_task in one go

    def _run_task(self, task: int, queue: deque, budget: int) -> int:
        # the transfer receiver appends to ``queue`` from another thread: only popleft and [0] here
        # (iterating a deque that another thread appends to raises "deque mutated during iteration")
        done = 0
        run_data = super()._run_task
        run = self._run
        while queue and done < budget:
            head = queue[0]
            if head.fields.stream == CHECKPOINT_STREAM:
                queue.popleft()
                self.on_checkpoint(task, head)
                done += 1
                continue
            limit = budget - done
            pop = queue.popleft
            while len(run) < limit and queue and queue[0].fields.stream != CHECKPOINT_STREAM:
                run.append(pop())
            done += run_data(task, run, len(run))
        return done

    def on_checkpoint(self, task: int, tup: Tuple) -> None:
        txid, action = tup.values[0], tup.values[1]
        collector = self.collectors[task]
        verdict = self.barriers[task].arrive(txid, action)
        if verdict != PROCESS:
            BoltOutputCollector.ack(collector, tup)
            return
        try:
            self.act(task, txid, action)
        except Exception as exc:  # noqa: BLE001 - user hooks and the provider
            self.report_error(exc)
            BoltOutputCollector.fail(collector, tup)
            return
        collector.emit([txid, action], anchors=tup, stream=CHECKPOINT_STREAM)
        BoltOutputCollector.ack(collector, tup)

    def act(self, task: int, txid: int, action: str) -> None:
        """A stateless bolt has nothing to checkpoint."""


class DeferringCollector(BoltOutputCollector):
    """The collector of a stateful task: ``ack`` is held until the checkpoint covering it commits.

    What is held is the acker's arithmetic, not the tuple: ``root, edge XOR ack_val`` per tree the
    input belongs to, as plain ints in a flat list — a checkpoint interval holds hundreds of
    thousands of acks, and as Tuple objects they would be scanned by every garbage collection."""

    def __init__(self, executor: StatefulBoltExecutor, task: int, routes: dict) -> None:
        super().__init__(executor, task, routes)
        self.deferred = DeferredAcks()

    def ack(self, tup: Tuple) -> None:
        if tup._st < 0:
            return  # acked or failed already
        tup._st = -1.0
        ids = tup.message_id
        if ids and self._acking:
            av = tup.ack_val
            pending = self.deferred.pending
            for root, edge in ids.items():
                pending.append(root)
                pending.append(edge ^ av)
        self._stats.acked[tup.fields.source_key] += 1

    def release(self, held: list[int], start: int = 0, stop: int | None = None) -> None:
        """Send the held acks ``held[start:stop]`` (root, value pairs)."""
        send, acker_task = self._send_acker, self._acker_task
        for i in range(start, len(held) if stop is None else stop, 2):
            root = held[i]
            send(acker_task(root), (ACK, root, held[i + 1], 0))

    def fail_held(self, held: list[int]) -> None:
        """Fail the trees of held acks (a rollback discarded their effects)."""
        send, acker_task = self._send_acker, self._acker_task
        for root in set(held[0::2]):
            send(acker_task(root), (FAIL, root, 0, 0))


class StatefulBoltExecutor(CheckpointBoltExecutor):
    collector_class: type[BoltOutputCollector] = DeferringCollector

    def __init__(self, runtime: Any, executor_id: tuple[int, int], component: str):
        super().__init__(runtime, executor_id, component)
        self.initialized: dict[int, bool] = {task: False for task in self.tasks}
        self.held: dict[int, list[Tuple]] = {task: [] for task in self.tasks}
        self.states: dict[int, TaskState] = {}
        # acks a commit released, sent at most RELEASE_PER_ROUND per round: a whole interval's acks
        # at once would fill the acker's queue past the high-water mark and pause every spout
        self.releasing: deque[list] = deque()  # [collector, held, next index]

    def prepare(self) -> None:
        runtime = self.runtime
        routes = runtime.routes_for(self.component)
        provider = runtime.resources["state"]
        inputs = data_inputs(runtime.defn, self.component)
        keyed = bool(inputs) and all(i.grouping.type == "fields" for i in inputs)
        key_groups = int(self.conf["topology.state.key.groups"]) if keyed else None
        all_tasks = runtime.layout.component_tasks(self.component)
        for task in self.tasks:
            self.states[task] = TaskState(
                provider, runtime.state_prefix, self.component, all_tasks.index(task), len(all_tasks), key_groups,
                [i.grouping.fields for i in inputs] if keyed else (), writer=runtime.topology_id,
            )
            bolt = runtime.instantiate(self.component)
            collector = self.collector_class(self, task, routes)
            self.bolts[task] = bolt
            self.collectors[task] = collector
            self.basic[task] = False
            bolt.prepare(runtime.task_conf(self.component), self.context(task), collector)
        self.stats.extra.setdefault("state_bytes_written", 0)
        self.stats.extra.setdefault("state_checkpoint_failures", 0)
        self.stats.extra.setdefault("state_keys_max", 0)

    RELEASE_PER_ROUND = 4096  # acks (root, value pairs)

    def run_batch(self, budget: int) -> int:
        sent = 0
        releasing = self.releasing
        while releasing and sent < self.RELEASE_PER_ROUND:
            entry = releasing[0]
            collector, held, start = entry
            stop = min(len(held), start + 2 * (self.RELEASE_PER_ROUND - sent))
            collector.release(held, start, stop)
            sent += (stop - start) // 2
            if stop >= len(held):
                releasing.popleft()
            else:
                entry[2] = stop
        return sent + super().run_batch(budget)

    def has_work(self) -> bool:
        return bool(self.releasing) or super().has_work()

    def _run_task(self, task: int, queue: deque, budget: int) -> int:
        if self.initialized[task]:
            return super()._run_task(task, queue, budget)
        # before INITSTATE: checkpoints are handled, every other tuple is held
        done = 0
        held = self.held[task]
        while queue and done < budget:
            tup = queue.popleft()
            done += 1
            if tup.fields.stream == CHECKPOINT_STREAM:
                self.on_checkpoint(task, tup)
                if self.initialized[task]:
                    break
            else:
                held.append(tup)
        return done

    def on_checkpoint(self, task: int, tup: Tuple) -> None:
        failures = self.stats.errors
        super().on_checkpoint(task, tup)
        if self.stats.errors != failures:
            self.stats.extra["state_checkpoint_failures"] += 1

    def pending_count(self) -> int:
        releasing = sum((len(held) - start) // 2 for _, held, start in self.releasing)
        return sum(len(c.deferred) // 2 for c in self.collectors.values()) + sum(len(h) for h in self.held.values()) + releasing

    def act(self, task: int, txid: int, action: str) -> None:
        bolt = self.bolts[task]
        state = self.states[task]
        collector: DeferringCollector = self.collectors[task]  # type: ignore[assignment]
        ready = self.initialized[task]
        if action == PREPARE:
            if not ready:
                # restarted since the last INITSTATE: fail so the coordinator recovers
                raise RuntimeError(f"PREPARE({txid}) before the state of task {task} was initialized")
            bolt.pre_prepare(txid)
            self.stats.extra["state_bytes_written"] += state.prepare(txid)
            collector.deferred.prepare()
            self.stats.extra["state_keys_max"] = max(len(s.kv) for s in self.states.values())
        elif action == COMMIT:
            if ready:
                bolt.pre_commit(txid)
            state.commit(txid)  # also when not initialized: the COMMIT of a recovery finishes ours
            held = collector.deferred.commit()
            if held:
                self.releasing.append([collector, held, 0])
        elif action == ROLLBACK:
            if ready:
                bolt.pre_rollback()
            state.rollback(reload=ready)
            collector.fail_held(collector.deferred.rollback())
        elif action == INITSTATE:
            if not ready:
                self.initialize(task)
        else:
            raise ValueError(f"unknown checkpoint action {action!r}")

    def initialize(self, task: int) -> None:
        """Load the task's committed state, hand it to the bolt, and release the tuples held until now."""
        state = self.states[task]
        state.load()
        self.bolts[task].init_state(state.kv)
        self.initialized[task] = True
        held = self.held[task]
        if held:
            self.queues[task].extendleft(reversed(held))
            self.held[task] = []


class CheckpointWindowedBoltExecutor(CheckpointBoltExecutor, WindowedBoltExecutor):
    """A (non-persistent) windowed bolt in a topology with checkpoints: its windows as without
    checkpoints (:class:`WindowedBoltExecutor`: runners, timer, acks at expiry), and the
    ``$checkpoint`` tuples counted by the barrier and forwarded once they arrived from every
    checkpoint input task (:class:`CheckpointBoltExecutor`); it has no state to checkpoint."""


def bolt_executor_for(cls: type, conf: Any = None) -> type[BoltExecutor]:
    """The executor class of a bolt in a topology with checkpoints (``conf``: the component's)."""
    from gale.topology.state import StatefulBolt
    from gale.topology.windowing import PERSISTENT, WindowedBolt

    if issubclass(cls, WindowedBolt):
        if conf and conf.get(PERSISTENT):
            from gale.worker.state.windows import ExactlyOnceWindowedBoltExecutor, PersistentWindowedBoltExecutor

            if conf.get("topology.state.guarantee") == "exactly-once":
                return ExactlyOnceWindowedBoltExecutor
            return PersistentWindowedBoltExecutor
        return CheckpointWindowedBoltExecutor
    if issubclass(cls, StatefulBolt):
        if conf and conf.get("topology.state.guarantee") == "exactly-once":
            from gale.worker.state.exactly_once import ExactlyOnceBoltExecutor

            return ExactlyOnceBoltExecutor
        return StatefulBoltExecutor
    return CheckpointBoltExecutor
