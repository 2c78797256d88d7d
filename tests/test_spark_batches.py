"""Batch streams through Spark stages with real PySpark (local master): Arrow batches in, batch
tuples out, lineage at the granularity of input batch tuples, failing transforms, bad batches,
and a sink writing batch tuples once despite replays. One Spark application for the module."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pytest

from gale import TopologyBuilder
from gale.spark import ARROW_BATCH
from gale.worker.local import LocalTopology, complete_topology, local_conf
from gale.worker.spark.commit import BATCH_DIR_PREFIX
from tests.spark_batch_topologies import (
    BatchSpout, BatchTotals, CountBatchWords, FailBatchHolding, FailFirstBatch, MissingOutputColumn, SchemaOnBatches,
    UpperBatchRows, UpperBatches, word_batch,
)
from tests.spark_topologies import FailField, WordSink
from tests.test_spark import _instances, _run, spark, spark_handle  # noqa: F401 - the module's Spark fixtures

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

WORDS = ["apple", "banana", "cherry", "apple", "date", "banana", "apple", "elder"]


def _stage(cls, kwargs=None, after=None):
    """src (mocked) → stage → optional check bolt."""
    b = TopologyBuilder()
    b.set_spout("src", BatchSpout, 1)
    b.set_bolt("stage", cls, 1, kwargs=kwargs or {}).shuffle_grouping("src")
    if after is not None:
        b.set_bolt("check", after[0], 1, kwargs=after[1]).shuffle_grouping("stage")
    return b.create_topology()


def _tables(*word_lists):
    """Mock spout input: one batch tuple per word list, ids numbered across them."""
    out, start = [], 0
    for words in word_lists:
        out.append([word_batch(words, start)])
        start += len(words)
    return out


def test_batch_tuples_count_exactly_with_a_failing_micro_batch_replayed(spark):
    batches = [[WORDS[(i + j) % len(WORDS)] for j in range(20)] for i in range(12)]
    b = TopologyBuilder()
    b.set_spout("src", BatchSpout, 1, kwargs={"batches": batches})
    b.set_bolt("count", CountBatchWords, 1, kwargs={"fail_batches": [1]}).shuffle_grouping("src")
    b.set_bolt("totals", BatchTotals, 1).shuffle_grouping("count")
    lt = _run(b.create_topology(), {"topology.spark.batch.size": 60, "topology.spark.batch.millis": 200})
    (spout,) = _instances(lt, "src")
    (totals,) = _instances(lt, "totals")
    assert totals.totals == Counter(w for words in batches for w in words)  # every row counted once
    assert spout.failed and len(set(spout.failed)) == len(spout.failed)     # one micro-batch failed, once
    (error,) = lt.errors["count"]
    assert "injected failure in batch 1" in error and f"failed its {len(spout.failed)} tuple(s)" in error
    stats = lt.stats["count"]
    extra = stats["extra"]
    assert extra["spark_batches_failed"] == 1
    # rows, not tuples: every batch tuple's 20 rows, the failed ones twice
    assert extra["spark_batch_rows_in"] == 20 * (len(batches) + len(spout.failed))
    assert stats["executed"] == len(batches) + len(spout.failed)  # tuples
    assert extra["spark_batch_size_avg"] > 3  # rows per micro-batch, not batch tuples
    # each successful micro-batch's 5 words occur in all its inputs: one output batch tuple each
    assert totals.tables == extra["spark_batches"] - 1 and extra["spark_lineage_fallback_rows"] == 0


def test_grouped_lineage_replays_exactly_the_input_batches_involved(spark):
    inputs = _tables(["a", "b", "a"], ["c", "d"], ["a", "e"], ["f"])
    conf = {"topology.spark.batch.size": 8, "topology.spark.batch.millis": 60000}  # the 8 rows: one micro-batch
    res = complete_topology(_stage(CountBatchWords, after=(FailBatchHolding, {"bad": ["c"]})), {"src": inputs},
                            conf=conf)
    assert res.failed == [1] and res.acked == [0, 2, 3]
    # one output batch per set of inputs its rows derive from: "a" from batches 0 and 2, "c" and "d" from 1
    groups = sorted(sorted(t.column("word").to_pylist()) for (t,) in res.read("stage"))
    assert groups == [["a"], ["b"], ["c", "d"], ["e"], ["f"]]
    assert all(isinstance(t, pa.Table) and t.column_names == ["word", "count"] for (t,) in res.read("stage"))
    assert res.stats["stage"]["extra"]["spark_lineage_fallback_rows"] == 0

    res = complete_topology(_stage(CountBatchWords, after=(FailBatchHolding, {"bad": ["a"]})), {"src": inputs},
                            conf=conf)
    assert res.failed == [0, 2] and res.acked == [1, 3]


def test_row_lineage_from_batches_to_rows_and_to_batches(spark):
    inputs = _tables(["a", "skip"], ["b", "c"], ["skip"], ["d"])
    conf = {"topology.spark.batch.size": 6, "topology.spark.batch.millis": 60000}
    # rows out: each row anchored to its input batch tuple
    res = complete_topology(_stage(UpperBatchRows, after=(FailField, {"field": "id", "bad": [3]})), {"src": inputs},
                            conf=conf)
    assert res.failed == [1] and res.acked == [0, 2, 3]  # id 3 ("c") is in batch 1; batch 2 was all filtered out
    assert sorted(res.read("stage")) == [[0, "A"], [2, "B"], [3, "C"], [5, "D"]]
    # batches out: one output batch per input batch that kept rows, with output_columns only
    res = complete_topology(_stage(UpperBatches, after=(FailBatchHolding, {"field": "up", "bad": ["D"]})),
                            {"src": inputs}, conf=conf)
    assert res.failed == [3] and res.acked == [0, 1, 2]
    out = sorted((t.to_pylist() for (t,) in res.read("stage")), key=lambda rows: rows[0]["id"])
    assert out == [[{"id": 0, "up": "A"}], [{"id": 2, "up": "B"}, {"id": 3, "up": "C"}], [{"id": 5, "up": "D"}]]


def test_bad_batches_fail_with_an_error_naming_the_component(spark):
    conf = {"topology.spark.batch.size": 2, "topology.spark.batch.millis": 60000}
    cases = [
        ([[word_batch(["a"])], [{"id": 1, "word": "b"}]], "carries a builtins.dict, not a pyarrow.Table"),
        ([[word_batch(["a"])], [pa.table({"id": [1], "word": [2]})]], "must have one schema"),
    ]
    two = [[word_batch(["a"])], [word_batch(["b"], 1)]]
    cases += [
        (two, "lack the output_columns ['score'] (declared: ['id', 'score'])", MissingOutputColumn),
    ]
    for inputs, message, *cls in cases:
        res = complete_topology(_stage(*(cls or [CountBatchWords])), {"src": inputs}, conf=conf)
        assert res.failed == [0, 1] and res.acked == [], message
        (error,) = res.errors["stage"]
        assert "component 'stage'" in error and message in error, error


def test_sink_writes_every_batch_once_despite_replays(spark, tmp_path):
    out = tmp_path / "words"
    batches = [[WORDS[(i + j) % len(WORDS)] for j in range(10)] for i in range(8)]
    b = TopologyBuilder()
    b.set_spout("src", BatchSpout, 1, kwargs={"batches": batches})
    b.set_bolt("sink", WordSink, 1, kwargs={"path": str(out)}).shuffle_grouping("src")
    b.set_bolt("check", FailFirstBatch, 1, kwargs={"ids": [20, 50]}).shuffle_grouping("src")  # batches 2 and 5
    lt = _run(b.create_topology(), {"topology.spark.batch.size": 30, "topology.spark.batch.millis": 200})
    (spout,) = _instances(lt, "src")
    assert sorted(spout.failed) == [2, 5]
    extra = lt.stats["sink"]["extra"]
    assert extra["spark_sink_rows_written"] == 80 and extra["spark_sink_rows_deduped"] == 20
    assert len([d for d in os.listdir(out) if d.startswith(BATCH_DIR_PREFIX)]) == extra["spark_sink_batches_committed"]
    written = spark.read.parquet(str(out))
    assert set(written.columns) == {"id", "word", "gale_batch"}
    got = sorted((r["id"], r["word"]) for r in written.select("id", "word").collect())
    assert got == sorted((10 * i + j, w) for i, words in enumerate(batches) for j, w in enumerate(words))


@pytest.mark.parametrize("cls, kwargs, message", [
    (WordSink, {"path": "unused", "key_fields": ["id"]}, "Spark sink 'stage': key_fields is not supported on a batch stream"),
    (SchemaOnBatches, {}, "Spark component 'stage': input_schema does not apply to a batch stream"),
])
def test_options_that_do_not_apply_to_batch_streams_fail_the_start(spark, cls, kwargs, message):
    topo = _stage(cls, kwargs)
    with pytest.raises(ValueError, match=message):
        LocalTopology("t", topo, local_conf(topo, {}))


def test_a_batch_stream_is_one_declared_field():
    topo = _stage(CountBatchWords)
    assert topo.definition.components["src"].streams["default"].fields == [ARROW_BATCH]
