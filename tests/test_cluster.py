"""The daemon trio end to end: real ZooKeeper, nimbus, supervisors and worker processes.

The module's cluster is shared: each test submits through ``topologies`` (unique names, killed and
waited out when the test ends, pass or fail) and asserts only about its own topology."""

from __future__ import annotations

from pathlib import Path

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import psutil
import pytest
from kazoo.client import KazooClient

from tests.cluster import (
    DURABLE_WC, ROOT, SLOW_SINK, DurableInput, Topologies, cli, fork_server, gone, make_cluster, next_heartbeats,
    pid_alive, run_forked, status, workers,
)
from tests.waiting import eventually, until

STATEFUL_WC = Path(__file__).resolve().parent / "cluster_topologies" / "stateful_wc.py"

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = make_cluster(zk_server, tmp_path_factory.mktemp("shared"), supervisors=2, slots=2)
    c.start()
    yield c
    c.cleanup()


@pytest.fixture
def topologies(cluster):
    with Topologies(cluster) as t:
        yield t


def zk_for(cluster) -> KazooClient:
    client = KazooClient(hosts=cluster.zk.address)
    client.start(timeout=10)
    return client


def all_running(cluster, name):
    s = status(cluster, name)
    assert s["executors_running"] == s["executors"], f"{s['executors_running']}/{s['executors']} executors running"
    return s


def test_word_count_runs_exact_and_layout_matches_storm(cluster, topologies, tmp_path):
    work = DurableInput(tmp_path, 3000)
    name, tid = topologies.submit(DURABLE_WC, "wc-exact", *work.overrides())
    assert tid.startswith(f"{name}-") and tid.count("-") >= 3
    work.wait_all_acked(90)
    until(lambda: work.word_counts() == work.expected_words(), 30,
          lambda: f"counts {sum(work.word_counts().values())} vs {sum(work.expected_words().values())}")
    assert set(work.sink_counts()) == set(range(3000))

    def running_clean():
        st = all_running(cluster, name)
        assert st["executors"] == 2 + 2 + 4 + 4 + 2  # __acker x2 + components
        assert st["workers"] == 2
        assert all(c["stats"].get("failed", 0) == 0 for c in st["components"].values()), st["components"]

    eventually(running_clean, 30)
    # workers run with a one-thread OpenBLAS pool (its idle threads would spin on the executors' cores)
    pids = worker_pids_of(cluster)
    assert pids and all(psutil.Process(p).environ().get("OPENBLAS_NUM_THREADS") == "1" for p in pids)
    # Storm's layout (docs/storm-model.md §2), readable JSON
    zk = zk_for(cluster)
    try:
        root = cluster.root
        assert set(zk.get_children(root)) >= {"storms", "assignments", "supervisors", "workerbeats", "errors"}
        base = json.loads(zk.get(f"{root}/storms/{tid}")[0])
        assert base["name"] == name and base["status"] == "ACTIVE" and base["num_workers"] == 2
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

        def beats():
            names = zk.get_children(f"{root}/workerbeats/{tid}")
            assert sorted(names) == sorted(f"{n}-{p}" for n, p in slots)
            hb = json.loads(zk.get(f"{root}/workerbeats/{tid}/{names[0]}")[0])
            assert hb["storm_id"] == tid and hb["executor_stats"] and hb["time_secs"] > 0

        eventually(beats, 30)
        assert zk.get(f"{root}/workerbeats/{tid}")[0] == b""
    finally:
        zk.stop()


