"""Spark stages against a real Spark Connect server (``topology.spark.master: sc://host:port``).

The server is PySpark's own (``org.apache.spark.sql.connect.service.SparkConnectServer`` from the
jars PySpark ships), started here as a separate JVM on a reserved loopback port (``tests/servers.py``:
outside the ephemeral range; another port if the server exits with its port taken). The topology runs in
a child Python process, as in a worker: one process holds one Spark application, and this test
process's classic application (tests/test_spark.py) must not meet the Connect client.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.components import require
from tests.servers import start_on_free_port, wait_listening

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent(
    """
    import json, sys
    from collections import Counter
    from gale import TopologyBuilder
    from gale import complete_topology
    from tests.spark_topologies import CountWords, FailField, RowSpout, UpperWords

    master = sys.argv[1]
    # record how the worker's Spark session is built: remote (Connect) or master (a local JVM)
    from pyspark.sql.session import SparkSession
    built = []
    for how in ("remote", "master"):
        def spy(self, url, _how=how, _orig=getattr(SparkSession.Builder, how)):
            built.append([_how, url])
            return _orig(self, url)
        setattr(SparkSession.Builder, how, spy)
    words = ["apple", "banana", "cherry", "apple", "date", "banana", "apple", "elder"]
    rows = [[i, words[i % len(words)]] for i in range(40)]
    conf = {"topology.spark.master": master, "topology.spark.batch.millis": 300}

    def chain(*bolts):
        b = TopologyBuilder()
        b.set_spout("src", RowSpout, 1, kwargs={"rows": rows, "fields": ["id", "word"]})
        prev = "src"
        for name, cls, kwargs in bolts:
            b.set_bolt(name, cls, 1, kwargs=kwargs).shuffle_grouping(prev)
            prev = name
        return b.create_topology()

    out = {}
    # a grouped aggregation: under Connect there is no plan to read, so outputs anchor to the batch
    res = complete_topology(chain(("count", CountWords, {}), ("check", FailField, {"bad": ["banana"]})),
                            {"src": rows}, conf=conf, timeout=240)
    counted = Counter()
    for word, n in res.read("count"):
        counted[word] += n
    out["count"] = {"counted": dict(counted), "acked": res.acked, "failed": res.failed,
                    "extra": res.stats["count"]["extra"], "errors": res.errors}
    # a row-wise transform keeps per-row lineage through the hidden row id column
    res = complete_topology(chain(("upper", UpperWords, {}), ("check", FailField, {"field": "id", "bad": [6]})),
                            {"src": rows[:8]}, conf=conf, timeout=240)
    out["upper"] = {"rows": sorted(res.read("upper")), "acked": res.acked, "failed": res.failed,
                    "extra": res.stats["upper"]["extra"], "errors": res.errors}
    import psutil  # noqa: E402 - the proof that the stages ran remotely: no local JVM was started
    out["built"] = built
    out["local_java"] = [p.pid for p in psutil.Process().children(recursive=True) if p.name() == "java"]
    print("RESULT " + json.dumps(out, default=str))
    """
)


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    try:
        import grpc  # noqa: F401 - the Spark Connect client's transport
    except ImportError:
        grpc = None
    require(grpc is not None, "the Spark Connect client is not installed (pip install -e '.[connect]'; make test does)")
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    if not list((spark_home / "jars").glob("spark-connect_*.jar")):
        pytest.fail(f"this PySpark ({pyspark.__version__}) ships no Spark Connect server jar in {spark_home}/jars")
    log_path = tmp_path_factory.mktemp("connect") / "server.log"
    env = dict(os.environ, SPARK_HOME=str(spark_home), PYSPARK_PYTHON=sys.executable)
    started: list[tuple[subprocess.Popen, object]] = []

    def start_on(reservation):
        cmd = [
            str(spark_home / "bin" / "spark-submit"),
            "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name", "gale-test-connect", "--master", "local[2]",
            "--conf", f"spark.connect.grpc.binding.port={reservation.port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=2",
            "spark-internal",
        ]
        with open(log_path, "ab") as log:
            offset = log.tell()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        started.append((proc, reservation))
        # this server's JVM listens on the port (not merely something answering there)
        wait_listening(proc, reservation.port, 180, "Spark Connect server", lambda: log_path.read_text()[offset:])
        return reservation.port

    try:
        port = start_on_free_port(start_on)
        yield f"sc://127.0.0.1:{port}", log_path
    finally:
        for proc, reservation in started:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
                    proc.wait(10)
            reservation.release()


def test_spark_stages_run_on_a_spark_connect_server_with_at_least_once(connect_server):
    master, server_log = connect_server
    child = subprocess.run(
        [sys.executable, "-c", CHILD, master], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    lines = [ln for ln in child.stdout.splitlines() if ln.startswith("RESULT ")]
    assert child.returncode == 0 and lines, (
        f"child exit {child.returncode}\nstdout:\n{child.stdout[-3000:]}\nstderr:\n{child.stderr[-6000:]}\n"
        f"server log:\n{server_log.read_text()[-3000:]}"
    )
    out = json.loads(lines[-1][len("RESULT "):])

    count = out["count"]
    assert count["counted"] == {"apple": 15, "banana": 10, "cherry": 5, "date": 5, "elder": 5}
    assert sorted(count["acked"] + count["failed"]) == list(range(40))  # every tree completed
    # the spout rows behind the failed (banana) outputs fail; grouped lineage falls back to the
    # whole batch under Connect (documented), so their batch-mates fail with them — never fewer
    bananas = [i for i in range(40) if i % 8 in (1, 5)]
    assert set(bananas) <= set(count["failed"])
    assert count["extra"]["spark_batches"] >= 1 and count["extra"]["spark_start_secs"] > 0
    assert count["extra"]["spark_lineage_fallback_batches"] >= 1

    upper = out["upper"]
    assert upper["rows"] == [[0, "APPLE"], [1, "BANANA"], [2, "CHERRY"], [3, "APPLE"], [4, "DATE"],
                             [5, "BANANA"], [6, "APPLE"], [7, "ELDER"]]
    assert upper["failed"] == [6] and upper["acked"] == [0, 1, 2, 3, 4, 5, 7]  # per-row lineage held
    assert upper["extra"]["spark_lineage_fallback_rows"] == 0
    assert not upper["errors"] and not count["errors"]
    # the stages ran on the Connect server: sessions built with remote(), no JVM of the worker's own
    assert out["built"] and all(b == ["remote", master] for b in out["built"]), out["built"]
    assert out["local_java"] == []
