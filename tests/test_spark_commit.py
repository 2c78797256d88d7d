"""The Spark sink's commit protocol (durability order) and its lineage de-duplication.

Unit tests record the commit's file operations with a recording :class:`FileLayer` and assert
their order; the integration tests run real PySpark (local master, one application for the
module) through local-mode topologies and read the Parquet back."""

from __future__ import annotations

import errno
import os
from collections import Counter

import pytest

from gale import BasicBolt, Bolt, TopologyBuilder
from gale.spark import SparkSink
from gale.worker.local import LocalTopology, local_conf
from gale.worker.spark.commit import (
    BATCH_DIR_PREFIX, KEYS_FILE, TEMP_DIR, FileLayer, LocalBatchCommitter, batch_id, lineage_key, row_key,
)
from gale.config_keys import Config
from tests.spark_topologies import RowSpout
from tests.waiting import eventually

# ------------------------------------------------------------------------------ recording layer


class RecordingFiles(FileLayer):
    """The real file layer, recording each operation as ``(op, path)`` (rename: ``(op, src, dst)``);
    ``fail_on`` = (op, basename) raises EIO there."""

    def __init__(self, fail_on: tuple[str, str] | None = None):
        self.ops: list[tuple[str, ...]] = []
        self.fail_on = fail_on

    def _record(self, op: str, *paths: str) -> None:
        self.ops.append((op, *paths))
        if self.fail_on is not None and self.fail_on == (op, os.path.basename(paths[0])):
            raise OSError(errno.EIO, f"injected {op} failure", paths[0])

    def write(self, path, data):
        self._record("write", path)
        super().write(path, data)

    def fsync_file(self, path):
        self._record("fsync_file", path)
        super().fsync_file(path)

    def fsync_dir(self, path):
        self._record("fsync_dir", path)
        super().fsync_dir(path)

    def rename(self, src, dst):
        self._record("rename", src, dst)
        super().rename(src, dst)


def assert_durable_before_marker(ops, root):
    """For every commit in ``ops``: each file and directory of the committed batch was fsynced
    before the rename that made it visible, and the sink directory was fsynced after it."""
    renames = [i for i, op in enumerate(ops) if op[0] == "rename"]
    assert renames, ops
    for i in renames:
        _, tmp, final = ops[i]
        before = ops[:i]
        synced_files = {op[1] for op in before if op[0] == "fsync_file"}
        synced_dirs = {op[1] for op in before if op[0] == "fsync_dir"}
        n_files = 0
        for here, _dirs, names in os.walk(final):
            rel = os.path.relpath(here, final)
            src_dir = os.path.normpath(os.path.join(tmp, rel))
            assert src_dir in synced_dirs, f"directory {src_dir} not fsynced before the commit marker"
            for name in names:
                n_files += 1
                assert os.path.join(src_dir, name) in synced_files, f"{name} not fsynced before the commit marker"
        assert n_files >= 2, f"{final} holds {n_files} file(s)"  # data and keys at least
        assert ("fsync_dir", root) in ops[i + 1:], "the sink directory was not fsynced after the rename"
        # a directory is fsynced after the files in it, so their entries are durable too
        last_file = max(j for j, op in enumerate(before) if op[0] == "fsync_file" and op[1].startswith(tmp))
        assert ops.index(("fsync_dir", tmp)) > last_file


def _commit_rows(committer, rows, data_files=("part-0.txt",), subdir=None):
    keys = [row_key([r]) for r in rows]
    bid = batch_id("sink", keys)
    tmp = committer.temp_dir(bid)
    where = os.path.join(tmp, subdir) if subdir else tmp
    os.makedirs(where)
    for name in data_files:  # what Spark would have written
        with open(os.path.join(where, name), "w") as f:
            f.write(" ".join(map(str, rows)))
    return tmp, bid, committer.commit(tmp, bid, keys)


