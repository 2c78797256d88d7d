"""The checkpoint layer of a bolt executor: every bolt of a topology with checkpoints has it, whatever
its body (a Python bolt, a window, a subprocess, a Spark stage).

It sits between each task's input queue and the task's intake (``BoltExecutor.intake``) and takes
the ``$checkpoint`` tuples out of the data (Storm's ``CheckpointTupleForwarder``): a checkpoint
``(txid, action)`` is counted by the task's :class:`~gale.worker.state.barrier.CheckpointBarrier`
and, once it has arrived from every task that sends this one checkpoints, *acted on* — each
participant's ``act(task, txid, action, tuple)`` in order (the managed state prepares, commits, rolls
back or loads; held acks and held outputs follow it) — then forwarded on the bolt's own
``$checkpoint`` stream anchored to it, and acked. A participant that raises fails the checkpoint
tuple (the coordinator rolls back and retries); the error is reported on the component. Checkpoint
tuples never reach the body: a shell bolt's subprocess or a Spark stage sees data only.

The data between checkpoints goes to the body in runs (what the body cannot take now — a
subprocess's backlog, a full Spark batch — goes back to the front of the queue, in order, so a
checkpoint is acted on only after everything before it was taken). A body that answers its tuples
later (a subprocess: ``outstanding(task)``, the tuples it took and has not acked or failed yet) has
the checkpoint wait until it answered everything before it — no tuple after the checkpoint is handed
to it meanwhile — so its outputs are on the right side of the checkpoint, as a Python bolt's are.
Two options, for stateful tasks:

* ``hold``: until the task's state is loaded (``set_ready``), data tuples are held and given back
  in order then (Storm's stateful bolts wait for INITSTATE);
* ``filter_data`` (exactly-once, every bolt): a data tuple of an older generation than the task's
  — sent before the last rollback, which rewound its source — is acked without being executed.
  A body that holds tuples across checkpoints (a Spark stage's micro-batch) gives back those of
  older generations at a ROLLBACK (``drop_stale(task, lo, hi)``: it acks them and says how many),
  so nothing it emits later derives from two generations: a row anchored to a rolled-back tuple
  and to a current one would be dropped downstream as stale, losing the current one's effect while
  its tree completes.

In an exactly-once topology (``exactly_once``) every checkpoint tuple carries its generation in its
root (the checkpoint spout stamps it, like every root id): a ROLLBACK sets the task's generation, a
checkpoint of an older generation (a late copy, from before a rollback or a coordinator's restart)
is acked and ignored, and copies of one action are counted per generation.

On the per-tuple path of checkpointed topologies: compiled with the core (``gale.compiled``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import cython

from gale.topology.checkpointing import checkpoint_inputs
from gale.topology.state import CHECKPOINT_STREAM
from gale.topology.tuple import Tuple
from gale.worker.runtime.anchoring import generation_of, generation_range
from gale.worker.runtime.collector import BoltOutputCollector
from gale.worker.state.barrier import PROCESS, CheckpointBarrier
from gale.worker.state.coordinator import ROLLBACK

#: a checkpoint participant: ``act(task, txid, action, tup)``; what it raises (a user hook, the
#: provider) fails the checkpoint tuple
Participant = Any


def _current(roots: Any, lo: object, hi: object) -> bool:
    """Whether every root of a tuple of several trees (``roots``, None for none) is of the
    generation ``lo <= root < hi``."""
    if roots:
        for r in roots:
            if not lo <= r < hi:
                return False
    return True


class Checkpointing:
    """See the module docstring. ``participants``: objects with ``act(task, txid, action, tup)``."""

    name = "checkpoint"

    def __init__(self, executor: Any, participants: list[Participant], hold: bool = False,
                 exactly_once: bool = False, filter_data: bool = False):
        self.executor = executor
        self.participants = participants
        self.hold = hold
        self.exactly_once = exactly_once
        self.filter_data = filter_data
        self.inner: dict[int, Callable[[int, deque, int], int]] = {}
        self.barriers: dict[int, CheckpointBarrier] = {}
        #: per task: acks checkpoint tuples and emits the forwarded ones (the thread's ack buffer,
        #: even when the task's own collector holds its acks)
        self.forwarders: dict[int, BoltOutputCollector] = {}
        self.ready: dict[int, bool] = {}
        self.held: dict[int, list] = {}
        #: per task: the root ids of its generation are ``lo <= root < hi`` (exactly-once)
        self.range: dict[int, tuple[int, int]] = {}
        self.generation: dict[int, int | None] = {}
        self.stale = 0
        #: the body's ``outstanding(task)``, when it answers tuples later (a subprocess)
        self.outstanding: Callable[[int], int] | None = None
        #: task → (checkpoint tuple, generation): acted on once the body answered what came before it
        self.parked: dict[int, tuple[Any, int]] = {}
        #: the body's ``drop_stale(task, lo, hi)``, when it holds tuples across checkpoints
        self.drop_stale: Callable[[int, int, int], int] | None = None

    def attach(self) -> None:
        ex = self.executor
        ex.preparers.append(self.prepare)
        ex.pendings.append(self.held_count)
        ex.layers[self.name] = self
        if self.exactly_once:
            ex.stats.extra.setdefault("state_stale_tuples", 0)

    def prepare(self) -> None:
        """After the body's set-up: put the barrier in front of every task's intake."""
        ex = self.executor
        runtime = ex.runtime
        self.outstanding = getattr(ex.body, "outstanding", None)
        self.drop_stale = getattr(ex.body, "drop_stale", None) if self.filter_data else None
        if self.outstanding is not None:
            ex.polls.append(self.poll)
        n_inputs = sum(len(runtime.layout.component_tasks(c)) for c in checkpoint_inputs(runtime.defn, ex.component))
        for task in ex.tasks:
            self.inner[task] = ex.intake.get(task, ex.run_task)
            ex.intake[task] = self.intake
            self.barriers[task] = CheckpointBarrier(n_inputs)
            own = ex.collectors[task]
            self.forwarders[task] = BoltOutputCollector(ex, task, own._routes)
            self.ready[task] = not self.hold
            self.held[task] = []
            self.generation[task] = None
            self.range[task] = (0, 1 << 64)

    def held_count(self) -> int:
        return sum(len(h) for h in self.held.values()) + len(self.parked)

    def set_ready(self, task: int) -> None:
        """The task's state is loaded: the data tuples held until now go back to its queue, first."""
        self.ready[task] = True
        held = self.held[task]
        if held:
            self.executor.queues[task].extendleft(reversed(held))
            self.held[task] = []

    def intake(self, task: int, queue: deque, budget: cython.Py_ssize_t) -> int:
        # the transfer receiver appends to ``queue`` from another thread: only popleft, indexing and
        # extendleft here (iterating a deque that another thread appends to raises)
        done: cython.Py_ssize_t = 0
        k: cython.Py_ssize_t
        limit: cython.Py_ssize_t
        taken: cython.Py_ssize_t
        stale: cython.Py_ssize_t = 0
        inner = self.inner[task]
        pop = queue.popleft
        filter_data: cython.bint = self.filter_data
        lo, hi = self.range[task]
        ack = self.forwarders[task].ack
        parked = self.parked
        while queue and done < budget:
            if task in parked:
                break  # nothing after a checkpoint goes to the body before the checkpoint is acted on
            head: Tuple = queue[0]
            if head.fields.stream == CHECKPOINT_STREAM:
                pop()
                done += 1
                self.on_checkpoint(task, head)
                lo, hi = self.range[task]
                continue
            if not self.ready[task]:
                self.held[task].append(pop())  # before the task's state is loaded
                done += 1
                continue
            # the run of data tuples of the current generation at the front, checked where they are
            # queued: the body takes them from the queue itself
            limit = min(budget - done, len(queue))
            k = 0
            while k < limit:
                t: Tuple = queue[k]
                if t.fields.stream == CHECKPOINT_STREAM:
                    break
                if filter_data:
                    root = t._root
                    if root is not None:  # one tuple tree (the common case): the slot, no dict
                        if not lo <= root < hi:
                            break
                    elif not _current(t._mid, lo, hi):
                        break
                k += 1
            if k == 0:  # the head is data of an older generation
                ack(pop())  # sent before the last rollback: its effect would be counted twice
                stale += 1
                done += 1
                continue
            last = queue[k - 1]
            try:
                taken = inner(task, queue, k)
            except Exception:
                # the body's bug: what it did not take fails now (its spout tuples replay), and the
                # executor reports the error
                self._fail_untaken(task, queue, last, k)
                raise
            done += taken
            if taken < k:
                break  # the body is full: the rest stays first in the queue, in order
        if stale:
            self.stale += stale
            self.executor.stats.extra["state_stale_tuples"] += stale
        return done

    def _fail_untaken(self, task: int, queue: deque, last: Any, handed: int) -> None:
        """Fail what the body did not take of the ``handed`` tuples at the front of ``queue`` (the
        last of them ``last``): it took a prefix, so they are the front up to ``last``, if still there."""
        for i in range(min(handed, len(queue))):
            if queue[i] is last:
                fail = self.forwarders[task].fail
                for _ in range(i + 1):
                    fail(queue.popleft())
                return

    def on_checkpoint(self, task: int, tup: Any) -> None:
        txid, action = tup.values[0], tup.values[1]
        forwarder = self.forwarders[task]
        generation = 0
        if self.exactly_once:
            roots = tup.message_id
            generation = generation_of(next(iter(roots))) if roots else 0
            current = self.generation[task]
            if current is not None and 0 < (current - generation) % 256 < 128:
                forwarder.ack(tup)  # a checkpoint of an older generation: nothing to do
                self.executor.stats.extra["state_stale_tuples"] += 1
                return
        if self.barriers[task].arrive(txid, action, generation) != PROCESS:
            forwarder.ack(tup)
            return
        if self.outstanding is not None and self.outstanding(task):
            self.parked[task] = (tup, generation)
            return
        self._act(task, tup, generation)

    def poll(self, now: float) -> int:
        """Each round (a body that answers later): act on the checkpoints whose wait is over."""
        done = 0
        for task, (tup, generation) in list(self.parked.items()):
            if not self.outstanding(task):
                del self.parked[task]
                self._act(task, tup, generation)
                done += 1
        return done

    def _act(self, task: int, tup: Any, generation: int) -> None:
        txid, action = tup.values[0], tup.values[1]
        forwarder = self.forwarders[task]
        ex = self.executor
        try:
            for participant in self.participants:
                participant.act(task, txid, action, tup)
        except Exception as exc:  # noqa: BLE001 - user hooks and the provider: the checkpoint fails
            ex.report_error(exc)
            extra = ex.stats.extra
            if "state_checkpoint_failures" in extra:
                extra["state_checkpoint_failures"] += 1
            forwarder.fail(tup)
            return
        if self.exactly_once and action == ROLLBACK:
            self.generation[task] = generation
            if self.filter_data:
                lo, hi = self.range[task] = generation_range(generation)
                if self.drop_stale is not None:
                    dropped = self.drop_stale(task, lo, hi)
                    if dropped:
                        self.stale += dropped
                        ex.stats.extra["state_stale_tuples"] += dropped
        forwarder.emit([txid, action], anchors=tup, stream=CHECKPOINT_STREAM)
        forwarder.ack(tup)
