"""The components of the combination matrix (``tests/combinations.py`` has the table, the cases and
the checks): items spouts, pass-through bolts of every kind, tallies, a recorder, Spark stages, and
two unmodified pystorm components, run as ``python -m tests.combination_components NAME``. Module
level, so workers import them by path."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


# -------------------------------------------------------------- pystorm components (subprocesses)


def _pystorm_components() -> dict[str, type]:
    import pystorm

    class ShellPass(pystorm.Bolt):
        """Passes ``[i]`` on, anchored; fails item ``argv[2]`` once (after emitting it with ``after``)."""

        auto_ack = False

        def initialize(self, conf, context):
            self.fail_item = int(sys.argv[2]) if len(sys.argv) > 2 else -1
            self.after = len(sys.argv) > 3 and sys.argv[3] == "after"
            self.failed = False

        def process(self, tup):
            i = tup.values[0]
            if i == self.fail_item and not self.failed:
                self.failed = True
                if self.after:
                    self.emit([i], anchors=[tup])
                self.fail(tup)
                return
            self.emit([i], anchors=[tup])
            self.ack(tup)

    class ShellItems(pystorm.Spout):
        """Items ``0 .. test.items - 1`` split among the component's tasks, message id ``i``; replays fails."""

        def initialize(self, conf, context):
            tasks = sorted(int(t) for t, c in context["task->component"].items() if c == context["componentid"])
            idx, step = tasks.index(int(context["taskid"])), len(tasks)
            self.todo = list(range(idx, int(conf["test.items"]), step))[::-1]

        def next_tuple(self):
            if self.todo:
                i = self.todo.pop()
                self.emit([i], tup_id=i)

        def fail(self, tup_id):
            self.todo.append(int(tup_id))

    return {"ShellPass": ShellPass, "ShellItems": ShellItems}


if __name__ == "__main__":  # a shell component's subprocess: before Gale and Spark are imported
    _pystorm_components()[sys.argv[1]]().run()
    sys.exit(0)


import gale
from gale import BasicBolt, Bolt, Count, FailedException, ReliableSpout, Spout, StatefulBolt

REPO = Path(__file__).resolve().parent.parent
N = 60  # items per case
WINDOW = 10  # items per tumbling count window
FLAKY_EVERY = 20  # on/alo: flaky fails the first attempt of items 0, 20, 40
FAIL_PREPARE = 3  # alo/eo: count (or a) raises in its 3rd pre_prepare
#: eo: the item each component fails once, and whether after its effect (state updated, output emitted)
EO_FAIL = {"count": (13, True), "a": (13, True), "b": (29, False), "recorder": (47, False), "x": (33, True)}

GUARANTEES = ("off", "on", "alo", "eo")
BOLT_KINDS = ("Bolt", "BasicBolt", "ShellBolt", "WindowedBoltMemory", "WindowedBoltPersistent", "StatefulBolt",
              "SparkBolt", "SparkSink")
SPOUT_KINDS = ("Spout", "ReliableSpout", "KafkaSpout", "ShellSpout")
#: X kinds that hold tuples outside managed state (a window's buffer, a Spark batch)
BUFFERING = {"WindowedBoltMemory", "SparkBolt"}
SINKS = {"SparkSink"}

BASE_CONF = {
    "test.items": N,
    "topology.max.spout.pending": 2 * WINDOW,  # a count window needs length + sliding <= pending
    "topology.state.checkpoint.interval.ms": 50,
    "topology.spark.batch.size": 20,
    "topology.spark.batch.millis": 100,
}
GUARANTEE_CONF = {
    "off": {"topology.acker.executors": 0},
    "on": {},
    "alo": {"topology.state.guarantee": "at-least-once"},
    "eo": {"topology.state.guarantee": "exactly-once"},
}


# ------------------------------------------------------------------------------------------- spouts