def test_every_file_and_directory_is_fsynced_before_the_commit_marker(tmp_path):
    files = RecordingFiles()
    c = LocalBatchCommitter(str(tmp_path / "out"), "sink", task=1, files=files)
    c.recover()
    tmp, bid, ok = _commit_rows(c, [1, 2, 3], data_files=("part-0.parquet", "part-1.parquet", "_SUCCESS"),
                                subdir="day=2024-01-01")
    assert ok
    keys_path = os.path.join(tmp, KEYS_FILE)
    ops = files.ops
    # the exact sequence: keys written, every file fsynced (deepest directory first), the
    # directories deepest first, the marker, then the sink's directory
    assert ops == [
        ("write", keys_path),
        ("fsync_file", os.path.join(tmp, "day=2024-01-01", "_SUCCESS")),
        ("fsync_file", os.path.join(tmp, "day=2024-01-01", "part-0.parquet")),
        ("fsync_file", os.path.join(tmp, "day=2024-01-01", "part-1.parquet")),
        ("fsync_file", keys_path),
        ("fsync_dir", os.path.join(tmp, "day=2024-01-01")),
        ("fsync_dir", tmp),
        ("rename", tmp, c.batch_dir(bid)),
        ("fsync_dir", c.root),
    ]
    assert_durable_before_marker(ops, c.root)


@pytest.mark.parametrize("op,name", [("fsync_file", "part-0.txt"), ("fsync_dir", None), ("rename", None)])
def test_a_failed_fsync_or_rename_leaves_no_visible_batch_and_raises(tmp_path, op, name):
    root = tmp_path / "out"
    files = RecordingFiles()
    c = LocalBatchCommitter(str(root), "sink", task=1, files=files)
    c.recover()
    keys = [row_key([1])]
    bid = batch_id("sink", keys)
    tmp = c.temp_dir(bid)
    os.makedirs(tmp)
    (open(os.path.join(tmp, "part-0.txt"), "w")).close()
    files.fail_on = (op, name or os.path.basename(tmp))
    with pytest.raises(OSError, match="injected"):
        c.commit(tmp, bid, keys)
    assert not os.path.exists(c.batch_dir(bid))
    assert c.select_new(keys) == [0]  # not recorded as committed: the replay writes it
    if op != "rename":
        assert not any(o[0] == "rename" for o in files.ops), files.ops


# ------------------------------------------------------------------------------ with PySpark

class SplitWords(BasicBolt):
    """One word tuple per word of the sentence (anchored: a BasicBolt)."""

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])

    def execute(self, tup):
        for word in tup["sentence"].split():
            self.collector.emit([word])


class FailSentences(Bolt):
    """Fails the first attempt of each sentence id in ``ids`` (its whole tree replays)."""

    def __init__(self, ids=()):
        self.ids = set(ids)

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: set = set()

    def execute(self, tup):
        if tup["id"] in self.ids and tup["id"] not in self.seen:
            self.seen.add(tup["id"])
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


class RecordingSink(SparkSink):
    """A Parquet sink whose commits go through a recording file layer."""

    def file_layer(self):
        return RecordingFiles()


@pytest.fixture(scope="module")
def spark():
    from gale.worker.spark.session import acquire_spark, find_marked, spark_settings

    handle = acquire_spark(spark_settings(Config()))
    try:
        yield handle.wait(180)
    finally:
        marker = handle.marker
        handle.close()
    eventually(lambda: _none_left(find_marked(marker)), timeout=30)


def _none_left(processes):
    assert processes == [], f"Spark processes outlived the application: {processes}"


def _instances(lt, component):
    return [obj for ex in lt.runtime.executors.values() if ex.component == component
            for obj in (getattr(ex, "spouts", None) or ex.bolts).values()]


def _run_until_acked(topo, conf, timeout=180.0):
    lt = LocalTopology("t", topo, local_conf(topo, conf))
    (spout,) = _instances(lt, "src")
    try:
        def all_acked():
            assert spout.done(), f"{len(spout.acked)} of {len(spout.rows)} acked; errors {lt.errors}"
        eventually(all_acked, timeout=timeout)
        lt.stats = lt.component_stats()
    finally:
        lt.kill()
    return lt, spout


