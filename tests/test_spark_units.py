"""The pure parts of the Spark stages, without Spark: batching policy, lineage mapping, batch ids
and the commit protocol, Arrow conversion, settings; and the batch executor's flow (backpressure,
start failure, timeouts) with the Spark application replaced by a stand-in handle."""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import Future

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale import TopologyBuilder
from gale.clock import SimulatedClock
from gale.topology.tuple import Fields, Tuple
from gale.worker.assembly import Assembly
from gale.worker.local import LocalTopology, local_conf
from gale.worker.runtime.runtime import WorkerRuntime
from gale.worker.spark import lineage as lin
from gale.worker.spark.batching import Batcher, BatchPolicy
from gale.worker.spark.commit import BATCH_DIR_PREFIX, KEYS_FILE, TEMP_DIR, LocalBatchCommitter, batch_id, row_key
from gale.worker.spark.stage import BatchResult
from gale.worker.spark.frames import SparkStageError, key_index, tuples_to_arrow
from gale.worker.spark.lineage import ROW_ID
from gale.worker.spark.session import SparkHandle, acquire_spark, local_cores, spark_settings
from gale.config_keys import Config
from tests.spark_topologies import PythonCount, RowSpout
from tests.topologies import Sink

# ------------------------------------------------------------------------------ batching


def test_batch_due_by_size_or_age_and_never_overfull():
    b = Batcher(BatchPolicy(size=3, millis=500))
    assert not b.due(0.0) and b.room() == 3 and b.next_due_at() is None
    b.add("a", 10.0)
    b.add("b", 10.2)
    assert not b.due(10.49)
    assert b.due(10.5)  # the oldest waited 500 ms
    b.add("c", 10.3)
    assert b.due(10.3) and b.room() == 0  # full
    with pytest.raises(OverflowError):
        b.add("d", 10.3)
    assert b.take() == ["a", "b", "c"] and len(b) == 0 and not b.due(99.0)
    b.add("e", 20.0)
    assert b.next_due_at() == pytest.approx(20.5)


def test_batch_extend_takes_several_and_never_overfills():
    b = Batcher(BatchPolicy(size=3, millis=500))
    b.extend([], 5.0)
    assert b.next_due_at() is None
    b.extend(["a", "b"], 10.0)
    assert b.items == ["a", "b"] and b.next_due_at() == pytest.approx(10.5)
    with pytest.raises(OverflowError, match="2 \\+ 2 > 3"):
        b.extend(["c", "d"], 10.1)
    b.extend(["c"], 10.2)
    assert b.due(10.2) and b.take() == ["a", "b", "c"]


def test_batch_policy_from_conf_and_validation():
    assert BatchPolicy.from_conf({"topology.spark.batch.size": 7, "topology.spark.batch.millis": 30}) == BatchPolicy(7, 30.0)
    with pytest.raises(ValueError):
        BatchPolicy(0, 10)
    with pytest.raises(ValueError):
        BatchPolicy(1, 0)


# ------------------------------------------------------------------------------ lineage


def test_row_ids_map_to_single_inputs_and_unresolvable_rows_to_the_batch():
    a = lin.from_row_ids([2, 0, None, 9, 1], n_inputs=3)
    assert a.anchors == [2, 0, None, None, 1]
    assert a.fallback_rows == 2
    assert a.edges(3) == 1 + 1 + 3 + 3 + 1


def test_row_id_lists_dedupe_and_fall_back_on_nulls_or_foreign_ids():
    a = lin.from_row_id_lists([[3, 1, 3], [0], [], None, [1, None], [5]], n_inputs=4)
    assert a.anchors == [(1, 3), 0, None, None, None, None]
    assert a.fallback_rows == 4


def test_keys_anchor_each_output_to_its_group_only():
    inputs = [lin.hashable_key([w]) for w in ["a", "b", "a", "c", "a"]]
    a = lin.from_keys(inputs, [("a",), ("c",), ("zz",)])
    assert a.anchors == [(0, 2, 4), 3, None]
    assert a.fallback_rows == 1
    # every input in exactly one group: cost grows with inputs, not inputs x outputs
    assert lin.from_keys(inputs, [("a",), ("b",), ("c",)]).edges(5) == 5


