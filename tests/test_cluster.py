"""The daemon trio end to end: real ZooKeeper, nimbus, supervisors and worker processes."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from kazoo.client import KazooClient

from tests.cluster import DURABLE_WC, DurableInput, cli, dump_logs, make_cluster, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = make_cluster(zk_server, tmp_path_factory.mktemp("shared"), supervisors=2, slots=2)
    c.start()
    yield c
    c.cleanup()


@pytest.fixture(autouse=True)
def _logs_on_failure(request):
    yield
    rep = getattr(request.node, "rep_call", None)
    c = request.node.funcargs.get("cluster") or getattr(request.node, "own_cluster", None)
    if rep is not None and rep.failed and c is not None:
        print(dump_logs(c))


def zk_for(cluster) -> KazooClient:
    client = KazooClient(hosts=cluster.zk.address)
    client.start(timeout=10)
    return client


def status(cluster, name):
    return json.loads(cli(cluster, "status", name, "--json").stdout)


def test_word_count_runs_exact_and_layout_matches_seeds(cluster, tmp_path):
    work = DurableInput(tmp_path, 3000)
    out = cli(cluster, "submit", str(DURABLE_WC), "--name", "wc-exact", "--wait", *work.overrides())
    tid = out.stdout.strip()
    assert tid.startswith("wc-exact-") and tid.count("-") >= 2
    work.wait_all_acked(90)
    wait_for(lambda: work.word_counts() == work.expected_words(), 30,
             lambda: f"counts {sum(work.word_counts().values())} vs {sum(work.expected_words().values())}")
    assert set(work.sink_counts()) == set(range(3000))
    st = status(cluster, "wc-exact")
    assert st["executors_running"] == st["executors"] == 2 + 2 + 4 + 4 + 2  # __acker x2 + components
    assert st["workers"] == 2
    assert all(c["stats"].get("failed", 0) == 0 for c in st["components"].values())
    # the seeds' layout, readable JSON
    zk = zk_for(cluster)
    try:
        root = cluster.root
        assert set(zk.get_children(root)) >= {"storms", "assignments", "supervisors", "workerbeats", "errors"}
        base = json.loads(zk.get(f"{root}/storms/{tid}")[0])
        assert base["name"] == "wc-exact" and base["status"] == "ACTIVE" and base["num_workers"] == 2
        assert base["component_executors"] == {"source": 2, "split": 4, "count": 4, "sink": 2, "__acker": 2}
        assignment = json.loads(zk.get(f"{root}/assignments/{tid}")[0])
        # version 2: executors grouped by worker slot, "start-end" tokens
        slots = {(w["node"], w["port"]) for w in assignment["workers"]}
        assert len(slots) == 2 and sum(len(w["executors"].split()) for w in assignment["workers"]) == 14
        assert set(assignment["node_host"].values()) == {"127.0.0.1"}
        assert sorted(zk.get_children(f"{root}/supervisors")) == sorted(cluster.supervisor_id(i) for i in range(2))
        sup = json.loads(zk.get(f"{root}/supervisors/{cluster.supervisor_id(0)}")[0])
        assert sup["meta"] == sorted(cluster.supervisor_confs[0]["supervisor.slots.ports"])  # Storm: the port list
        assert zk.exists(f"{root}/supervisors/{cluster.supervisor_id(0)}").ephemeralOwner != 0
        beats = zk.get_children(f"{root}/workerbeats/{tid}")
        assert sorted(beats) == sorted(f"{n}-{p}" for n, p in slots)
        hb = json.loads(zk.get(f"{root}/workerbeats/{tid}/{beats[0]}")[0])
        assert hb["storm_id"] == tid and hb["executor_stats"] and hb["time_secs"] > 0
        assert zk.get(f"{root}/workerbeats/{tid}")[0] == b""
    finally:
        zk.stop()
    cli(cluster, "kill", "wc-exact", "--wait", "0")


def test_kill_minus_9_of_a_worker_is_restarted_and_replays(cluster, tmp_path):
    work = DurableInput(tmp_path, 6000)
    tid = cli(cluster, "submit", str(DURABLE_WC), "--name", "wc-kill", "--wait", *work.overrides(
        **{"test.sink.delay.secs": 0.0005})).stdout.strip()
    wait_for(lambda: len(work.acked()) > 200, 60)
    st = status(cluster, "wc-kill")
    spout_worker = next(e["worker"] for e in st["components"]["source"]["executor_list"])
    old_pid = spout_worker["pid"]
    os.kill(old_pid, signal.SIGKILL)
    work.wait_all_acked(120)
    assert set(work.sink_counts()) >= set(range(6000)), "every spout tuple reached the sink"

    def restarted():
        s = status(cluster, "wc-kill")
        pids = {e["worker"]["pid"] for e in s["components"]["source"]["executor_list"] if e["worker"]}
        return pids and old_pid not in pids and s["executors_running"] == s["executors"]

    wait_for(restarted, 60)
    cli(cluster, "kill", "wc-kill", "--wait", "0")


def test_deactivate_activate_rebalance_kill(cluster, tmp_path):
    work = DurableInput(tmp_path, 200000)
    # worker directories of other topologies on the shared cluster (they may outlive this test)
    others = set(cluster.base.glob("supervisor-*/workers/*"))
    tid = cli(cluster, "submit", str(DURABLE_WC), "--name", "wc-actions", "--wait", *work.overrides()).stdout.strip()
    wait_for(lambda: len(work.acked()) > 100, 60)
    assert cli(cluster, "deactivate", "wc-actions").stdout.strip() == tid
    # workers notice within task.refresh.poll.secs; in-flight tuples finish (or time out)

    def settled(window=2.0):
        a = len(work.acked())
        time.sleep(window)
        return len(work.acked()) == a

    wait_for(settled, 30, interval=0)
    before = len(work.acked())
    time.sleep(3)
    assert len(work.acked()) == before, "spouts stopped while INACTIVE"
    assert status(cluster, "wc-actions")["status"] == "INACTIVE"
    cli(cluster, "activate", "wc-actions")
    wait_for(lambda: len(work.acked()) > before + 100, 30)
    # rebalance to one worker and 2 split executors
    cli(cluster, "rebalance", "wc-actions", "-n", "1", "-e", "split=2", "--wait", "1")
    wait_for(lambda: (lambda s: s["status"] == "ACTIVE" and s["workers"] == 1
                      and s["components"]["split"]["executors"] == 2
                      and s["executors_running"] == s["executors"])(status(cluster, "wc-actions")), 90)
    n = len(work.acked())
    wait_for(lambda: len(work.acked()) > n + 100, 60)
    # kill: spouts stop at once, everything is removed after the wait
    cli(cluster, "kill", "wc-actions", "--wait", "2")
    assert status(cluster, "wc-actions")["status"] == "KILLED"
    wait_for(lambda: "wc-actions" not in cli(cluster, "list").stdout, 30)
    zk = zk_for(cluster)
    try:
        wait_for(lambda: tid not in zk.get_children(f"{cluster.root}/workerbeats")
                 and tid not in zk.get_children(f"{cluster.root}/assignments"), 30)
        assert tid not in zk.get_children(f"{cluster.root}/storms")
        assert tid not in zk.get_children(f"{cluster.root}/errors")
    finally:
        zk.stop()
    # workers are gone too
    wait_for(lambda: not set(cluster.base.glob("supervisor-*/workers/*")) - others, 30,
             lambda: f"left: {sorted(set(cluster.base.glob('supervisor-*/workers/*')) - others)}")


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bad_input_is_refused_before_zookeeper(cluster, tmp_path):
    zk = zk_for(cluster)
    try:
        before = set(zk.get_children(f"{cluster.root}/storms"))
        cases = [
            (_write(tmp_path, "syntax.py", "def topology(:\n"), [], "syntax error in"),
            (_write(tmp_path, "missing.py", "from gale import TopologyBuilder\n"
                    "def topology(conf):\n    b = TopologyBuilder()\n"
                    "    b.set_spout('s', 'nowhere.mod:Spouty')\n    return b.create_topology()\n"),
             [], "cannot import module 'nowhere.mod'"),
            (DURABLE_WC, ["-c", "topology.workers=zero"], "invalid value for 'topology.workers'"),
            (DURABLE_WC, ["-c", "topology.wrokers=2"], "did you mean 'topology.workers'"),
            (_write(tmp_path, "empty.py", "x = 1\n"), [], "defines no 'topology'"),
        ]
        for path, extra, message in cases:
            proc = cli(cluster, "submit", str(path), *extra, check=False)
            assert proc.returncode == 1, proc.stderr
            assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        for args in (["status", "no-such-topology"], ["kill", "no-such-topology"], ["activate", "nope"]):
            proc = cli(cluster, *args, check=False)
            assert proc.returncode == 1 and "no topology named" in proc.stderr, proc.stderr
        assert set(zk.get_children(f"{cluster.root}/storms")) == before
    finally:
        zk.stop()


def test_supervisor_killed_with_workers_moves_executors(zk_server, tmp_path, request):
    own_cluster = make_cluster(zk_server, tmp_path, supervisors=2, slots=2)
    request.node.own_cluster = own_cluster
    own_cluster.start()
    try:
        work = DurableInput(tmp_path / "w", 8000)
        cli(own_cluster, "submit", str(DURABLE_WC), "--name", "wc-sup", "--wait",
            *work.overrides(**{"test.sink.delay.secs": 0.0005}))
        wait_for(lambda: len(work.acked()) > 200, 60)
        victim = 0
        own_cluster.kill_supervisor(victim, with_workers=True)
        lost_at = time.monotonic()
        vid = own_cluster.supervisor_id(victim)
        # its ephemeral node vanishes when the session expires; nimbus moves the work
        wait_for(lambda: vid not in [s["id"] for s in own_cluster.cluster()["supervisors"]], 30)

        def moved():
            s = status(own_cluster, "wc-sup")
            nodes = {e["node"] for c in s["components"].values() for e in c["executor_list"]}
            return nodes == {own_cluster.supervisor_id(1)} and s["executors_running"] == s["executors"]

        wait_for(moved, 60)
        recovery = time.monotonic() - lost_at
        work.wait_all_acked(120)
        assert set(work.sink_counts()) >= set(range(8000))
        print(f"supervisor loss → executors running elsewhere in {recovery:.1f}s")
    finally:
        own_cluster.cleanup()


def test_nimbus_down_topology_keeps_running_and_resumes(zk_server, tmp_path, request):
    own_cluster = make_cluster(zk_server, tmp_path, supervisors=1, slots=2)
    request.node.own_cluster = own_cluster
    own_cluster.start()
    try:
        work = DurableInput(tmp_path / "w", 400000)
        cli(own_cluster, "submit", str(DURABLE_WC), "--name", "wc-nimbus", "--wait", *work.overrides())
        wait_for(lambda: len(work.acked()) > 100, 60)
        own_cluster.nimbus_procs[0].kill()
        n = len(work.acked())
        wait_for(lambda: len(work.acked()) > n + 500, 30)  # processing continues without nimbus
        proc = cli(own_cluster, "submit", str(DURABLE_WC), "--name", "other", *work.overrides(), check=False)
        assert proc.returncode == 1 and "nimbus is unreachable" in proc.stderr
        assert cli(own_cluster, "list", check=False).returncode == 1
        own_cluster.add_nimbus(0)
        own_cluster.wait_for_leader(60)
        st = status(own_cluster, "wc-nimbus")
        assert st["status"] == "ACTIVE"
        n = len(work.acked())
        wait_for(lambda: len(work.acked()) > n + 500, 30)
        # the restarted nimbus did not disturb the running workers
        st = status(own_cluster, "wc-nimbus")
        assert st["executors_running"] == st["executors"]
    finally:
        own_cluster.cleanup()