class ItemSpout(Spout):
    """Items ``0 .. test.items - 1`` as ``[i]`` with ``i`` as message id, split among the tasks;
    replays what fails (first failed, first replayed). No position()/rewind(): refused under eo."""

    output_fields = ["i"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = int(conf.get("test.items", N))
        self.start, self.step = context.this_task_index, len(context.this_component_tasks)
        self.next = self.start
        self.replay: list[int] = []
        self.acked: set[int] = set()
        self.rewinds: list[Any] = []

    def next_tuple(self):
        if self.replay:
            i = self.replay.pop(0)
        elif self.next < self.n:
            i = self.next
            self.next += self.step
        else:
            return
        self.collector.emit([i], msg_id=i)

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id):
        self.replay.append(msg_id)


class RewindableItemSpout(ItemSpout):
    """:class:`ItemSpout` that can rewind (exactly-once): its position is the next item it reads."""

    def position(self):
        return self.next

    def rewind(self, position):
        self.rewinds.append(position)
        self.replay.clear()
        self.next = self.start if position is None else position


class ReliableItems(ReliableSpout):
    """The same items from a :class:`gale.ReliableSpout` (its pending map replays failures), rewindable."""

    output_fields = ["i"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = int(conf.get("test.items", N))
        self.start, self.step = context.this_task_index, len(context.this_component_tasks)
        self.next = self.start
        self.acked_ids: set[int] = set()
        self.rewinds: list[Any] = []

    def next_message(self):
        if self.next < self.n:
            i = self.next
            self.next += self.step
            self.emit([i], msg_id=i)

    def on_acked(self, msg_id, values):
        self.acked_ids.add(msg_id)

    def position(self):
        return self.next

    def rewind(self, position):
        self.rewinds.append(position)
        self.forget_pending()
        self.next = self.start if position is None else position


# -------------------------------------------------------------------------------------------- bolts


class _FailsOnce:
    """``fail_item``: the item this component fails once (-1: none), after its effect when
    ``fail_after`` (state updated, output emitted), else before anything."""

    def _setup_failure(self, fail_item: int, fail_after: bool) -> None:
        self.fail_item = int(fail_item)
        self.fail_after = bool(fail_after)

    def _prepare_failure(self) -> None:
        self.failed_once = False

    def _fails_now(self, i: int) -> bool:
        if i == self.fail_item and not self.failed_once:
            self.failed_once = True
            return True
        return False


class Flaky(Bolt):
    """Passes ``[i]`` on (anchored) or, with a Kafka record, ``[int(value)]``; fails the first attempt of
    every ``every``-th item before emitting anything (0: never)."""

    output_fields = ["i"]

    def __init__(self, every: int = 0):
        self.every = int(every)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: set = set()

    def execute(self, tup):
        if "value" in tup.fields:
            value = tup["value"]
            i = int(value.decode() if isinstance(value, bytes) else value)
            key = (tup["partition"], tup["offset"])
        else:
            i = key = tup["i"]
        if self.every and i % self.every == 0 and key not in self.seen:
            self.seen.add(key)
            self.collector.fail(tup)
            return
        self.collector.emit([i], anchors=tup)
        self.collector.ack(tup)


class PassBolt(_FailsOnce, Bolt):
    """X = ``Bolt``: passes ``[i]`` on, anchored."""

    output_fields = ["i"]

    def __init__(self, fail_item: int = -1, fail_after: bool = True):
        self._setup_failure(fail_item, fail_after)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self._prepare_failure()

    def execute(self, tup):
        i = tup["i"]
        if self._fails_now(i):
            if self.fail_after:
                self.collector.emit([i], anchors=tup)
            self.collector.fail(tup)
            return
        self.collector.emit([i], anchors=tup)
        self.collector.ack(tup)


class PassBasic(_FailsOnce, BasicBolt):
    """X = ``BasicBolt``: emits are anchored and the input acked for it; raising fails the input."""

    output_fields = ["i"]

    def __init__(self, fail_item: int = -1, fail_after: bool = True):
        self._setup_failure(fail_item, fail_after)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self._prepare_failure()

    def execute(self, tup):
        i = tup["i"]
        if self._fails_now(i):
            if self.fail_after:
                self.collector.emit([i])
            raise FailedException(f"injected failure of item {i}")
        self.collector.emit([i])


class Tens(gale.WindowedBolt):
    """X = ``WindowedBolt``: tumbling windows of 10 items (by count, in memory or persistent) that emit
    every tuple of the fired window; ``windows`` records each fired window's items."""

    output_fields = ["i"]

    def __init__(self, persistent: bool = False):
        super().__init__()
        self.with_tumbling_window(Count.of(WINDOW))
        if persistent:
            self.with_persistence()
        self.windows: list[list[int]] = []

    def execute(self, window):
        items = [t["i"] for t in window.get()]
        self.windows.append(items)
        for i in items:
            self.collector.emit([i])


class Tally(_FailsOnce, StatefulBolt):
    """A stateful tally (``item → times counted``, keyed by the fields grouping on ``i``) that passes each
    item on: the ``count``, ``a``, ``b`` and alo/eo recorder of every topology, and X = ``StatefulBolt``.
    Fails ``fail_item`` once after updating its state and emitting; its ``fail_prepare``-th
    ``pre_prepare`` raises once (0: never). ``executed`` is every item it executed (rolled back or not)."""

    output_fields = ["i"]

    def __init__(self, fail_item: int = -1, fail_after: bool = True, fail_prepare: int = 0):
        self._setup_failure(fail_item, fail_after)
        self.fail_prepare = int(fail_prepare)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self._prepare_failure()
        self.prepares = 0
        self.rollbacks = 0
        self.executed: list[Any] = []

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        i = tup["i"]
        self.executed.append(i)
        fails = self._fails_now(i)
        if fails and not self.fail_after:
            self.collector.fail(tup)
            return
        self.state.put(i, self.state.get(i, 0) + 1)
        self.collector.emit([i], anchors=tup)
        if fails:
            self.collector.fail(tup)
            return
        self.collector.ack(tup)

    def pre_prepare(self, txid):
        self.prepares += 1
        if self.prepares == self.fail_prepare:
            raise RuntimeError(f"injected prepare failure at txid {txid}")

    def pre_rollback(self):
        self.rollbacks += 1


class Recorder(Bolt):
    """The off/on recorder: keeps every input's values, acks it."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: list[list[Any]] = []

    def execute(self, tup):
        self.seen.append(list(tup.values))
        self.collector.ack(tup)


def _spark_bolt_base():
    from gale.spark import SparkBolt

    return SparkBolt


def _spark_sink_base():
    from gale.spark import SparkSink

    return SparkSink


class SparkPass(_spark_bolt_base()):
    """X = ``SparkBolt``: returns its micro-batch as it came (row lineage through the hidden row id);
    raises in its ``fail_batch``-th batch (0-based; -1: never), before emitting anything."""

    output_fields = ["i"]

    def __init__(self, fail_batch: int = -1):
        self.fail_batch = int(fail_batch)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.batches = 0

    def transform(self, df):
        n = self.batches
        self.batches += 1
        if n == self.fail_batch:
            raise RuntimeError(f"injected failure in batch {n}")
        return df


class ParquetSink(_spark_sink_base()):
    """X = ``SparkSink``: Parquet under ``path`` with the default de-duplication; raises in its
    ``fail_batch``-th batch (before writing it)."""

    def __init__(self, path: str, fail_batch: int = -1):
        super().__init__(path=path)
        self.fail_batch = int(fail_batch)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.batches = 0

    def prepare_frame(self, df):
        n = self.batches
        self.batches += 1
        if n == self.fail_batch:
            raise RuntimeError(f"injected failure in batch {n}")
        return df


def pystorm_command(name: str, *args: Any) -> dict[str, Any]:
    """A shell component running ``name`` below (an unmodified pystorm component) as a subprocess."""
    return {"command": [sys.executable, "-m", "tests.combination_components", name, *map(str, args)], "cwd": str(REPO)}
