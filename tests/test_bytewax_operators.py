"""Bytewax dataflows on Gale, in Gale's own words: every core operator, the windowing operators with
event and system clocks, joins, partitioned sources and sinks, the end of input, user errors — each
dataflow unmodified Bytewax, run by ``gale.bytewax.run_main`` / ``cluster_main`` (local mode, real
executor threads and acker)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import bytewax.operators as op
import bytewax.operators.windowing as win
import pytest
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, FixedPartitionedSource, StatefulSourcePartition, StatelessSourcePartition
from bytewax.operators import StatefulBatchLogic
from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from bytewax.testing import TestingSink, TestingSource

from gale.bytewax import cluster_main, run_main

pytestmark = pytest.mark.timeout(120)

ALIGN = datetime(2024, 1, 1, tzinfo=timezone.utc)


def two_workers(flow):
    cluster_main(flow, [], 0, worker_count_per_proc=2)


@pytest.fixture(params=["run_main", "two_workers"])
def entry(request):
    return run_main if request.param == "run_main" else two_workers


def test_flat_map_batch_gets_whole_batches_and_order_is_kept(entry):
    out, seen = [], []
    flow = Dataflow("fmb")
    s = op.input("inp", flow, TestingSource(list(range(10)), batch_size=4))

    def mapper(batch):
        seen.append(len(batch))
        return [x * 10 for x in batch]

    op.output("out", op.flat_map_batch("times", s, mapper), TestingSink(out))
    entry(flow)
    assert sorted(out) == [x * 10 for x in range(10)]
    assert sorted(seen) == [2, 4, 4]  # the source's batches stay batches
    if entry is run_main:
        assert out == [x * 10 for x in range(10)]


def test_branch_merge_and_inspect(entry, capsys):
    evens, odds, merged = [], [], []
    flow = Dataflow("bm")
    s = op.input("inp", flow, TestingSource(list(range(8))))
    b = op.branch("even", s, lambda x: x % 2 == 0)
    op.output("evens", b.trues, TestingSink(evens))
    op.output("odds", b.falses, TestingSink(odds))
    m = op.merge("merge", b.trues, op.map("neg", b.falses, lambda x: -x))
    op.inspect("look", m)
    op.output("merged", m, TestingSink(merged))
    entry(flow)
    assert sorted(evens) == [0, 2, 4, 6] and sorted(odds) == [1, 3, 5, 7]
    assert sorted(merged) == [-7, -5, -3, -1, 0, 2, 4, 6]
    printed = capsys.readouterr().out.splitlines()
    assert sorted(printed) == sorted(f"bm.look: {x}" for x in merged)


def test_inspect_debug_prints_step_worker_and_epoch(capsys):
    flow = Dataflow("dbg")
    s = op.input("inp", flow, TestingSource(["a", "b"]))
    op.output("out", op.inspect_debug("help", s), TestingSink([]))
    run_main(flow)
    assert capsys.readouterr().out.splitlines() == ["dbg.help W0 @1: 'a'", "dbg.help W0 @1: 'b'"]


def test_redistribute_spreads_a_batch_over_the_workers():
    workers = []
    flow = Dataflow("redis")
    s = op.input("inp", flow, TestingSource(list(range(100)), batch_size=100))
    s = op.redistribute("spread", s)
    s = op.inspect_debug("where", s, lambda step, item, epoch, worker: workers.append(worker))
    op.output("out", s, TestingSink([]))
    two_workers(flow)
    assert len(workers) == 100 and set(workers) == {0, 1}


def test_a_word_count_over_two_workers_counts_every_word_where_its_key_lives(entry):
    out = []
    flow = Dataflow("wc")
    lines = ["a b c", "b c", "c"] * 20
    s = op.input("inp", flow, TestingSource(lines, batch_size=7))
    words = op.flat_map("split", s, str.split)
    counts = op.count_final("count", words, lambda w: w)
    op.output("out", counts, TestingSink(out))
    entry(flow)
    assert sorted(out) == [("a", 20), ("b", 40), ("c", 60)]


class KeepLog(StatefulBatchLogic):
    """Records every call: the order Bytewax calls a logic in."""

    log: list = []

    def __init__(self, resume):
        self.state = resume or 0
        self.when = None

    def on_batch(self, values):
        self.log.append(("batch", list(values)))
        self.state += sum(values)
        self.when = datetime.now(timezone.utc) if self.state >= 5 else None
        return [self.state], False

    def on_notify(self):
        self.log.append(("notify", self.state))
        self.when = None
        return [("notified", self.state)], self.state >= 10

    def on_eof(self):
        self.log.append(("eof", self.state))
        return [("eof", self.state)], True

    def notify_at(self):
        return self.when

    def snapshot(self):
        return self.state


def test_stateful_batch_calls_on_batch_on_notify_and_on_eof_per_key_and_discards():
    KeepLog.log = []
    out = []
    flow = Dataflow("sb")
    s = op.input("inp", flow, TestingSource([("k", 2), ("k", 3), ("k", 1), ("k", 4), ("j", 1)]))
    s = op.stateful_batch("logic", s, KeepLog)
    op.output("out", s, TestingSink(out))
    run_main(flow)
    # 2, then 5 (a notification due at once runs before the next item), 6 (due again), 10 (notified and
    # discarded), then j's logic, and at the end of input on_eof for the keys still there (j only)
    assert out == [("k", 2), ("k", 5), ("k", ("notified", 5)), ("k", 6), ("k", ("notified", 6)), ("k", 10),
                   ("k", ("notified", 10)), ("j", 1), ("j", ("eof", 1))]


def test_notify_at_in_the_future_fires_on_the_tasks_ticks():
    out = []

    class Later(KeepLog):
        def on_batch(self, values):
            self.when = datetime.now(timezone.utc) + timedelta(milliseconds=150)
            return [], False

        def on_notify(self):
            self.when = None
            return ["late"], True

    flow = Dataflow("later")
    s = op.input("inp", flow, TestingSource([("k", 1), TestingSource.PAUSE(timedelta(milliseconds=400))]))
    op.output("out", op.stateful_batch("logic", s, Later), TestingSink(out))
    run_main(flow)
    assert out == [("k", "late")]


def test_windows_over_event_time_fold_and_collect(entry):
    out = []
    flow = Dataflow("ev")
    events = [{"k": "a", "t": ALIGN + timedelta(seconds=s), "v": v}
              for s, v in [(0, 1), (1, 2), (4, 3), (6, 4), (12, 5), (13, 6)]]
    s = op.input("inp", flow, TestingSource(events))
    keyed = op.key_on("key", s, lambda e: e["k"])
    clock = win.EventClock(lambda e: e["t"], wait_for_system_duration=timedelta(seconds=0))
    windower = win.TumblingWindower(length=timedelta(seconds=5), align_to=ALIGN)
    sums = win.fold_window("sum", keyed, clock, windower, lambda: 0, lambda acc, e: acc + e["v"], lambda a, b: a + b)
    op.output("out", sums.down, TestingSink(out))
    entry(flow)
    assert sorted(out) == [("a", (0, 6)), ("a", (1, 4)), ("a", (2, 11))]


def test_windows_over_system_time_close_on_the_clock():
    out = []
    flow = Dataflow("sys")
    inp = ["x", "y", TestingSource.PAUSE(timedelta(milliseconds=600)), "z"]
    s = op.input("inp", flow, TestingSource(inp))
    keyed = op.key_on("key", s, lambda _: "all")
    windower = win.TumblingWindower(length=timedelta(milliseconds=300), align_to=datetime.now(timezone.utc))
    got = win.collect_window("collect", keyed, win.SystemClock(), windower)
    op.output("out", op.map("values", got.down, lambda kv: sorted(kv[1][1])), TestingSink(out))
    run_main(flow)
    assert out == [["x", "y"], ["z"]]


def test_join_of_two_keyed_inputs(entry):
    out = []
    flow = Dataflow("join")
    names = op.input("names", flow, TestingSource([("1", "ann"), ("2", "bob")]))
    ages = op.input("ages", flow, TestingSource([("1", 31), ("2", 42), ("3", 7)]))
    op.output("out", op.join("j", names, ages, emit_mode="final"), TestingSink(out))
    entry(flow)
    assert sorted(out, key=repr) == sorted([("1", ("ann", 31)), ("2", ("bob", 42)), ("3", (None, 7))], key=repr)


class Parts(FixedPartitionedSource):
    """Three partitions of numbered items; resumes after the last item read."""

    def __init__(self, n: int):
        self.n = n

    def list_parts(self):
        return ["p0", "p1", "p2"]

    def build_part(self, step_id, for_part, resume_state):
        return _Part(for_part, self.n, resume_state or 0)


class _Part(StatefulSourcePartition):
    def __init__(self, name, n, start):
        self.name, self.n, self.i = name, n, start

    def next_batch(self):
        if self.i >= self.n:
            raise StopIteration()
        self.i += 1
        return [(self.name, f"{self.name}-{self.i}")]

    def snapshot(self):
        return self.i


class Numbers(DynamicSource):
    def build(self, step_id, worker_index, worker_count):
        return _Numbers(worker_index, worker_count)


class _Numbers(StatelessSourcePartition):
    def __init__(self, index, count):
        self.it = iter(range(index, 20, count))

    def next_batch(self):
        return [next(self.it)]


class ListSink(FixedPartitionedSink):
    """A partition per name; each remembers what it wrote and how many (its resume state)."""

    written: dict = {}

    def list_parts(self):
        return ["s0", "s1"]

    def build_part(self, step_id, for_part, resume_state):
        return _SinkPart(self.written.setdefault(for_part, []), resume_state or 0)


class _SinkPart(StatefulSinkPartition):
    def __init__(self, into, count):
        self.into, self.count = into, count

    def write_batch(self, values):
        self.into.extend(values)
        self.count += len(values)

    def snapshot(self):
        return self.count


def test_partitioned_sources_and_sinks(entry):
    ListSink.written = {}
    flow = Dataflow("parts")
    s = op.input("inp", flow, Parts(5))
    op.output("out", s, ListSink())
    entry(flow)
    everything = sorted(v for values in ListSink.written.values() for v in values)  # values: keys are routing
    assert everything == sorted(f"p{p}-{i}" for p in range(3) for i in range(1, 6))
    # each sink partition gets the keys part_fn maps to it, whichever task wrote them
    for name, values in ListSink.written.items():
        assert {ListSink().list_parts()[ListSink().part_fn(v.split("-")[0]) % 2] for v in values} == {name}


def test_a_dynamic_source_reads_a_partition_per_worker(entry):
    out = []
    flow = Dataflow("dyn")
    op.output("out", op.input("inp", flow, Numbers()), TestingSink(out))
    entry(flow)
    assert sorted(out) == list(range(20))


def test_a_user_error_stops_the_run_with_the_step_named_and_the_cause_kept():
    flow = Dataflow("err")
    s = op.input("inp", flow, TestingSource([1, 2, 0, 4]))
    op.output("out", op.map("inv", s, lambda x: 1 / x), TestingSink([]))
    with pytest.raises(RuntimeError, match=r"err\.inv") as caught:
        run_main(flow)
    assert isinstance(caught.value.__cause__.__cause__ or caught.value.__cause__, ZeroDivisionError)


def test_a_key_that_is_no_str_is_refused_as_bytewax_refuses_it():
    flow = Dataflow("badkey")
    s = op.input("inp", flow, TestingSource([1]))
    op.output("out", op.key_on("key", s, lambda x: x), TestingSink([]))
    with pytest.raises(RuntimeError) as caught:
        run_main(flow)
    assert "must be a `str`" in str(caught.value.__cause__.__cause__)


def test_stateful_map_state_resumes_from_the_recovery_directory_exactly(tmp_path):
    """A bounded run commits a last checkpoint at its end, an aborted one at the abort; the next run with
    the same directory goes on from there with the state as it was."""
    from bytewax.recovery import RecoveryConfig

    out = []
    inp = [("a", 1), ("b", 1), ("a", 1), TestingSource.EOF(), ("a", 1), TestingSource.ABORT(), ("b", 1),
           TestingSource.EOF()]
    flow = Dataflow("rec")
    s = op.input("inp", flow, TestingSource(inp))
    s = op.stateful_map("sum", s, lambda acc, v: ((acc or 0) + v,) * 2)
    op.output("out", s, TestingSink(out))
    config = RecoveryConfig(str(tmp_path))
    runs = []
    for _ in range(3):
        run_main(flow, epoch_interval=timedelta(milliseconds=50), recovery_config=config)
        runs.append(list(out))
        out.clear()
    assert runs == [[("a", 1), ("b", 1), ("a", 2)], [("a", 3)], [("b", 2)]]
