"""The managed-state layers of a bolt executor: the task's state, and its held acks.

Both are participants of the checkpoint layer (:class:`gale.worker.state.gate.Checkpointing`),
which calls their ``act(task, txid, action, tuple)`` when a checkpoint action has arrived from
every input task.

:class:`ManagedState` (Storm's ``StatefulBoltExecutor``, the state half): each task has a
:class:`~gale.worker.state.task_state.TaskState` — keyed by key group when every data input is a
fields grouping, else per task — and a *target* told about it: a ``StatefulBolt`` itself
(``init_state(kv)``, ``pre_prepare``, ``pre_commit``, ``pre_rollback``) or a persistent window's
adapter (``gale.worker.state.windows``). Until the state is loaded the checkpoint layer holds the
task's data tuples. PREPARE stages the changes, COMMIT commits them, ROLLBACK reloads the committed
state; INITSTATE (at-least-once) or the first ROLLBACK (exactly-once) loads it. A failing action
(the provider unreachable, a hook raising) fails the checkpoint tuple: the coordinator rolls back
and retries.

:class:`AckHolding` (at-least-once only; the other half): the task's input acks are held until the
checkpoint holding their effect commits — the task's collector XORs them into a
:class:`~gale.worker.state.barrier.HeldAcks` instead of its thread's ack buffer. COMMIT releases
them (a few thousand per round: a whole interval's acks at once would fill the acker's queue past
the high-water mark and pause every spout), ROLLBACK fails their trees. Exactly-once tasks ack at
once: the quiescent cut makes holding unnecessary.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

from gale.topology.checkpointing import data_inputs
from gale.worker.runtime.acker import ACK, FAIL
from gale.worker.state.barrier import HeldAcks
from gale.worker.state import keygroup_stats
from gale.worker.state.coordinator import COMMIT, INITSTATE, PREPARE, ROLLBACK
from gale.worker.state.task_state import TaskState


class ManagedState:
    """See the module docstring. ``gate``: the executor's checkpoint layer (it holds the data until
    :meth:`initialize`); ``target_of(task)``: what the state is for (default: the task's bolt);
    ``keyed``: key-group state when every data input is a fields grouping (False: per task)."""

    name = "state"

    def __init__(self, executor: Any, gate: Any, exactly_once: bool, target_of: Callable[[int], Any] | None = None,
                 keyed: bool = True, typed_keys: bool = True):
        self.executor = executor
        self.gate = gate
        self.exactly_once = exactly_once
        self.target_of = target_of
        self.keyed = keyed
        #: record the writing submission and check key types against another's (a bolt's own keys;
        #: a window's keys are arrival ordinals)
        self.typed_keys = typed_keys
        self.states: dict[int, TaskState] = {}
        self.targets: dict[int, Any] = {}
        self._next_key_group_walk = 0.0
        self._walks: list[keygroup_stats.Walk] = []

    def attach(self) -> None:
        ex = self.executor
        ex.preparers.append(self.prepare)
        ex.layers[self.name] = self
        for key in ("state_bytes_written", "state_checkpoint_failures", "state_keys_max"):
            ex.stats.extra.setdefault(key, 0)

    @property
    def initialized(self) -> dict[int, bool]:
        return self.gate.ready

    def prepare(self) -> None:
        ex = self.executor
        runtime = ex.runtime
        provider = runtime.resources["state"]
        prefix = runtime.resources["state_prefix"]
        inputs = data_inputs(runtime.defn, ex.component)
        keyed = self.keyed and bool(inputs) and all(i.grouping.type == "fields" for i in inputs)
        key_groups = int(ex.config.topology_state_key_groups) if keyed else None
        fields = [i.grouping.fields for i in inputs] if keyed else ()
        all_tasks = runtime.layout.component_tasks(ex.component)
        for task in ex.tasks:
            self.states[task] = TaskState(provider, prefix, ex.component, all_tasks.index(task), len(all_tasks),
                                          key_groups, fields, writer=runtime.topology_id if self.typed_keys else None)
            self.targets[task] = self.target_of(task) if self.target_of is not None else ex.bolts[task]

    def act(self, task: int, txid: int, action: str, tup: Any) -> None:
        state = self.states[task]
        target = self.targets[task]
        ready = self.gate.ready[task]
        extra = self.executor.stats.extra
        if action == PREPARE:
            if not ready:
                # restarted since the last INITSTATE: fail so the coordinator recovers
                raise RuntimeError(f"PREPARE({txid}) before the state of task {task} was initialized")
            target.pre_prepare(txid)
            extra["state_bytes_written"] += state.prepare(txid)
            extra["state_keys_max"] = max(len(s.kv) for s in self.states.values())
            self.report_key_groups()
        elif action == COMMIT:
            if ready:
                target.pre_commit(txid)
            state.commit(txid)  # also when not initialized: the COMMIT of a recovery finishes ours
        elif action == ROLLBACK:
            if ready:
                target.pre_rollback()
                state.rollback(reload=True)  # the target keeps its KeyValueState: reloaded in place
                if getattr(target, "reinit_after_rollback", False):
                    target.init_state(state.kv)
            else:
                state.rollback(reload=False)
                if self.exactly_once:  # exactly-once: a rollback is what loads the state
                    self.initialize(task)
        elif action == INITSTATE:
            if self.exactly_once:
                raise ValueError("INITSTATE in an exactly-once topology (a ROLLBACK initializes the state)")
            if not ready:
                self.initialize(task)
        else:
            raise ValueError(f"unknown checkpoint action {action!r}")

    def report_key_groups(self) -> None:
        """Keys and bytes of the executor's biggest key groups (keyed state): a walk started now and
        then, advanced a chunk per PREPARE (gale.worker.state.keygroup_stats)."""
        ex = self.executor
        if not self._walks:
            now = ex.clock.monotonic()
            if now < self._next_key_group_walk:
                return
            self._next_key_group_walk = now + keygroup_stats.EVERY_SECS
            self._walks = [keygroup_stats.Walk(list(s.kv.items()), s.key_groups, s.kv._packb)
                           for s in self.states.values() if s.key_groups is not None]
            if not self._walks:
                return
        walk = self._walks[-1]
        if not walk.step():
            return
        if len(self._walks) > 1:
            self._walks.pop()  # that task's state is walked: on to the next
            self._walks[-1].keys.update(walk.keys)
            self._walks[-1].size.update(walk.size)
            return
        self._walks = []
        ex.stats.details.update(keygroup_stats.top_groups(walk.keys, walk.size))

    def initialize(self, task: int) -> None:
        """Load the task's committed state, hand it to the target, and release the tuples held until now."""
        state = self.states[task]
        state.load()
        self.targets[task].init_state(state.kv)
        self.gate.set_ready(task)


class AckHolding:
    """See the module docstring."""

    name = "held-acks"
    RELEASE_PER_ROUND = 4096  # acks

    def __init__(self, executor: Any):
        self.executor = executor
        self.held: dict[int, HeldAcks] = {}
        self.releasing: deque[list] = deque()  # [acks left to send (an iterator), how many]

    def attach(self) -> None:
        ex = self.executor
        ex.preparers.append(self.prepare)
        ex.polls.append(self.poll)
        ex.pendings.append(self.pending)
        ex.work_checks.append(self.has_work)
        ex.layers[self.name] = self

    def prepare(self) -> None:
        """After the body made the collectors: each task's acks go into its held acks."""
        ex = self.executor
        for task in ex.tasks:
            held = self.held[task] = HeldAcks()
            collector = ex.collectors[task]
            collector._ack_buf = held.pending
            collector._hold = True

    def act(self, task: int, txid: int, action: str, tup: Any) -> None:
        held = self.held[task]
        if action == PREPARE:
            self._send(held.prepare(tup.message_id or ()))
            self.executor.collectors[task]._ack_buf = held.pending  # the next interval's acks
        elif action == COMMIT:
            acks = held.commit()
            if acks:
                self.releasing.append([iter(acks.items()), len(acks)])
        elif action == ROLLBACK:  # (HeldAcks.rollback empties both dicts in place)
            runtime = self.executor.runtime
            send, acker_task = runtime.send_acker, runtime.acker_task
            for root in held.rollback():
                send(acker_task(root), (FAIL, root, 0, 0))

    def _send(self, acks: Iterable[tuple[int, int]]) -> int:
        runtime = self.executor.runtime
        send, acker_task = runtime.send_acker, runtime.acker_task
        n = 0
        for root, value in acks:
            send(acker_task(root), (ACK, root, value, 0))
            n += 1
        return n

    def poll(self, now: float) -> int:
        sent = 0
        releasing = self.releasing
        while releasing and sent < self.RELEASE_PER_ROUND:
            entry = releasing[0]
            n = self._send(islice(entry[0], self.RELEASE_PER_ROUND - sent))
            sent += n
            entry[1] -= n
            if entry[1] <= 0:
                releasing.popleft()
        return sent

    def has_work(self) -> bool:
        return bool(self.releasing)

    def pending(self) -> int:
        # read by the stats (another thread) while the executor thread releases: a copy made in one
        # call under the GIL, never a Python-level iteration a concurrent popleft breaks ("deque
        # mutated during iteration")
        releasing = sum(left for _, left in tuple(self.releasing))
        return sum(len(h) for h in tuple(self.held.values())) + releasing