def test_kill_minus_9_of_a_worker_is_restarted_and_replays(cluster, topologies, tmp_path):
    work = DurableInput(tmp_path, 6000)
    name, _tid = topologies.submit(DURABLE_WC, "wc-kill", *work.overrides(**{"test.sink.delay.secs": 0.0005}))
    work.wait_acked_beyond(200, 60)

    def spout_pid():  # the worker of the first spout executor
        worker = status(cluster, name)["components"]["source"]["executor_list"][0]["worker"]
        assert worker and worker["pid"], "the spout's worker has not reported yet"
        return worker["pid"]

    old_pid = eventually(spout_pid, 30)
    fork_server = _forked(old_pid)
    os.kill(old_pid, signal.SIGKILL)
    work.wait_all_acked(120)
    assert set(work.sink_counts()) >= set(range(6000)), "every spout tuple reached the sink"

    def restarted():
        s = all_running(cluster, name)
        pids = {e["worker"]["pid"] for e in s["components"]["source"]["executor_list"] if e["worker"]}
        assert pids and old_pid not in pids, pids
        return pids

    # every spout worker was forked, the replacement by the fork server that forked the killed one
    assert fork_server in {_forked(pid) for pid in eventually(restarted, 60)}


def _forked(pid: int) -> int:
    """The fork server (supervisor.worker.fork.server) that forked worker ``pid``, which carries the
    worker command's line; its pid."""
    worker = psutil.Process(pid)
    assert "-m gale.worker.cli run " in " ".join(worker.cmdline()), worker.cmdline()
    parent = worker.parent()
    assert parent is not None and "-m gale.worker.zygote" in " ".join(parent.cmdline()), parent
    return parent.pid


def test_the_daemons_and_command_line_calls_are_forked_and_answer_as_exec_would(zk_server, tmp_path):
    """The tests' dev clusters fork their daemons, and the tests their command-line calls, from the
    test process's fork server (tests/cluster.py) once it has imported them (until then they are
    exec'd): the same processes, answering as exec'd ones do."""
    server = fork_server()
    assert server.wait_ready(120)
    with make_cluster(zk_server, tmp_path, supervisors=1, slots=1) as c, Topologies(c) as topologies:
        for d in c.nimbus_procs + c.supervisor_procs:
            assert psutil.Process(d.proc.pid).ppid() == server.pid, d.name
        name, _ = topologies.submit(DURABLE_WC, "forked-cli", *DurableInput(tmp_path, 10).overrides())
        env = dict(os.environ, GALE_CONFIG=str(c.client_config_path()))
        for args in (("list",), ("kill", "no-such-topology"), ("rebalance", name, "-e", "nope=2"), ("bogus",)):
            argv = [sys.executable, "-m", "gale.nimbus.cli", *args]
            forked = run_forked(argv, env, 120)
            execd = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
            assert forked is not None, args
            if args == ("list",):  # its uptime column may tick between the two
                assert forked.returncode == execd.returncode == 0 and forked.stderr == execd.stderr == "", (forked, execd)
                assert forked.stdout.splitlines()[0] == execd.stdout.splitlines()[0] and name in forked.stdout
            else:
                assert (forked.returncode, forked.stdout, forked.stderr) == (execd.returncode, execd.stdout, execd.stderr), args
                assert forked.returncode != 0, (args, forked)


def test_kill_minus_9_replays_at_the_restart_not_at_the_message_timeout(cluster, topologies, tmp_path):
    """topology.replay.on.restart: two spout executors, one per worker; the first one's worker is
    killed. The other spout's trees that passed through the dead worker are lost; with a message
    timeout of 600 s, only the replacement's hello can make it fail them (max spout pending: 200)
    within the wait. (With the key off this test fails: checked by hand.)"""
    work = DurableInput(tmp_path, 20000)  # at most ~2,000/s through the slow sink: the kill is mid-stream
    name, _tid = topologies.submit(DURABLE_WC, "wc-restart", *work.overrides(**{
        "topology.message.timeout.secs": 600, **SLOW_SINK}))
    work.wait_acked_beyond(200, 60)

    def spout_pids():
        execs = status(cluster, name)["components"]["source"]["executor_list"]
        pids = [e["worker"]["pid"] if e["worker"] else None for e in execs]
        assert len(pids) == 2 and None not in pids and pids[0] != pids[1], f"spout workers: {pids}"
        return pids

    victim, survivor = eventually(spout_pids, 30)
    acked_before = len(work.acked())
    os.kill(victim, signal.SIGKILL)
    assert acked_before < work.n, "the kill came after the whole input was done: not mid-stream"
    work.wait_all_acked(120)
    assert set(work.sink_counts()) >= set(range(work.n)), "every spout tuple reached the sink"

    def replayed_at_the_restart():
        execs = status(cluster, name)["components"]["source"]["executor_list"]
        (kept,) = [e for e in execs if e["worker"] and e["worker"]["pid"] == survivor]
        extra = kept["stats"]["extra"]
        assert extra.get("replayed_on_restart", 0) > 0 and extra.get("task_restarts_seen", 0) > 0, extra
        assert extra.get("timed_out", 0) == 0, extra

    eventually(replayed_at_the_restart, 30)


