"""A restarted task triggers checkpoint recovery at once, not after the message timeout.

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
"""

from __future__ import annotations

import random
from typing import Any

from gale.topology.state import CHECKPOINT_COMPONENT

#: how often each bolt executor of a checkpointed topology says hello to the coordinator
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
    """The layer of a bolt executor that says hello (module docstring)."""

    name = "incarnation"

    def __init__(self, executor: Any, rng: random.Random | None = None):
        self.executor = executor
        self.incarnation = (rng or random.SystemRandom()).getrandbits(63)
        self.coordinator: int | None = None
        self.next_hello = float("-inf")

    def attach(self) -> None:
        ex = self.executor
        ex.preparers.append(self.prepare)
        ex.timers.append(self.timer)
        ex.layers[self.name] = self

    def prepare(self) -> None:
        self.coordinator = self.executor.runtime.layout.component_tasks(CHECKPOINT_COMPONENT)[0]

    def timer(self, now: float) -> None:
        if now < self.next_hello:
            return
        self.next_hello = now + HELLO_SECS
        ex = self.executor
        ex.runtime.send_control(self.coordinator, hello_message(ex.tasks[0], ex.tasks[-1], self.incarnation))
