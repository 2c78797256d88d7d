"""Spark beyond ``local[N]``: a topology's Spark stage on a real Spark standalone cluster (a master
and two workers on loopback, started from PySpark's own classes), its code shipped to the executors
by Spark; an executor lost mid-batch fails that batch and replays only its tuples, a whole Spark
worker lost mid-batch has its tasks re-run by Spark on the other worker (nothing fails)."""

from __future__ import annotations

import json
import os
import zipfile
from collections import Counter
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import pytest

from gale.worker.spark.session import code_archive, spark_settings, topology_code_dir
from gale.config_keys import Config
from tests.cluster import CORPUS, DurableInput, cli, dump_logs, make_cluster
from tests.spark_standalone import SparkStandalone
from tests.waiting import eventually

PIPELINE = Path(__file__).resolve().parent / "spark_cluster_topology" / "pipeline.py"
BATCH = 1000  # topology.spark.batch.size of the pipeline


# ------------------------------------------------------------------------------ the code archive (no Spark)


def test_the_code_archive_holds_the_topology_directory_without_caches(tmp_path):
    code = tmp_path / "code"
    (code / "pkg" / "__pycache__").mkdir(parents=True)
    (code / "pipeline.py").write_text("import wordlib\n")
    (code / "wordlib.py").write_text("X = 1\n")
    (code / "pkg" / "__init__.py").write_text("")
    (code / "pkg" / "data.txt").write_text("d")
    (code / "pkg" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (code / ".git").mkdir()
    (code / ".git" / "HEAD").write_text("ref")
    for f in code.rglob("*"):
        os.utime(f, (0, 0))  # bundles are unpacked with mtime 0 (1970), which zip cannot store as is
    out = code_archive(code, tmp_path / "w" / "spark" / "topology-code.zip")
    with zipfile.ZipFile(out) as zf:
        assert sorted(zf.namelist()) == ["pipeline.py", "pkg/__init__.py", "pkg/data.txt", "wordlib.py"]
    assert not list((tmp_path / "w" / "spark").glob("*.tmp"))


def test_settings_ship_py_files_except_to_spark_connect(tmp_path):
    conf = Config.resolve({"topology.spark.master": "spark://h:7077", "storm.local.dir": str(tmp_path)},
                          allow_user_keys=False)
    assert spark_settings(conf, py_files=("/a.zip",)).py_files == ("/a.zip",)
    connect = Config.resolve({"topology.spark.master": "sc://h:15002"}, allow_user_keys=False)
    assert spark_settings(connect, py_files=("/a.zip",)).py_files == ()
    assert topology_code_dir(conf, "t-1-2") == tmp_path / "supervisor" / "stormdist" / "t-1-2" / "code"
    # applications with different code are different applications
    assert spark_settings(conf, py_files=("/a.zip",)).identity != spark_settings(conf).identity


# ------------------------------------------------------------------------------ a real standalone cluster


def status(c, name):
    return json.loads(cli(c, "status", name, "--json").stdout)


def extra(c, name, component, key) -> float:
    stats = status(c, name)["components"][component]["stats"] or {}
    return float((stats.get("extra") or {}).get(key, 0))


def parquet_rows(path: Path) -> list[dict]:
    if not path.exists() or not any(path.glob("gale_batch=*")):
        return []
    return ds.dataset(str(path), format="parquet", partitioning="hive").to_table(
        columns=["id", "pos", "word", "where"]).to_pylist()


def failed_ids(state: Path) -> set[int]:
    return {int(x) for p in state.glob("failed-*.log") for x in p.read_text().split()}


@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_a_spark_stage_on_a_standalone_cluster_survives_losing_a_spark_worker_mid_batch(zk_server, tmp_path):
    spark = SparkStandalone(tmp_path / "spark", workers=2, cores=1, memory="1g").start()
    c = make_cluster(zk_server, tmp_path, supervisors=1, slots=1)
    try:
        c.start()
        n = 4000
        work = DurableInput(tmp_path / "w", n)
        out = tmp_path / "parquet"
        cli(c, "submit", str(PIPELINE), "--name", "standalone",
            *work.overrides(**{"test.parquet": str(out), "test.spark.master": spark.url}))

        def flowing_on_the_cluster():
            app = spark.status().get("activeapps") or []
            assert len(app) == 1 and app[0]["state"] == "RUNNING", app  # the worker's driver registered
            assert len(parquet_rows(out)) > 2 * BATCH  # batches went through both stages
        eventually(flowing_on_the_cluster, 400, 1.0)

        def failed_batches() -> float:
            return extra(c, "standalone", "normalize", "spark_batches_failed") + \
                extra(c, "standalone", "sink", "spark_batches_failed")

        assert failed_batches() == 0
        hold = work.state / "hold"

        def hold_a_batch() -> int:
            """Hold the stage's UDF until a batch is held on an executor; the Spark worker's index.
            Markers of Python workers that are gone (an executor killed, a task cancelled) are not
            counted, so a marker left by an earlier hold never stands for a new one."""
            hold.write_text("")

            def held() -> int:
                markers = [m for m in work.state.glob("running-*") if psutil.pid_exists(int(m.name.split("-", 1)[1]))]
                cwds = [m.read_text() for m in markers]
                on = [i for i in range(2) for cwd in cwds if cwd.startswith(str(spark.base / f"worker-{i}") + "/")]
                assert on, cwds
                return on[0]
            return eventually(held, 120, 0.5)

        # 1. an executor dies mid-batch (its Spark worker lives and starts another): with
        #    spark.task.maxFailures 1 the job fails, so the batch fails — and only its tuples replay.
        #    The hold stays: the replayed tuples form a new batch, which holds in its turn (so step 2
        #    never depends on input being left after step 1)
        i = hold_a_batch()
        assert spark.kill_executors(i)

        def a_batch_failed():
            assert failed_batches() >= 1
        eventually(a_batch_failed, 180, 1.0)
        replayed_after_executor_loss = len(failed_ids(work.state))
        assert 0 < replayed_after_executor_loss <= BATCH

        # 2. a whole Spark worker dies mid-batch (kill -9 of its JVM and executors): Spark re-runs
        #    the lost tasks on the other worker (a lost worker does not count as a task failure), so
        #    the batch completes late and nothing more fails or replays. No normalize batch can
        #    complete while the hold stands, so the count read now is at most the count before it
        batches = extra(c, "standalone", "normalize", "spark_batches")
        failed = failed_batches()
        j = hold_a_batch()
        killed = spark.kill_worker(j)
        assert len(killed) >= 2, killed
        hold.unlink()

        def went_on_without_a_failure():
            assert extra(c, "standalone", "normalize", "spark_batches") >= batches + 1  # the held one completed
            assert failed_batches() == failed
        eventually(went_on_without_a_failure, 180, 1.0)

        work.wait_all_acked(400)
        rows = parquet_rows(out)
        # the idempotent sink holds: every (id, pos) exactly once, the words as the UDF made them
        keys = Counter((r["id"], r["pos"]) for r in rows)
        expected = {(i, p) for i in range(n) for p in range(len(CORPUS[i % len(CORPUS)].split()))}
        assert set(keys) == expected, f"missing {len(expected - set(keys))} rows"
        assert max(keys.values()) == 1, "the sink wrote a row twice"
        assert Counter(r["word"] for r in rows) == work.expected_words()
        # the UDFs ran on the standalone cluster's executors (under the Spark workers' work dirs),
        # whose Python workers import wordlib from the archive Gale shipped, not from sys.path
        dirs = {str(spark.base / f"worker-{i}") for i in range(2)}
        assert all(any(r["where"].startswith(d) for d in dirs) for r in rows), {r["where"] for r in rows[:5]}
        # only the failed batch replayed: it held at most BATCH tuples, of at most BATCH sentences
        assert len(failed_ids(work.state)) == replayed_after_executor_loss
        assert failed_batches() == failed
    except BaseException:
        print(dump_logs(c))
        print(spark.log_tail("master"), spark.log_tail("worker-1"))
        raise
    finally:
        c.cleanup()
        spark.stop()
