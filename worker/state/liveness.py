"""A restarted task triggers recovery at once, not after the message timeout.

When a worker dies (``kill -9``, a lost node) every tuple its tasks held is lost, and so is a
checkpoint tuple on its way through them. Nothing fails them: the trees time out after
``topology.message.timeout.secs`` (30 s by default), and until then no checkpoint can commit — an
at-least-once PREPARE or COMMIT waits for its tree, an exactly-once pause waits for the sources'
trees to drain. The supervisor starts a replacement within seconds; this module is how the
checkpoint coordinator learns of it.

* Every bolt executor of a topology with checkpoints (the tasks ``$checkpoint`` tuples pass through)
  draws an **incarnation** — a random 63-bit id — when it is built, and says hello to the
  coordinator's task with it: at its first timer, then every :data:`HELLO_SECS` (a hello lost with
  a dead worker, or sent before the coordinator's worker was up, is repeated). A hello is a control
  message, in band on the path of the acker's verdicts, like the exactly-once epochs.
* The coordinator (:class:`Incarnations`, pure) remembers the incarnation of each executor (by its
  first task). A different one from the same executor means it was restarted: the coordinator
  recovers now — at-least-once, it gives up the checkpoint tuple in flight and runs recovery
  (ROLLBACK / COMMIT / INITSTATE, ``gale.worker.state.coordinator``); exactly-once, it rolls back to
  the last committed checkpoint under a new generation (``gale.worker.state.epochs``), which also
  makes the sources drop their pending trees instead of waiting for them to time out.

Data spouts do not say hello here: an exactly-once source already does (its report of no generation),
and an at-least-once spout's restart blocks no checkpoint. The coordinator's own restart is a
recovery by itself. Nothing is stored: a coordinator that restarts learns the incarnations again
from the next hellos (the first one it hears from an executor is never a restart).

The same hellos make an at-least-once spout replay at once (``topology.replay.on.restart``, on by
default; any acked topology, checkpointed or not): every bolt and acker executor also says hello to
every data spout executor (to its first task), and a spout executor that hears a new incarnation
fails every tree it has pending (:class:`RestartReplay`) — any of them may have had a tuple, or its
acker entry, in the dead worker, and the XOR acker cannot tell which. They replay within seconds of
the replacement's start instead of one to two message timeouts after the kill; a tree that was not
lost is replayed too (at-least-once allows the duplicate; its late ack finds no pending entry and is
dropped). Exactly-once topologies do this through their generations instead (``epochs``), so their
sources get no hellos.
"""

from __future__ import annotations

import random
from typing import Any

from gale.log import get_logger
from gale.topology.checkpointing import EXACTLY_ONCE, has_checkpointing
from gale.topology.state import CHECKPOINT_COMPONENT

log = get_logger("liveness")

#: how often each bolt executor says hello to the coordinator (a checkpointed topology) and each
#: bolt and acker executor to the data spouts (``topology.replay.on.restart``)
HELLO_SECS = 1.0
#: control message kind (beside the exactly-once epochs' 1 and reports' 2):
#: ``(TASK_HELLO, first task, incarnation, last task)``
TASK_HELLO = 3


def hello_message(first: int, last: int, incarnation: int) -> tuple[int, int, int, int]:
    return (TASK_HELLO, first, incarnation, last)


def is_hello(payload: Any) -> bool:
    return isinstance(payload, tuple) and len(payload) == 4 and payload[0] == TASK_HELLO


def read_hello(payload: Any) -> tuple[int, int, int]:
    """``(first task, last task, incarnation)``; ValueError names what is wrong with another payload."""
    if not is_hello(payload) or not all(type(x) is int and x >= 0 for x in payload):
        raise ValueError(f"not a task hello: {payload!r}")
    _, first, incarnation, last = payload
    if last < first:
        raise ValueError(f"task hello with its last task {last} before its first {first}: {payload!r}")
    return first, last, incarnation


class Incarnations:
    """The coordinator's memory of who said hello (pure). ``bolt_tasks``: the tasks a hello may name
    (the topology's bolt tasks); anything else is refused by name."""

    def __init__(self, bolt_tasks: set[int]):
        self.bolt_tasks = bolt_tasks
        self.known: dict[int, int] = {}  # first task of an executor → its incarnation
        self.restarts = 0

    def hello(self, payload: Any) -> tuple[int, int] | None:
        """The executor's task range when it was restarted since its last hello; None otherwise."""
        first, last, incarnation = read_hello(payload)
        if first not in self.bolt_tasks or last not in self.bolt_tasks:
            raise ValueError(f"task hello from tasks {first}-{last}, which are not bolt tasks of this topology")
        before = self.known.get(first)
        self.known[first] = incarnation
        if before is None or before == incarnation:
            return None
        self.restarts += 1
        return first, last