def test_deactivate_activate_rebalance_kill(cluster, topologies, tmp_path):
    work = DurableInput(tmp_path, 200000)
    name, tid = topologies.submit(DURABLE_WC, "wc-actions", *work.overrides(**SLOW_SINK))
    work.wait_acked_beyond(100, 60)
    assert cli(cluster, "deactivate", name).stdout.strip() == tid
    assert status(cluster, name)["status"] == "INACTIVE"

    # workers notice within task.refresh.poll.secs; in-flight tuples finish (or time out). The
    # marker that time passed in the cluster: every worker wrote a newer heartbeat; across two of
    # them the spout emitted nothing and has nothing pending.
    def spout(ws):
        return {k: sum(w["stats"].get(k, 0) for w in ws) for k in ("emitted", "spout_acked", "spout_failed")}

    def spouts_stopped():
        first = spout(next_heartbeats(cluster, name))
        second = spout(next_heartbeats(cluster, name))
        assert second == first, f"the spouts still emit or settle while INACTIVE: {first} -> {second}"
        return second

    stopped = eventually(spouts_stopped, 60)
    print(f"spouts stopped at {stopped}")
    cli(cluster, "activate", name)
    before = len(work.acked())
    work.wait_acked_beyond(before + 100, 30)
    # rebalance to one worker and 2 split executors
    cli(cluster, "rebalance", name, "-n", "1", "-e", "split=2", "--wait", "1")

    def rebalanced():
        s = all_running(cluster, name)
        assert (s["status"], s["workers"], s["components"]["split"]["executors"]) == ("ACTIVE", 1, 2)

    eventually(rebalanced, 90)
    work.wait_acked_beyond(len(work.acked()) + 100, 60)
    # kill: spouts stop at once, everything is removed after the wait
    pids = sorted({w["pid"] for w in workers(cluster, name)})
    ids = sorted({w["worker_id"] for w in workers(cluster, name)})
    # a long countdown first, so that KILLED is a state to observe, not a window to catch (a CLI call
    # on a loaded machine can take longer than a short --wait); then a kill with no wait shortens it
    cli(cluster, "kill", name, "--wait", "600")
    st = status(cluster, name)
    assert st["status"] == "KILLED" and st["pending_action"]["kill"]["wait_secs"] == 600
    cli(cluster, "kill", name, "--wait", "0")
    until(lambda: name not in cli(cluster, "list").stdout, 30)
    zk = zk_for(cluster)
    try:
        def removed():
            assert tid not in zk.get_children(f"{cluster.root}/workerbeats")
            assert tid not in zk.get_children(f"{cluster.root}/assignments")
            assert tid not in zk.get_children(f"{cluster.root}/storms")
            assert tid not in zk.get_children(f"{cluster.root}/errors")

        eventually(removed, 30)
    finally:
        zk.stop()
    # its workers are gone too: processes and directories
    until(lambda: gone(pids), 30, lambda: f"alive: {[p for p in pids if pid_alive(p)]}")
    until(lambda: not [d for i in ids for d in cluster.base.glob(f"supervisor-*/workers/{i}")], 30,
          lambda: f"left: {[d for i in ids for d in cluster.base.glob(f'supervisor-*/workers/{i}')]}")


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
            (DURABLE_WC, ["-c", "topology.localityaware.lower.bound=0.9"],
             "topology.localityaware.lower.bound (0.9) must be below topology.localityaware.higher.bound (0.8)"),
            (_write(tmp_path, "empty.py", "x = 1\n"), [], "defines no 'topology'"),
            (_write(tmp_path, "exits0.py", "import sys\nsys.exit(0)\n"), [],
             "exits0.py:2: the file called sys.exit(0) while it was imported"),
            (_write(tmp_path, "exits3.py", "import sys\nsys.exit(3)\n"), [], "called sys.exit(3)"),
            # combinations that cannot work, refused by nimbus with the effective configuration
            (STATEFUL_WC, ["-c", "topology.acker.executors=0"],
             "components 'count' (a StatefulBolt) keep managed state, which needs the acker"),
            (STATEFUL_WC, ["-c", "topology.state.guarantee=exactly-once"],
             "spout 'source' (DurableSpout) cannot rewind"),
        ]
        for path, extra, message in cases:
            proc = cli(cluster, "submit", str(path), *extra, check=False)
            assert proc.returncode == 1, proc.stderr
            assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        for args in (["status", "no-such-topology"], ["kill", "no-such-topology"], ["activate", "nope"]):
            proc = cli(cluster, *args, check=False)
            assert proc.returncode == 1 and "no topology named" in proc.stderr, proc.stderr
        # nothing was written (other tests' topologies may come and go meanwhile: only new ones count)
        assert not set(zk.get_children(f"{cluster.root}/storms")) - before
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
        work.wait_acked_beyond(200, 60)
        victim = 0
        own_cluster.kill_supervisor(victim, with_workers=True)
        lost_at = time.monotonic()
        vid = own_cluster.supervisor_id(victim)
        # its ephemeral node vanishes when the session expires; nimbus moves the work
        until(lambda: vid not in [s["id"] for s in own_cluster.cluster()["supervisors"]], 30)

        def moved():
            s = all_running(own_cluster, "wc-sup")
            nodes = {e["node"] for c in s["components"].values() for e in c["executor_list"]}
            assert nodes == {own_cluster.supervisor_id(1)}, nodes

        eventually(moved, 60)
        recovery = time.monotonic() - lost_at
        work.wait_all_acked(120)
        assert set(work.sink_counts()) >= set(range(8000))
        print(f"supervisor loss → executors running elsewhere in {recovery:.1f}s")
    finally:
        own_cluster.cleanup()