SENTENCES = ["apple apple pear", "pear fig", "apple", "fig fig fig", "kiwi apple", "pear"]


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_identical_rows_from_different_inputs_land_and_replays_do_not(spark, tmp_path):
    """Default de-duplication is by lineage: the two "apple" words of one sentence and the
    "apple"s of different sentences are different inputs and all land; a replayed sentence's
    words are recognised (same spout message, same emits) and land once."""
    out = tmp_path / "words"
    rows = [[i, SENTENCES[i % len(SENTENCES)]] for i in range(60)]
    replayed = list(range(0, 60, 7))
    b = TopologyBuilder()
    b.set_spout("src", RowSpout, 1, kwargs={"rows": rows, "fields": ["id", "sentence"]})
    b.set_bolt("split", SplitWords, 2).shuffle_grouping("src")
    # fields grouping on every field: a replayed row goes to the task that has its original (as the
    # docs advise for several sink tasks), and identical rows meet in one task's batches
    b.set_bolt("sink", RecordingSink, 2, kwargs={"path": str(out)}).fields_grouping("split", ["word"])
    b.set_bolt("check", FailSentences, 1, kwargs={"ids": replayed}).shuffle_grouping("src")
    topo = b.create_topology()
    lt, spout = _run_until_acked(topo, {"topology.spark.batch.size": 25, "topology.spark.batch.millis": 200})
    assert sorted(set(spout.failed)) == replayed  # each replayed sentence reached the sink twice
    expected = Counter(w for _, s in rows for w in s.split())
    written = Counter(r["word"] for r in spark.read.parquet(str(out)).select("word").collect())
    assert written == expected
    extra = lt.stats["sink"]["extra"]
    replayed_words = sum(len(rows[i][1].split()) for i in replayed)
    assert extra["spark_sink_rows_written"] == sum(expected.values())
    assert extra["spark_sink_rows_deduped"] == replayed_words
    assert os.listdir(out / TEMP_DIR) == []
    for sink in _instances(lt, "sink"):
        if any(op[0] == "rename" for op in sink.committer.files.ops):
            assert_durable_before_marker(sink.committer.files.ops, sink.committer.root)


@pytest.mark.spark
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_spark_part_files_and_partition_directories_are_fsynced_before_the_marker(spark, tmp_path):
    out = tmp_path / "events"
    rows = [[i, f"w{i % 3}"] for i in range(30)]
    b = TopologyBuilder()
    b.set_spout("src", RowSpout, 1, kwargs={"rows": rows})
    b.set_bolt("sink", RecordingSink, 1, kwargs={"path": str(out), "partition_by": ["word"]}).shuffle_grouping("src")
    lt, _spout = _run_until_acked(b.create_topology(), {"topology.spark.batch.size": 10,
                                                         "topology.spark.batch.millis": 200})
    (sink,) = _instances(lt, "sink")
    ops = sink.committer.files.ops
    assert_durable_before_marker(ops, sink.committer.root)
    parquet = [op for op in ops if op[0] == "fsync_file" and op[1].endswith(".parquet")]
    assert parquet and all(f"{os.sep}word=w" in op[1] for op in parquet), parquet  # Spark's own part files
    committed = [d for d in os.listdir(out) if d.startswith(BATCH_DIR_PREFIX)]
    assert len(committed) == lt.stats["sink"]["extra"]["spark_sink_batches_committed"] >= 3
    got = sorted((r["id"], r["word"]) for r in spark.read.parquet(str(out)).select("id", "word").collect())
    assert got == sorted((i, w) for i, w in rows)


def test_lineage_keys_separate_identical_values_and_match_replays():
    assert lineage_key(5, ["apple"]) == lineage_key(5, ["apple"])
    assert lineage_key(5, ["apple"]) != lineage_key(6, ["apple"])
    assert lineage_key(5, ["apple"]) != lineage_key(5, ["pear"])
    assert lineage_key(-5, ["apple"]) != lineage_key(5, ["apple"])