def test_unhashable_keys_compare_by_repr():
    inputs = [lin.hashable_key([[1, 2]]), lin.hashable_key([[3]])]
    assert lin.from_keys(inputs, [lin.hashable_key([[3]])]).anchors == [1]


_KEY_VALUES = {
    "int": st.one_of(st.none(), st.integers(-3, 3), st.integers(-(2**63), 2**63 - 1)),
    "str": st.one_of(st.none(), st.sampled_from(["", "a", "b", "é", "a\x00"])),
    "bool": st.one_of(st.none(), st.booleans()),
}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(_KEY_VALUES)).flatmap(lambda kind: st.tuples(
    st.just(kind), st.lists(_KEY_VALUES[kind], max_size=40), st.lists(_KEY_VALUES[kind], max_size=10))))
def test_keys_grouped_in_arrow_anchor_exactly_as_grouped_in_python(case):
    kind, inputs, outputs = case
    kind = {"int": pa.int64(), "str": pa.string(), "bool": pa.bool_()}[kind]
    column = pa.chunked_array([pa.array(inputs[:3], type=kind), pa.array(inputs[3:], type=kind)])
    index = key_index(column)
    assert index is not None
    out_keys = [lin.hashable_key([v]) for v in outputs]
    expected = lin.from_keys([lin.hashable_key([v]) for v in inputs], out_keys)
    assert lin.from_key_index(index, out_keys) == expected


def test_keys_of_other_types_are_left_to_python():
    assert key_index(pa.array([0.0, -0.0, float("nan")])) is None  # -0.0 == 0.0 in Python
    assert key_index(pa.array([[1], [1]])) is None
    assert key_index(pa.array([None, None])) is None  # no type to group by


def test_whole_batch_and_lineage_columns():
    assert lin.whole_batch(2).anchors == [None, None]
    assert lin.Lineage("row").columns() == [ROW_ID]
    assert lin.Lineage("keys", (("w", "word"),)).columns() == ["w"]
    assert lin.Lineage("batch").columns() == []


# ------------------------------------------------------------------------------ commit protocol


def test_row_keys_are_stable_and_batch_ids_order_independent():
    k1 = row_key([1, "a", 2.5, None, b"x"])
    assert k1 == row_key([1, "a", 2.5, None, b"x"]) and len(k1) == 16
    assert k1 != row_key([1, "a", 2.5, None, b"y"])
    assert row_key([1]) != row_key(["1"])
    keys = [row_key([i]) for i in range(5)]
    assert batch_id("sink", keys) == batch_id("sink", list(reversed(keys)))
    assert batch_id("sink", keys) != batch_id("other", keys)
    assert batch_id("sink", keys) != batch_id("sink", keys[:4])


def _write_batch(committer, rows):
    keys = [row_key([r]) for r in rows]
    keep = committer.select_new(keys)
    if not keep:
        return None
    kept = [keys[i] for i in keep]
    bid = batch_id("sink", kept)
    tmp = committer.temp_dir(bid)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "part-0.txt"), "w") as f:
        f.write("\n".join(str(rows[i]) for i in keep))
    return bid if committer.commit(tmp, bid, kept) else None


def _committed_rows(root):
    rows = []
    for name in sorted(os.listdir(root)):
        if name.startswith(BATCH_DIR_PREFIX):
            with open(os.path.join(root, name, "part-0.txt")) as f:
                rows += [int(x) for x in f.read().split()]
    return rows


def test_replayed_and_regrouped_rows_are_written_once(tmp_path):
    c = LocalBatchCommitter(str(tmp_path / "out"), "sink", task=3)
    c.recover()
    assert _write_batch(c, [1, 2, 3]) is not None
    assert _write_batch(c, [1, 2, 3]) is None  # the same batch replayed
    assert _write_batch(c, [3, 4, 4, 5]) is not None  # regrouped: 3 is old, 4 repeats in the batch
    assert sorted(_committed_rows(c.root)) == [1, 2, 3, 4, 5]
    # a second task (or a restarted one) sees what was committed
    other = LocalBatchCommitter(str(tmp_path / "out"), "sink", task=4)
    other.recover()
    assert _write_batch(other, [5, 6]) is not None
    assert c.refresh() == 1 and _write_batch(c, [6]) is None
    assert sorted(_committed_rows(c.root)) == [1, 2, 3, 4, 5, 6]