def worker_pids_of(cluster):
    """Worker processes of every supervisor (from their pid files; no nimbus needed)."""
    return [p for p in cluster.worker_pids() if pid_alive(p)]


def test_nimbus_down_topology_keeps_running_and_resumes(zk_server, tmp_path, request):
    own_cluster = make_cluster(zk_server, tmp_path, supervisors=1, slots=2)
    request.node.own_cluster = own_cluster
    own_cluster.start()
    try:
        work = DurableInput(tmp_path / "w", 400000)
        # a slow sink keeps the input from running out before nimbus is back (s27d: a faster build
        # acked all 400,000 while nimbus restarted on a busy machine, so "resumes" had nothing to do)
        cli(own_cluster, "submit", str(DURABLE_WC), "--name", "wc-nimbus", "--wait",
            *work.overrides(**SLOW_SINK))
        work.wait_acked_beyond(100, 60)
        own_cluster.nimbus_procs[0].kill()
        work.wait_acked_beyond(len(work.acked()) + 500, 30)  # processing continues without nimbus
        proc = cli(own_cluster, "submit", str(DURABLE_WC), "--name", "other", *work.overrides(), check=False)
        assert proc.returncode == 1 and "nimbus is unreachable" in proc.stderr
        assert cli(own_cluster, "list", check=False).returncode == 1
        pids = worker_pids_of(own_cluster)
        own_cluster.add_nimbus(0)
        own_cluster.wait_for_leader(60)
        assert status(own_cluster, "wc-nimbus")["status"] == "ACTIVE"
        work.wait_acked_beyond(len(work.acked()) + 500, 30)
        # the restarted nimbus did not disturb the running workers: the same processes, all running
        eventually(lambda: all_running(own_cluster, "wc-nimbus"), 30)
        assert worker_pids_of(own_cluster) == pids
    finally:
        own_cluster.cleanup()


