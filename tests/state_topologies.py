"""Components of the managed-state tests (module level: workers import them by path)."""

from __future__ import annotations

import gale
from gale import Bolt, ReliableSpout, StatefulBolt

WORDS = ["storm", "gale", "state", "kafka", "redis", "spark", "nimbus", "bolt", "spout", "acker"]


def sentence(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(1 + i % 4))


class NumberedSentences(ReliableSpout):
    """Sentences ``0 .. n-1`` (``[index, sentence]``), replayed on failure; ``n`` from the conf key
    ``test.sentences`` (split among the tasks)."""

    output_fields = ["index", "sentence"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        n = int(conf.get("test.sentences", 100))
        idx, tasks = context.this_task_index, len(context.this_component_tasks)
        self._todo = iter(range(idx, n, tasks))
        self.acked_ids: set[int] = set()

    def next_message(self):
        i = next(self._todo, None)
        if i is not None:
            self.emit([i, sentence(i)], msg_id=i)

    def on_acked(self, msg_id, values):
        self.acked_ids.add(msg_id)


class _FailsFirstAttempts(Bolt):
    """Fails the first attempt of every input whose :meth:`number` is a multiple of
    ``test.fail.every`` (0: never) before emitting anything — a replay that must not change the
    results; otherwise emits :meth:`outputs`, anchored, and acks."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.every = int(conf.get("test.fail.every", 0))
        self.seen: set = set()

    def number(self, tup) -> int:
        raise NotImplementedError

    def identity(self, tup):
        return self.number(tup)

    def outputs(self, tup) -> list:
        raise NotImplementedError

    def execute(self, tup):
        key = self.identity(tup)
        if self.every and self.number(tup) % self.every == 0 and key not in self.seen:
            self.seen.add(key)
            self.collector.fail(tup)
            return
        for values in self.outputs(tup):
            self.collector.emit(values, anchors=tup)
        self.collector.ack(tup)


class FlakySplit(_FailsFirstAttempts):
    """Splits sentences (``[index, sentence]`` → ``[word]``); fails the first attempt of every
    ``test.fail.every``-th sentence."""

    output_fields = ["word"]

    def number(self, tup):
        return tup["index"]

    def outputs(self, tup):
        return [[w] for w in tup["sentence"].split()]


class WordIds(Bolt):
    """Splits sentences into word ids (ints: the word's index in WORDS) on the field ``word``: a new
    version of the word count whose state keys are ints where the old one's were strs."""

    output_fields = ["word"]

    def execute(self, tup):
        for w in tup["sentence"].split():
            self.collector.emit([WORDS.index(w)], anchors=tup)
        self.collector.ack(tup)


class StatefulCount(StatefulBolt):
    """The issue's word count. ``test.fail.prepare`` = k: each task's k-th prepare raises once (the
    checkpoint fails, the topology rolls back and replays)."""

    output_fields = ["word", "count"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.fail_prepare = int(conf.get("test.fail.prepare", 0))
        self.prepares = 0
        self.rollbacks = 0

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        w = tup["word"]
        c = self.counts.get(w, 0) + 1
        self.counts.put(w, c)
        self.collector.emit([w, c], anchors=tup)
        self.collector.ack(tup)

    def pre_prepare(self, txid):
        self.prepares += 1
        if self.prepares == self.fail_prepare:
            raise RuntimeError(f"injected prepare failure at txid {txid}")

    def pre_rollback(self):
        self.rollbacks += 1


class Sink(gale.BasicBolt):
    def execute(self, tup):
        pass


class BadValueCount(StatefulBolt):
    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.state.put(tup["word"], object())
        self.collector.ack(tup)


class TaskTotals(StatefulBolt):
    """Per-task state (shuffle grouping): the number of words this task saw, under the key 'total'."""

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.state.put("total", self.state.get("total", 0) + 1)
        self.collector.ack(tup)


class ForeignKeyCount(StatefulBolt):
    """Puts a key that is not the grouping value: refused (another task may own it)."""

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.state.put("total:" + tup["word"], 1)
        self.collector.ack(tup)


class NumberedItems(ReliableSpout):
    """Items ``test.items.first .. test.items.stop - 1`` (``[i]``), in order, replayed on failure
    (``failed`` and ``replayed`` count them)."""

    output_fields = ["i"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        first, stop = int(conf.get("test.items.first", 0)), int(conf.get("test.items.stop", 100))
        idx, tasks = context.this_task_index, len(context.this_component_tasks)
        self._todo = iter(range(first + idx, stop, tasks))
        self.acked_ids: set[int] = set()

    def next_message(self):
        i = next(self._todo, None)
        if i is not None:
            self.emit([i], msg_id=i)

    def on_acked(self, msg_id, values):
        self.acked_ids.add(msg_id)


class PersistentTens(gale.WindowedBolt):
    """Persistent tumbling windows of ``length`` items; records each window's items."""

    output_fields = ["items"]

    def __init__(self, length: int = 10):
        super().__init__()
        self.with_tumbling_window(gale.Count.of(length)).with_persistence()
        self.windows: list[list[int]] = []

    def execute(self, window):
        items = [t["i"] for t in window.get()]
        self.windows.append(items)
        self.collector.emit([items])


class EventTimeTenths(gale.WindowedBolt):
    """Tumbling event-time windows of 1 s over ``ts = i * 100`` (10 items a window), persistent or
    not; a long idle timeout, so windows fire only as the input's timestamps advance."""

    output_fields = ["items"]

    def __init__(self, persistent: bool = True):
        super().__init__()
        self.with_tumbling_window(gale.Duration.seconds(1)).with_timestamp_extractor(lambda t: t["i"] * 100)
        self.with_idle_timeout(gale.Duration.seconds(600))
        if persistent:
            self.with_persistence()
        self.windows: list[list[int]] = []

    def execute(self, window):
        items = [t["i"] for t in window.get()]
        self.windows.append(items)
        self.collector.emit([items])


class FailingPrepare(StatefulBolt):
    """Acks everything; its ``test.fail.prepare``-th prepare raises once (every stateful task of the
    topology then rolls back)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.fail_prepare = int(conf.get("test.fail.prepare", 0))
        self.prepares = 0

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.collector.ack(tup)

    def pre_prepare(self, txid):
        self.prepares += 1
        if self.prepares == self.fail_prepare:
            raise RuntimeError(f"injected prepare failure at txid {txid}")


class _Rewindable(gale.Spout):
    """Numbered inputs ``0 .. n-1`` (``n`` from the conf key :attr:`count_key`) from a source that can
    rewind (exactly-once): task ``i`` of ``k`` emits :meth:`values` of ``i, i+k, ...`` with the number
    as message id; its position is the next number; ``rewinds`` records every rewind."""

    count_key = ""

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n = int(conf.get(self.count_key, 100))
        self.start, self.step = context.this_task_index, len(context.this_component_tasks)
        self.next = self.start
        self.rewinds: list = []

    def values(self, i: int) -> list:
        raise NotImplementedError

    def next_tuple(self):
        if self.next < self.n:
            i = self.next
            self.next += self.step
            self.collector.emit(self.values(i), msg_id=i)

    def position(self):
        return self.next

    def rewind(self, position):
        self.rewinds.append(position)
        self.next = self.start if position is None else position


class RewindableSentences(_Rewindable):
    """Sentences ``0 .. test.sentences - 1`` like :class:`NumberedSentences`, from a source that can rewind."""

    output_fields = ["index", "sentence"]
    count_key = "test.sentences"

    def values(self, i):
        return [i, sentence(i)]


class FlakyRecords(_FailsFirstAttempts):
    """Kafka records → ``[word]`` (the record's value); fails the first attempt of every record whose
    offset is a multiple of ``test.fail.every`` (0: never)."""

    output_fields = ["word"]

    def number(self, tup):
        return tup["offset"]

    def identity(self, tup):
        return (tup["partition"], tup["offset"])

    def outputs(self, tup):
        return [[tup["value"]]]


class RewindableItems(_Rewindable):
    """Items ``0 .. test.items.stop - 1`` (``[i]``) from a source that can rewind."""

    output_fields = ["i"]
    count_key = "test.items.stop"

    def values(self, i):
        return [i]


class FlakyPass(_FailsFirstAttempts):
    """Passes ``[i]`` on, anchored; fails the first attempt of every ``test.fail.every``-th item."""

    output_fields = ["i"]

    def number(self, tup):
        return tup["i"]

    def outputs(self, tup):
        return [[tup["i"]]]


class ItemTally(FailingPrepare):
    """Counts, per item, how many fired windows held it (``[items]`` inputs): exactly once, every
    count is 1. Its ``test.fail.prepare``-th prepare raises once."""

    def execute(self, tup):
        for i in tup["items"]:
            self.state.put(i, self.state.get(i, 0) + 1)
        self.collector.ack(tup)


class FlakyWindowSink(Bolt):
    """Records the windows (``[items]``) it acks; fails the first arrival of the window starting at
    ``test.fail.window`` (-1: none)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.fail_window = int(conf.get("test.fail.window", -1))
        self.failed: list[list[int]] = []
        self.acked: list[list[int]] = []

    def execute(self, tup):
        items = list(tup["items"])
        if items and items[0] == self.fail_window and not self.failed:
            self.failed.append(items)
            self.collector.fail(tup)
            return
        self.acked.append(items)
        self.collector.ack(tup)