def test_same_batch_id_commits_once_and_loser_cleans_up(tmp_path):
    a = LocalBatchCommitter(str(tmp_path), "sink", task=1)
    b = LocalBatchCommitter(str(tmp_path), "sink", task=2)
    a.recover()
    b.recover()
    keys = [row_key([1])]
    bid = batch_id("sink", keys)
    ta, tb = a.temp_dir(bid), b.temp_dir(bid)
    os.makedirs(ta)
    os.makedirs(tb)
    assert a.commit(ta, bid, keys) is True
    assert b.commit(tb, bid, keys) is False
    assert not os.path.exists(tb)
    assert os.listdir(os.path.join(tmp_path, TEMP_DIR)) == []
    with open(os.path.join(a.batch_dir(bid), KEYS_FILE), "rb") as f:
        assert f.read() == keys[0]


def test_recover_removes_only_own_partial_writes(tmp_path):
    root = tmp_path / "out"
    mine, theirs = root / TEMP_DIR / "t7-abc-1", root / TEMP_DIR / "t8-abc-1"
    for d in (mine, theirs):
        d.mkdir(parents=True)
        (d / "part-0.parquet").write_text("partial")
    c = LocalBatchCommitter(str(root), "sink", task=7)
    assert c.recover() == ["t7-abc-1"]
    assert not mine.exists() and theirs.exists()


def test_dedup_window_forgets_old_batches(tmp_path):
    clock = SimulatedClock()
    c = LocalBatchCommitter(str(tmp_path), "sink", task=1, window_secs=60, clock=clock)
    c.recover()
    _write_batch(c, [1])
    clock.advance(61)
    c._next_prune = 0
    c.refresh()
    assert c.select_new([row_key([1])]) == [0]


def test_non_local_paths_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="hdfs"):
        LocalBatchCommitter("hdfs://nn/data", "sink", 1)


# ------------------------------------------------------------------------------ arrow


def _tuples(rows, fields=("id", "word")):
    f = Fields(fields, "src:default")
    return [Tuple(list(r), f, "src", "default", 1, None) for r in rows]


def test_tuples_to_arrow_adds_row_ids_and_names_bad_fields():
    table = tuples_to_arrow("c", _tuples([(1, "a"), (2, None)]), ["id", "word"])
    assert table.column_names == ["id", "word", ROW_ID]
    assert table.column(ROW_ID).to_pylist() == [0, 1]
    assert table.column("word").to_pylist() == ["a", None]
    with pytest.raises(SparkStageError, match=r"component 'c': input field 'word'.*\['int', 'str'\]"):
        tuples_to_arrow("c", _tuples([(1, "a"), (2, 3)]), ["id", "word"])
    typed = tuples_to_arrow("c", _tuples([(1, "a")]), ["id", "word"], {"id": pa.int32()}, row_ids=False)
    assert typed.schema.field("id").type == pa.int32() and typed.column_names == ["id", "word"]


# ------------------------------------------------------------------------------ settings


def test_settings_defaults_and_pass_through():
    s = spark_settings(Config.resolve({"topology.spark.master": "local[3]",
                                       "topology.spark.conf": {"spark.ui.enabled": True, "x.y": 5}},
                                      allow_user_keys=False))
    conf = s.conf_dict()
    assert s.master == "local[3]" and not s.connect
    assert conf["spark.ui.enabled"] == "true"  # the user's setting wins
    assert conf["spark.ui.showConsoleProgress"] == "false"
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert conf["x.y"] == "5"
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"]
    assert spark_settings(Config()).master == "local[2]"
    assert spark_settings(Config()).identity == spark_settings(Config(), app_name="other").identity
    connect = spark_settings(Config(topology_spark_master="sc://spark.example:15002"))
    assert connect.connect and "spark.ui.enabled" not in connect.conf_dict()
    assert [local_cores(m) for m in ("local", "local[4]", "local[2,3]", "spark://h:7077")] == [1, 4, 2, None]
    assert local_cores("local[*]") == (os.cpu_count() or 1)


