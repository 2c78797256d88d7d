"""The worker's Spark processes: a start failure is reported and fails tuples (no hang), and no
Spark JVM or Python worker outlives a killed worker or one stopped while Spark starts (checked with
psutil by the marker every process of the application carries)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gale import complete_topology
from gale.worker.spark.session import find_marked
from tests.spark_topologies import CountWords, RowSpout
from gale import TopologyBuilder
from gale.config_keys import Config
from tests.waiting import eventually, until

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

REPO = Path(__file__).resolve().parent.parent


def _spark_children():
    return [p for p in psutil.Process().children(recursive=True)
            if "org.apache.spark.deploy.SparkSubmit" in " ".join(_cmdline(p))]


def _cmdline(p):
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_bad_master_is_reported_and_fails_tuples_without_hanging():
    assert _spark_children() == []
    rows = [[i, "w"] for i in range(6)]
    b = TopologyBuilder()
    b.set_spout("src", RowSpout, 1, kwargs={"rows": rows})
    b.set_bolt("count", CountWords, 1).shuffle_grouping("src")
    res = complete_topology(b.create_topology(), {"src": rows}, timeout=90,
                            conf={"topology.spark.master": "local[two]", "topology.spark.batch.millis": 100})
    assert res.failed == list(range(6)) and res.acked == []
    (error, *_) = res.errors["count"]
    assert "Spark is not available" in error and "Spark failed to start (master 'local[two]')" in error
    assert "Could not parse Master URL" in error
    until(lambda: _spark_children() == [], 30, lambda: f"left: {_spark_children()}")  # the failed start's JVM stopped


def _child(log):
    return subprocess.Popen(
        [sys.executable, "-c", "from tests.spark_topologies import child_main; child_main()"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _read_json(proc, log_path, timeout=150.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("{"):
                return json.loads(line)
            if not line and proc.poll() is not None:
                break
    tail = Path(log_path).read_text()[-3000:]
    raise AssertionError(f"child printed nothing useful (exit {proc.poll()}); stderr tail:\n{tail}")


def test_no_spark_process_outlives_a_killed_worker(tmp_path):
    """A worker killed with SIGKILL (no cleanup at all). A stopped worker is covered by the module
    fixture of test_spark.py and by the last test here."""
    log_path = tmp_path / "child.log"
    with open(log_path, "w") as log:
        proc = _child(log)
        try:
            info = _read_json(proc, log_path)
            marker, tree = info["marker"], info["tree"]
            assert info["acked"] == 10
            marked = {p.pid for p in find_marked(marker)}
            # the JVM and Spark's Python workers (the stage uses a Python UDF) carry the marker
            assert info["jvm_pid"] in marked and len(marked) >= 2, (info, marked)
            assert marked <= set(tree)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            until(lambda: find_marked(marker) == [] and not [p for p in marked if _alive(p)], 30,
                  lambda: f"left: {find_marked(marker)}, {[p for p in marked if _alive(p)]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_stopping_while_spark_starts_leaves_nothing_behind():
    from gale.worker.spark.session import acquire_spark, spark_settings

    handle = acquire_spark(spark_settings(Config()))
    marker = handle.marker
    # the marker that the start is under way: a process of the application (spark-submit, the JVM)
    until(lambda: find_marked(marker), 60, "no process of the Spark application was launched")
    t0 = time.monotonic()
    handle.close()
    print(f"closed while starting in {time.monotonic() - t0:.1f}s")
    assert handle.failed() and handle.status() == "closed"
    assert "the worker stopped while Spark was starting" in str(handle.error)
    until(lambda: find_marked(marker) == [] and _spark_children() == [], 15,
          lambda: f"left: {find_marked(marker)}, {_spark_children()}")


def test_a_failed_spark_start_is_retried_and_every_row_is_then_processed():
    """A transient start failure (the driver's port is taken) is retried after
    ``topology.spark.start.retry.secs``; the failed tuples replay and all succeed on the second
    application."""
    import socket

    from gale.worker.local import LocalTopology, local_conf

    assert _spark_children() == []
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    rows = [[i, f"w{i % 3}"] for i in range(30)]
    b = TopologyBuilder()
    b.set_spout("src", RowSpout, 1, kwargs={"rows": rows})
    b.set_bolt("count", CountWords, 1).shuffle_grouping("src")
    topo = b.create_topology()
    conf = {
        "topology.spark.master": "local[1]", "topology.spark.batch.millis": 200,
        "topology.spark.start.retry.secs": 2,
        "topology.spark.conf": {"spark.driver.port": port, "spark.port.maxRetries": 0,
                                "spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"},
    }
    lt = LocalTopology("retry", topo, local_conf(topo, conf))
    spout = next(iter(next(ex for ex in lt.runtime.executors.values() if ex.component == "src").spouts.values()))
    try:
        until(lambda: lt.errors.get("count"), 120, "the first start did not fail")
        first = lt.errors["count"][0]
        print("first start error:", first.splitlines()[:3])
        assert "Spark is not available" in first and "bind" in first.lower()
        until(lambda: spout.failed, 120, "the first attempt's batches fail and replay")
        assert not spout.acked
        blocker.close()  # the port is free again: the next attempt can start
        until(spout.done, 180, lambda: f"{len(spout.acked)} of {len(rows)} acked; errors {lt.errors}")

        def started_on_retry():  # Spark's status reaches the stats on the executor's periodic pass
            extra = lt.component_stats()["count"]["extra"]
            assert extra["spark_start_attempts"] >= 2 and extra["spark_ready"] == 1.0, extra

        eventually(started_on_retry, 30)
    finally:
        blocker.close()
        lt.kill()
    until(lambda: _spark_children() == [], 20, lambda: f"left: {_spark_children()}")