class Incarnation:
    """The layer of a bolt or acker executor that says hello (module docstring): to the checkpoint
    coordinator (``coordinator``) and to the first task of each data spout executor (``spouts``)."""

    name = "incarnation"

    def __init__(self, executor: Any, *, coordinator: bool, spouts: bool, rng: random.Random | None = None):
        self.executor = executor
        self.incarnation = (rng or random.SystemRandom()).getrandbits(63)
        self.to_coordinator = coordinator
        self.to_spouts = spouts
        self.targets: list[int] = []
        self.next_hello = float("-inf")

    def attach(self) -> None:
        ex = self.executor
        ex.preparers.append(self.prepare)
        ex.timers.append(self.timer)
        ex.layers[self.name] = self

    def prepare(self) -> None:
        runtime = self.executor.runtime
        if self.to_coordinator:
            self.targets.append(runtime.layout.component_tasks(CHECKPOINT_COMPONENT)[0])
        if self.to_spouts:
            self.targets.extend(spout_executor_heads(runtime))

    def timer(self, now: float) -> None:
        if now < self.next_hello:
            return
        self.next_hello = now + HELLO_SECS
        ex = self.executor
        hello = hello_message(ex.tasks[0], ex.tasks[-1], self.incarnation)
        send = ex.runtime.send_control
        for task in self.targets:
            send(task, hello)


def data_spouts(runtime: Any) -> list[str]:
    """The topology's spouts that emit data (every spout but the checkpoint coordinator)."""
    return sorted(c for c, comp in runtime.defn.components.items()
                  if comp.kind == "spout" and c != CHECKPOINT_COMPONENT)


def spout_executor_heads(runtime: Any) -> list[int]:
    """The first task of every data spout executor: where a hello for :class:`RestartReplay` goes."""
    executors = runtime.layout.component_executors
    return [start for c in data_spouts(runtime) for start, _end in executors.get(c, ())]


def replays_on_restart(runtime: Any) -> bool:
    """Whether the executors of this topology say hello to its spouts and the spouts replay on a
    restart: acked, ``topology.replay.on.restart`` on, and not exactly-once (module docstring)."""
    config = runtime.config
    if not (runtime.acking and config.topology_replay_on_restart):
        return False
    return not (has_checkpointing(runtime.defn) and config.topology_state_guarantee == EXACTLY_ONCE)


class RestartReplay:
    """The layer of an at-least-once data spout's executor that fails its pending trees when a bolt
    or acker executor restarted (module docstring). Counted in the executor's
    ``replayed_on_restart`` (trees) and ``task_restarts_seen``."""

    name = "restart_replay"

    def __init__(self, executor: Any):
        self.executor = executor
        self.incarnations: Incarnations | None = None

    def attach(self) -> None:
        ex = self.executor
        ex.preparers.append(self.prepare)  # after the body's: its own control handler is chained
        ex.layers[self.name] = self

    def prepare(self) -> None:
        ex = self.executor
        runtime = ex.runtime
        spouts = set(data_spouts(runtime)) | {CHECKPOINT_COMPONENT}
        self.incarnations = Incarnations({t for t, c in runtime.layout.task_to_component.items() if c not in spouts})
        head = ex.tasks[0]
        previous = ex.control.get(head)

        def on_control(payload: tuple) -> None:
            if is_hello(payload):
                self.hello(payload)
            elif previous is not None:
                previous(payload)
            else:  # as the executor counts a control message for a task with no handler
                extra = ex.stats.extra
                extra["control_refused"] = extra.get("control_refused", 0) + 1

        ex.control[head] = on_control

    def hello(self, payload: tuple) -> None:
        assert self.incarnations is not None
        tasks = self.incarnations.hello(payload)
        if tasks is not None:
            self.replay(tasks)

    def replay(self, tasks: tuple[int, int]) -> None:
        """Fail every pending tree now (counted as failed, not as timed out)."""
        ex = self.executor
        trees = ex.pending.drain()
        stats = ex.stats
        for _root, (task, msg_id, stream, _t) in trees.items():
            stats.failed[stream] += 1
            ex.fail_tree(task, msg_id)
        extra = stats.extra
        extra["replayed_on_restart"] = extra.get("replayed_on_restart", 0) + len(trees)
        extra["task_restarts_seen"] = extra.get("task_restarts_seen", 0) + 1
        log.warning("task-restarted", component=ex.component, tasks=f"{tasks[0]}-{tasks[1]}",
                    replayed=len(trees), note="its pending trees replay now")