def test_spark_connect_without_its_client_fails_clearly(monkeypatch):
    monkeypatch.setitem(sys.modules, "grpc", None)  # as if pyspark[connect] were not installed
    handle = acquire_spark(spark_settings(Config(topology_spark_master="sc://127.0.0.1:1")))
    try:
        with pytest.raises(Exception, match=r"Spark Connect.*pyspark\[connect\]"):
            handle.wait(30)
        assert handle.failed() and handle.status() == "failed"
    finally:
        handle.close()
    assert handle.status() == "closed"


# ------------------------------------------------------------------------------ executor flow


class StandInSpark:
    """A Spark handle for executor tests: its future is resolved by the test."""

    def __init__(self):
        self.future: Future = Future()
        self.start_secs = 1.5
        self.closed = False
        self.attempts = 1
        self.retry_allowed = False  # the test says when the backoff is over
        self.retry_bases: list[float] = []

    def restart_if_due(self, base_secs):
        self.retry_bases.append(base_secs)
        if not (self.failed() and self.retry_allowed):
            return False
        self.retry_allowed = False
        self.future = Future()
        self.attempts += 1
        return True

    def ready(self):
        return self.future.done() and self.future.exception() is None

    def failed(self):
        return self.future.done() and self.future.exception() is not None

    @property
    def error(self):
        return self.future.exception()

    @property
    def session(self):
        return self.future.result(0)

    def close(self):
        self.closed = True


class StandInSession:
    def addTag(self, tag):
        pass

    def removeTag(self, tag):
        pass

    def interruptTag(self, tag):
        return []


def _runtime(rows, conf=None, clock=None, sink_cls=Sink):
    b = TopologyBuilder()
    b.set_spout("src", RowSpout, 1, kwargs={"rows": rows})
    b.set_bolt("count", PythonCount, 1).shuffle_grouping("src")
    b.set_bolt("sink", sink_cls, 1).shuffle_grouping("count")
    topo = b.create_topology()
    spark = StandInSpark()
    full = local_conf(topo, conf)
    lt = LocalTopology("t", topo, full, start=False)
    rt = WorkerRuntime(topo, topology_id="t-local", conf=full, layout=lt.layout, executors=lt.layout.executors,
                       clock=clock or SimulatedClock(), resources={"spark": spark}, factory=Assembly())
    rt.start(spawn=False)
    return rt, spark


def _executor(rt, name):
    return next(ex for ex in rt.executors.values() if ex.component == name)


def _spout(rt):
    return next(iter(_executor(rt, "src").spouts.values()))