LOCALITY_PROBE = DURABLE_WC.parent / "locality_probe.py"


def test_shuffled_tuples_stay_in_their_worker_unless_load_aware_messaging_is_disabled(cluster, topologies, tmp_path):
    """Storm 2's load-aware shuffle: at low load a shuffle goes to the sink tasks in the spout's own
    worker (never serialized); with topology.disable.loadaware.messaging it spreads over both workers.
    Workers also set their thread switch interval (topology.worker.gil.switch.interval.ms: 0.5 ms
    unless the topology says otherwise)."""
    from gale.nimbus.client import NimbusClient

    client = NimbusClient(cluster.client_conf())
    seen, switch = {}, {}
    for disabled in (False, True):
        state = tmp_path / f"disabled-{disabled}"
        extra = ["-c", "topology.worker.gil.switch.interval.ms=2"] if disabled else []
        name, _ = topologies.submit(LOCALITY_PROBE, "locality", "-c", f"test.state.dir={state}", "-c", "test.tuples=200",
                                    "-c", f"topology.disable.loadaware.messaging={str(disabled).lower()}", *extra)

        def lines():
            out = [line.split() for p in sorted(state.glob("sink-*.log")) for line in p.read_text().splitlines()]
            assert len(out) >= 400, f"{len(out)} of 400 tuples executed"
            return out

        executed = eventually(lines, 90)
        # every worker running a spout task also runs sink tasks (else its tuples must leave it)
        ports = {}
        for comp, c in client.topology(name)["components"].items():
            for ex in c["executor_list"]:
                ports.setdefault(comp, set()).add(ex["port"])
        assert ports["src"] <= ports["sink"] and len(ports["sink"]) == 2, ports
        seen[disabled] = Counter(local for _, local, _ in executed)
        switch[disabled] = {interval for *_, interval in executed}
        topologies.kill(name)
    assert switch == {False: {"0.0005"}, True: {"0.002"}}
    assert seen[False] == {"1": 400}, f"load-aware: {seen[False]} (1 = the sink was in the spout's worker)"
    assert seen[True]["0"] > 0 and seen[True]["1"] > 0 and sum(seen[True].values()) == 400, \
        f"disabled: {seen[True]} (expected both workers' sinks to execute tuples)"


def test_arrow_batch_tuples_cross_workers_whole(cluster, topologies, tmp_path):
    """pyarrow Tables on a batch stream between real workers: each arrives once, as a Table with
    every row (ids, sums and its string column intact), in the other worker as in the spout's."""
    state = tmp_path / "state"
    topologies.submit(DURABLE_WC.parent / "arrow_probe.py", "arrow", "-c", f"test.state.dir={state}",
                      "-c", "test.tables=20")

    def lines():
        out = [line.split() for p in sorted(state.glob("sink-*.log")) for line in p.read_text().splitlines()]
        assert len(out) >= 20, f"{len(out)} of 20 tables executed"
        return out

    executed = eventually(lines, 90)
    firsts = sorted(int(first) for _, first, *_ in executed)
    assert firsts == [k * 1000 for k in range(20)], firsts  # each table once (no replay: all acked in time)
    for local, first, rows, total, words, kind in executed:
        k = int(first) // 1000
        assert (int(rows), int(total), int(words), kind) == (1000, sum(range(k * 1000, (k + 1) * 1000)), 5, "Table")
    crossed = Counter(local for local, *_ in executed)
    assert crossed["0"] > 0 and crossed["1"] > 0, f"{crossed} (0 = the table crossed to the other worker)"
