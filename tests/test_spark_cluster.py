"""Spark stages inside real worker processes: the supervisor must not kill a worker while its
Spark starts; a worker killed mid-batch loses and duplicates nothing in an idempotent sink; and it
leaves no Spark JVM or Python worker behind."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import pytest

from tests.cluster import CORPUS, DurableInput, cli, dump_logs, make_cluster
from tests.waiting import until

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.timeout(420)]
PIPELINE = Path(__file__).resolve().parent / "cluster_topologies" / "spark_pipeline.py"


def status(c, name):
    return json.loads(cli(c, "status", name, "--json").stdout)


def parquet_rows(path: Path) -> list[dict]:
    if not path.exists() or not any(path.glob("gale_batch=*")):
        return []
    return ds.dataset(str(path), format="parquet", partitioning="hive").to_table(columns=["id", "pos", "word"]).to_pylist()


def spark_processes(worker_pid: int) -> list[psutil.Process]:
    """JVMs and Python workers a worker started (they carry its pid in their environment or
    descend from it)."""
    out = []
    for p in psutil.process_iter(["pid", "name", "cmdline", "ppid"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if ("org.apache.spark" in cmd or "pyspark" in cmd) and p.info["pid"] != worker_pid:
                if worker_pid in {a.pid for a in p.parents()} or p.environ().get("GALE_WORKER_PID") == str(worker_pid):
                    out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_spark_worker_survives_start_and_a_kill_mid_batch(zk_server, tmp_path):
    c = make_cluster(zk_server, tmp_path, supervisors=1, slots=1)
    c.start()
    try:
        n = 3000
        work = DurableInput(tmp_path / "w", n)
        out = tmp_path / "parquet"
        cli(c, "submit", str(PIPELINE), "--name", "spark-pipe", *work.overrides(**{"test.parquet": str(out)}))

        def worker_pid():
            s = status(c, "spark-pipe")
            pids = {e["worker"]["pid"] for comp in s["components"].values() for e in comp["executor_list"] if e["worker"]}
            return next(iter(pids)) if len(pids) == 1 else None

        first = until(worker_pid, 90)
        # Spark takes 15-60 s to start here; supervisor.worker.timeout.secs is 8 s: the worker must
        # keep heartbeating and not be relaunched meanwhile
        until(lambda: len(work.acked()) > 300, 240)
        assert until(worker_pid, 30) == first, "the worker was relaunched while Spark started"
        assert parquet_rows(out)
        # kill -9 in the middle of the stream
        children = [p.pid for p in psutil.Process(first).children(recursive=True)]
        assert children, "the worker started Spark processes"
        os.kill(first, signal.SIGKILL)
        # its Spark JVM and Python workers die with it (no orphans)
        until(lambda: not [p for p in children if _alive(p)], 60, lambda: f"alive: {[p for p in children if _alive(p)]}")
        work.wait_all_acked(300)
        rows = parquet_rows(out)
        keys = Counter((r["id"], r["pos"]) for r in rows)
        assert max(keys.values()) == 1, "the sink wrote a row twice"
        expected = {(i, p) for i in range(n) for p in range(len(CORPUS[i % len(CORPUS)].split()))}
        assert set(keys) == expected, f"missing {len(expected - set(keys))} rows"
        words = Counter(r["word"] for r in rows)
        assert words == work.expected_words()
        second = until(worker_pid, 60)
        assert second != first
    except BaseException:
        print(dump_logs(c))
        raise
    finally:
        c.cleanup()