def _drive(rt, clock, until, seconds=10.0, step=0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        clock.advance(step)
        rt.fire_timers(clock.monotonic())
        rt.run_until_idle(1000)
        if until():
            return True
        time.sleep(0.002)  # the poll interval of this driver (it ends on until()): job threads run meanwhile
    return False


def test_while_spark_starts_tuples_queue_and_backpressure_pauses_the_spout():
    rows = [[i, "w"] for i in range(5000)]
    clock = SimulatedClock()
    rt, spark = _runtime(rows, {"topology.executor.receive.buffer.size": 100, "topology.spark.batch.size": 50}, clock)
    try:
        for _ in range(200):
            rt.fire_timers(clock.monotonic())
            rt.update_congestion()
            for t in rt.threads:
                t.run_round()
        ex = _executor(rt, "count")
        assert rt.congested
        assert ex.pending_count() == 50  # one full batch held, the rest left in the input queue
        assert _spout(rt).next < 400  # the spout stopped, memory did not grow without bound
        spark.future.set_result(StandInSession())
        assert _drive(rt, clock, lambda: _spout(rt).done(), seconds=30)
        assert ex.stats.extra["spark_batches"] >= 5000 / 50
        assert ex.stats.extra["spark_start_secs"] == 1.5 and ex.stats.extra["spark_ready"] == 1.0
    finally:
        rt.stop()
    assert spark.closed


def test_held_tuples_do_not_time_out_while_spark_starts():
    clock = SimulatedClock()
    rt, spark = _runtime([[i, "w"] for i in range(20)], {"topology.message.timeout.secs": 10}, clock)
    try:
        for _ in range(16):  # 80 simulated seconds, 8 message timeouts
            clock.advance(5)
            rt.fire_timers(clock.monotonic())
            rt.run_until_idle(1000)
        assert _spout(rt).failed == []
        spark.future.set_result(StandInSession())
        assert _drive(rt, clock, lambda: _spout(rt).done())
        assert _spout(rt).failed == []
    finally:
        rt.stop()


def test_spark_start_failure_fails_batches_and_reports_the_error():
    clock = SimulatedClock()
    rt, spark = _runtime([[i, "w"] for i in range(10)], {"topology.spark.batch.millis": 100}, clock)
    try:
        spark.future.set_exception(RuntimeError("Could not parse Master URL: 'bogus'"))
        assert _drive(rt, clock, lambda: len(_spout(rt).failed) >= 10)
        assert set(_spout(rt).failed) >= set(range(10)) and not _spout(rt).acked
        (err, *_) = rt.errors["count"]
        assert "Spark is not available" in err and "Could not parse Master URL" in err
    finally:
        rt.stop()


def test_a_failed_spark_start_is_retried_and_the_replays_then_succeed():
    clock = SimulatedClock()
    rows = [[i, "w"] for i in range(10)]
    rt, spark = _runtime(rows, {"topology.spark.batch.millis": 100, "topology.spark.start.retry.secs": 7}, clock)
    try:
        spark.future.set_exception(RuntimeError("Service 'sparkDriver' could not bind on port 7078"))
        assert _drive(rt, clock, lambda: len(_spout(rt).failed) >= 10)
        assert not _spout(rt).acked and set(spark.retry_bases) == {7.0}  # asked with the configured base
        spark.retry_allowed = True  # the backoff is over: the executor starts a second attempt
        assert _drive(rt, clock, lambda: spark.attempts == 2)
        ex = _executor(rt, "count")
        failed_before = len(_spout(rt).failed)
        for _ in range(20):  # the new attempt is pending: batches are held, not failed
            clock.advance(0.05)
            rt.fire_timers(clock.monotonic())
            rt.run_until_idle(1000)
        assert len(_spout(rt).failed) == failed_before and ex.pending_count() > 0
        spark.future.set_result(StandInSession())
        assert _drive(rt, clock, lambda: _spout(rt).done())  # every row acked after its replay
        assert ex.stats.extra["spark_start_attempts"] == 2.0 and ex.stats.extra["spark_ready"] == 1.0
    finally:
        rt.stop()


def test_spark_that_never_starts_fails_tuples_after_the_start_timeout():
    clock = SimulatedClock()
    rt, spark = _runtime([[i, "w"] for i in range(5)], {"topology.message.timeout.secs": 1000}, clock)
    try:
        ex = _executor(rt, "count")
        ex.body.start_timeout = 30.0
        clock.advance(29)
        rt.fire_timers(clock.monotonic())
        rt.run_until_idle(1000)
        assert _spout(rt).failed == []
        assert _drive(rt, clock, lambda: len(_spout(rt).failed) >= 5, step=1.0)
        assert "did not start within 30 s" in rt.errors["count"][0]
    finally:
        rt.stop()


def test_a_hung_batch_is_abandoned_and_its_tuples_fail():
    clock = SimulatedClock()
    release = threading.Event()
    rt, spark = _runtime([[i, "hang"] for i in range(4)], {"topology.message.timeout.secs": 1000}, clock)
    try:
        ex = _executor(rt, "count")
        ex.body.batch_timeout = 60.0
        bolt = next(iter(ex.bolts.values()))
        bolt.hang = release
        spark.future.set_result(StandInSession())
        assert _drive(rt, clock, lambda: ex.body.states[min(ex.body.states)].running is not None)
        assert _drive(rt, clock, lambda: len(_spout(rt).failed) >= 4, step=5.0)
        assert "batch ran longer than 60 s" in rt.errors["count"][0]
    finally:
        release.set()
        rt.stop()


def test_batch_result_defaults():
    r = BatchResult()
    assert r.values == [] and r.anchoring is None and r.written == 0 and r.committed == 0


def test_handle_without_application_is_failed_and_closes():
    h = SparkHandle(None, RuntimeError("nope"))
    assert h.failed() and not h.ready() and h.status() == "failed"
    with pytest.raises(RuntimeError):
        h.session
    h.close()
    assert h.status() == "closed"
