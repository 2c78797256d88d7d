"""Shell components on a real cluster (nimbus, supervisors, worker processes): unmodified pystorm
bolts with acking intact (failures replay), the unedited streamparse quickstart project submitted
as is, and a Node.js spout and bolt."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster import cli, make_cluster, status
from tests.multilang_topologies import read_lines
from tests.waiting import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TOPOLOGY = FIXTURES / "multilang" / "cluster_topology.py"
WORDCOUNT = FIXTURES / "streamparse_wordcount" / "topologies" / "wordcount.py"


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = make_cluster(zk_server, tmp_path_factory.mktemp("multilang"), supervisors=1, slots=3)
    c.start()
    yield c
    c.cleanup()


def words_of(out: Path) -> Counter:
    return Counter(w for (w,) in read_lines(str(out), "sink-"))


def test_pystorm_bolts_on_a_cluster_with_failures_replayed(cluster, tmp_path):
    n = 300
    cli(cluster, "submit", str(TOPOLOGY), "--name", "ml-pystorm", "--wait",
        "-c", f"test.out={tmp_path}", "-c", f"test.n={n}")

    def complete():
        acked = sorted(int(x) for x in read_lines(str(tmp_path), "acked-"))
        assert acked == list(range(n)), f"{len(acked)} of {n} acked"
        assert words_of(tmp_path) == Counter({**{f"s{i}": 1 for i in range(n)}, "alpha": n, "beta": n, "gamma": n})
    eventually(complete, 120)

    def counted():
        # the stats come from workerbeats, written every few seconds: later than the files above
        st = status(cluster, "ml-pystorm")
        assert st["components"]["flaky"]["stats"]["failed"] == n  # each sentence failed once in the child...
        assert st["components"]["source"]["stats"]["acked"] == n  # ...and every one replayed to completion
    eventually(counted, 60)
    cli(cluster, "kill", "ml-pystorm", "--wait", "0")


def test_every_pystorm_component_kind_on_a_cluster(cluster, tmp_path):
    """pystorm Spout (replays what fails), Bolt (fails each sentence once), BatchingBolt on ticks,
    TicklessBatchingBolt: every number acked and every word counted exactly, twice over."""
    n = 200
    cli(cluster, "submit", str(TOPOLOGY), "--name", "ml-all", "--wait",
        "-c", f"test.out={tmp_path}", "-c", f"test.n={n}", "-c", "test.variant=pystorm-all")
    expected = Counter({**{f"sentence": n}, **{str(i): 1 for i in range(n)}})

    def counted(prefix):
        totals = Counter()
        for word, count in read_lines(str(tmp_path), f"{prefix}-"):
            totals[word] += count
        return totals

    def complete():
        acked = sorted(int(x) for x in read_lines(str(tmp_path), "acked-"))
        assert acked == list(range(n)), f"{len(acked)} of {n} acked"
        assert counted("batches") == expected
        assert counted("tickless") == expected
    eventually(complete, 150)
    cli(cluster, "kill", "ml-all", "--wait", "0")


def test_the_unedited_streamparse_quickstart_project_submits_and_runs(cluster):
    out = cli(cluster, "submit", str(WORDCOUNT), "--wait")
    assert out.stdout.strip().startswith("wordcount-")

    def counting():
        st = status(cluster, "wordcount")
        comps = st["components"]
        assert comps["count_bolt"]["stats"]["executed"] >= 100 and comps["count_bolt"]["stats"]["emitted"] >= 100
        assert comps["word_spout"]["stats"]["emitted"] >= 100
        assert all(not c["errors"] for c in comps.values()), {k: c["errors"] for k, c in comps.items()}
    eventually(counting, 120)
    cli(cluster, "kill", "wordcount", "--wait", "0")


def test_a_nodejs_spout_and_bolt_on_a_cluster(cluster, tmp_path):
    n = 100
    cli(cluster, "submit", str(TOPOLOGY), "--name", "ml-node", "--wait",
        "-c", f"test.out={tmp_path}", "-c", f"test.n={n}", "-c", "test.variant=node")

    def complete():
        acked = sorted(int(x) for x in read_lines(str(tmp_path), "acked-js-"))
        assert acked == list(range(n)), f"{len(acked)} of {n} acked"
        assert words_of(tmp_path) == Counter({**{f"s{i}": 1 for i in range(n)}, "alpha": n, "beta": n, "gamma": n})
    eventually(complete, 120)
    cli(cluster, "kill", "ml-node", "--wait", "0")


def test_kill_minus_9_of_a_worker_ends_its_subprocesses_and_the_tuples_replay(cluster, tmp_path):
    """The children see EOF when their worker dies (and leave with it); the supervisor restarts the
    worker with new children; the lost tuples time out and replay."""
    import os
    import signal

    import psutil

    n = 2000
    cli(cluster, "submit", str(TOPOLOGY), "--name", "ml-kill", "--wait",
        "-c", f"test.out={tmp_path}", "-c", f"test.n={n}")

    def flowing():
        assert len(read_lines(str(tmp_path), "acked-")) >= 50
    eventually(flowing, 120)

    def shell_children():
        found = {}
        for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
            cmd = " ".join(proc.info["cmdline"] or [])
            if "pystorm_components.py" in cmd:
                found.setdefault(proc.info["ppid"], []).append(proc.info["pid"])
        return found

    workers = {w["pid"] for w in json.loads(cli(cluster, "workers", "ml-kill", "--json").stdout) if w.get("pid")}
    children = {ppid: kids for ppid, kids in shell_children().items() if ppid in workers}
    assert children, f"no shell children under workers {workers}"
    victim, kids = next(iter(children.items()))
    os.kill(victim, signal.SIGKILL)

    def children_gone():
        alive = [k for k in kids if psutil.pid_exists(k) and psutil.Process(k).status() != psutil.STATUS_ZOMBIE]
        assert not alive, f"children {alive} of the killed worker {victim} still alive"
    eventually(children_gone, 30)

    def complete():
        acked = {int(x) for x in read_lines(str(tmp_path), "acked-")}
        assert acked == set(range(n)), f"{len(acked)} of {n} acked"
    eventually(complete, 180)
    cli(cluster, "kill", "ml-kill", "--wait", "0")
