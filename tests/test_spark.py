"""Spark stages end to end with real PySpark (local master), one Spark application shared by
every test of this module (the worker runtimes started here attach to it)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from gale import TopologyBuilder
from gale.topology.definition import TopologyTasks
from gale.worker.local import LocalTopology, complete_topology, local_conf
from gale.worker.spark.commit import BATCH_DIR_PREFIX, TEMP_DIR
from gale.worker.spark.session import acquire_spark, find_marked, spark_settings
from gale.config_keys import Config
from tests.jvm_archive import archive_key, archive_path, use_archive
from tests.waiting import until
from tests.spark_topologies import (
    CountWords, FailField, FailFirstAttempt, LowerCount, MissingField, NotAFrame, RowSpout, Totals, UpperNoLineage,
    UpperUdf, UpperWords, WordSink,
)

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

WORDS = ["apple", "banana", "cherry", "apple", "date", "banana", "apple", "elder"]


@pytest.fixture(scope="module")
def spark_handle():
    """The module's Spark application. Closing it (the last reference) must leave no process
    of the application behind: checked here, after the last test, by the application's marker.
    Its JVM starts once the class archive that make test makes in the background is there."""
    use_archive(archive_key(), wait=True)
    handle = acquire_spark(spark_settings(Config()))  # the settings every runtime here asks for
    try:
        handle.wait(180)
        yield handle
    finally:
        marker = handle.marker
        handle.close()
    until(lambda: find_marked(marker) == [], 15, lambda: f"Spark processes outlived the stopped application: "
                                                         f"{find_marked(marker)}")


@pytest.fixture
def spark(spark_handle):
    return spark_handle.session


def _chain(rows, *bolts, fields=("id", "word")):
    b = TopologyBuilder()
    b.set_spout("src", RowSpout, 1, kwargs={"rows": rows, "fields": list(fields)})
    prev = "src"
    for name, cls, kwargs in bolts:
        b.set_bolt(name, cls, 1, kwargs=kwargs).shuffle_grouping(prev)
        prev = name
    return b.create_topology()


def _instances(lt, component):
    return [obj for ex in lt.runtime.executors.values() if ex.component == component
            for obj in (getattr(ex, "spouts", None) or ex.bolts).values()]


def _run(topo, conf, timeout=120.0):
    """Run until the (replaying) spout has every row acked; returns the stopped LocalTopology."""
    lt = LocalTopology("t", topo, local_conf(topo, conf))
    (spout,) = _instances(lt, "src")
    try:
        until(spout.done, timeout, lambda: f"{len(spout.acked)} of {len(spout.rows)} acked; errors {lt.errors}")
        lt.stats = lt.component_stats()
    finally:
        lt.kill()
    return lt


def test_failing_batches_replay_and_final_counts_are_exact(spark):
    rows = [[i, WORDS[i % len(WORDS)]] for i in range(240)]
    b = TopologyBuilder()
    b.set_spout("src", RowSpout, 1, kwargs={"rows": rows})
    b.set_bolt("count", CountWords, 1, kwargs={"fail_batches": [0, 2]}).shuffle_grouping("src")
    b.set_bolt("totals", Totals, 2).fields_grouping("count", ["word"])
    lt = _run(b.create_topology(), {"topology.spark.batch.size": 40, "topology.spark.batch.millis": 200})
    (spout,) = _instances(lt, "src")
    totals = Counter()
    for bolt in _instances(lt, "totals"):
        totals.update(bolt.totals)
    assert totals == Counter(w for _, w in rows)  # every word counted exactly once
    assert spout.failed and spout.emits == len(rows) + len(spout.failed)
    errors = lt.errors["count"]
    assert len(errors) == 2 and "injected failure in batch 0" in errors[0] and "injected failure in batch 2" in errors[1]
    extra = lt.stats["count"]["extra"]
    assert extra["spark_batches_failed"] == 2 and extra["spark_batches"] >= 240 / 40 + 2
    assert extra["spark_batch_rows_in"] == len(rows) + len(spout.failed)
    assert extra["spark_batch_latency_ms_avg"] > 0 and extra["spark_start_secs"] > 0
    assert extra["spark_lineage_fallback_rows"] == 0


def test_lineage_through_group_by_replays_only_the_groups_inputs(spark):
    rows = [[i, WORDS[i % len(WORDS)]] for i in range(40)]
    topo = _chain(rows, ("count", CountWords, {}), ("check", FailField, {"bad": ["banana"]}))
    res = complete_topology(topo, {"src": rows}, conf={"topology.spark.batch.millis": 300})
    bananas = sorted(i for i, w in rows if w == "banana")
    assert res.failed == bananas and len(bananas) == 10
    assert res.acked == sorted(set(range(40)) - set(bananas))
    counted = Counter()
    for word, n in res.read("count"):
        counted[word] += n
    assert counted == Counter(w for _, w in rows)
    assert res.stats["count"]["extra"]["spark_lineage_fallback_rows"] == 0


def test_lineage_through_row_wise_transform_and_collected_row_ids(spark):
    rows = [[0, "a"], [1, "skip"], [2, "b"], [3, "c"], [4, "d"], [5, "e"], [6, "f"], [7, "g"]]
    topo = _chain(rows, ("upper", UpperWords, {}), ("check", FailField, {"field": "id", "bad": [6]}))
    res = complete_topology(topo, {"src": rows}, conf={"topology.spark.batch.millis": 300})
    assert res.failed == [6]
    assert res.acked == [0, 1, 2, 3, 4, 5, 7]  # the filtered-out input is acked too
    assert sorted(res.read("upper")) == [[0, "A"], [2, "B"], [3, "C"], [4, "D"], [5, "E"], [6, "F"], [7, "G"]]

    rows = [[0, "Apple"], [1, "apple"], [2, "pear"], [3, "PEAR"], [4, "fig"]]
    topo = _chain(rows, ("count", LowerCount, {}), ("check", FailField, {"bad": ["pear"]}))
    res = complete_topology(topo, {"src": rows}, conf={"topology.spark.batch.size": 5, "topology.spark.batch.millis": 60000})
    assert res.failed == [2, 3] and res.acked == [0, 1, 4]
    assert sorted(res.read("count")) == [["apple", 2], ["fig", 1], ["pear", 2]]


def test_python_udf_stage_keeps_row_lineage(spark_handle):
    rows = [[i, w] for i, w in enumerate(["x", "y", "z", "w"])]
    topo = _chain(rows, ("upper", UpperUdf, {}), ("check", FailField, {"field": "id", "bad": [2]}))
    res = complete_topology(topo, {"src": rows}, conf={"topology.spark.batch.size": 4, "topology.spark.batch.millis": 60000})
    assert res.failed == [2] and res.acked == [0, 1, 3]
    assert sorted(res.read("upper")) == [[0, "X"], [1, "Y"], [2, "Z"], [3, "W"]]
    # Spark's Python workers now run for the application (the teardown checks they end with it)
    names = {p.name() for p in find_marked(spark_handle.marker)}
    assert "java" in names and any(n.startswith("python") for n in names), names


def test_the_spark_jvm_maps_this_machines_class_archive(spark_handle):
    """make test archives Spark's classes once per machine (tests.jvm_archive) and every Spark JVM
    of the tests maps them: an archive the JVM quietly rejected (another Java, other jars, other
    options) would leave the tests their slow starts without a word."""
    key = archive_key()
    if key is None or not archive_path(key).is_file():
        pytest.skip("no class archive for Spark's JVM on this machine (python -m tests.jvm_archive makes one)")
    (jvm,) = [p for p in find_marked(spark_handle.marker) if p.name() == "java"]
    mapped = {m.path for m in jvm.memory_maps()}
    assert str(archive_path(key)) in mapped, sorted(p for p in mapped if p.endswith(".jsa"))


def test_lost_lineage_falls_back_to_the_whole_batch(spark):
    rows = [[i, w] for i, w in enumerate("abcdefghij")]
    topo = _chain(rows, ("upper", UpperNoLineage, {}), ("check", FailField, {"field": "up", "bad": ["B"]}))
    res = complete_topology(topo, {"src": rows},
                            conf={"topology.spark.batch.size": 10, "topology.spark.batch.millis": 60000})
    assert res.failed == list(range(10)) and res.acked == []
    extra = res.stats["upper"]["extra"]
    assert extra["spark_lineage_fallback_batches"] == 1 and extra["spark_lineage_fallback_rows"] == 10


def test_bad_transforms_and_formats_fail_the_batch_with_a_clear_error(spark, tmp_path):
    rows = [[0, "a"], [1, "b"]]
    cases = [
        (NotAFrame, {}, "transform() must return a pyspark.sql.DataFrame, got list"),
        (MissingField, {}, "lack the declared output field(s) ['score']"),
        (WordSink, {"path": str(tmp_path / "x"), "format": "parkay"}, "Spark has no DataFrameWriter format 'parkay'"),
    ]
    for cls, kwargs, message in cases:
        res = complete_topology(_chain(rows, ("stage", cls, kwargs)), {"src": rows},
                                conf={"topology.spark.batch.millis": 100})
        assert res.failed == [0, 1] and res.acked == [], cls.__name__
        (error,) = res.errors["stage"]
        assert "component 'stage'" in error and message in error, error


def test_sink_writes_every_row_exactly_once_despite_replays(spark, tmp_path):
    out = tmp_path / "words"
    rows = [[i, WORDS[i % len(WORDS)]] for i in range(160)]
    replayed = list(range(0, 160, 10))
    b = TopologyBuilder()
    b.set_spout("src", RowSpout, 1, kwargs={"rows": rows})
    b.set_bolt("sink", WordSink, 2, kwargs={"path": str(out), "key_fields": ["id"]}).fields_grouping("src", ["id"])
    b.set_bolt("check", FailFirstAttempt, 1, kwargs={"ids": replayed}).shuffle_grouping("src")
    topo = b.create_topology()
    conf = {"topology.spark.batch.size": 40, "topology.spark.batch.millis": 200}
    # a crash in the middle of an earlier write left a partial batch of each sink task behind
    for task in TopologyTasks(topo.definition, local_conf(topo, conf), 1).component_tasks("sink"):
        stale = out / TEMP_DIR / f"t{task}-0123-dead"
        stale.mkdir(parents=True)
        (stale / "part-00000.parquet").write_bytes(b"partial")
    lt = _run(topo, conf)
    (spout,) = _instances(lt, "src")
    assert sorted(set(spout.failed)) == replayed  # every replayed id reached the sink twice
    extra = lt.stats["sink"]["extra"]
    assert extra["spark_sink_rows_deduped"] == len(replayed)
    assert extra["spark_sink_rows_written"] == len(rows)
    assert os.listdir(out / TEMP_DIR) == []
    batches = [d for d in os.listdir(out) if d.startswith(BATCH_DIR_PREFIX)]
    assert len(batches) == extra["spark_sink_batches_committed"] >= 160 / 40
    written = spark.read.parquet(str(out))
    assert set(written.columns) == {"id", "word", "gale_batch"}
    got = sorted((r["id"], r["word"]) for r in written.select("id", "word").collect())
    assert got == sorted((i, w) for i, w in rows)


def test_stream_table_join_example_keeps_row_lineage(spark, tmp_path):
    import examples.spark_join as sj  # noqa: PLC0415 - the example module is the subject

    reference = sj.write_reference(str(tmp_path / "reference"))
    rows = [[i, f"u{i}", w] for i, w in enumerate(["apple", "salmon", "nope", "leek", "apple", "bread"])]
    topo = _chain(rows, ("enrich", sj.EnrichClicks, {"reference": reference}),
                  ("check", FailField, {"field": "id", "bad": [3]}), fields=("id", "user", "word"))
    res = complete_topology(topo, {"src": rows}, conf={"topology.spark.batch.size": 6, "topology.spark.batch.millis": 60000})
    assert res.failed == [3] and res.acked == [0, 1, 2, 4, 5]
    assert sorted(res.read("enrich")) == sorted([
        [0, "u0", "apple", "fruit", 1.0], [1, "u1", "salmon", "fish", 3.5], [2, "u2", "nope", "unknown", 0.0],
        [3, "u3", "leek", "vegetable", 1.2], [4, "u4", "apple", "fruit", 1.0], [5, "u5", "bread", "bakery", 1.5],
    ])
    assert res.stats["enrich"]["extra"]["spark_lineage_fallback_rows"] == 0
