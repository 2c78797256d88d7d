"""The bad-input suite against a real cluster: every bad input gets a clear error where a person
can see it, no daemon crashes, and no message is lost.

"Nothing crashed" is checked after a positive marker that the cluster went on past the bad input:
newer error reports from the bad bolts, newer heartbeats, more scheduling rounds — never after a
sleep. Each test submits its own topology (killed when it ends, pass or fail)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from tests.cluster import (
    DURABLE_WC, SLOW_SINK, DurableInput, Topologies, cli, cluster_went_on, make_cluster, next_heartbeats,
    pid_alive, status,
)
from tests.waiting import eventually, until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]
BAD = Path(__file__).resolve().parent / "cluster_topologies" / "bad_bolts.py"


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = make_cluster(zk_server, tmp_path_factory.mktemp("bad"), supervisors=2, slots=2,
                     conf={"nimbus.max.request.bytes": 4 * 1024 * 1024})
    c.start()
    yield c
    c.cleanup()


@pytest.fixture
def topologies(cluster):
    with Topologies(cluster) as t:
        yield t


def daemons_alive(c):
    return all(d.alive() for d in c.nimbus_procs + c.supervisor_procs)


def pids(c, name):
    s = status(c, name)
    return sorted({e["worker"]["pid"] for comp in s["components"].values() for e in comp["executor_list"] if e["worker"]})


def test_misbehaving_bolts_are_reported_and_nothing_crashes(cluster, topologies):
    name, _tid = topologies.submit(BAD, "bad")
    expected = {
        "raise": "RuntimeError: bad input",
        "unserializable": "cannot be sent to another worker",
        "huge": "topology.transfer.max.tuple.bytes",
    }

    def reported():
        s = status(cluster, name)
        for comp, msg in expected.items():
            errors = s["components"][comp]["errors"]
            assert any(msg in e["error"] for e in errors), (comp, errors)
            err = errors[0]
            assert err["host"] == "127.0.0.1" and err["port"] > 0 and err["error_time_secs"] > 0
            assert len(errors) <= 10
        assert s["components"]["numbers"]["stats"]["failed"] > 0  # the inputs failed, so they replay
        return s

    s = eventually(reported, 60)
    # both workers reported (a heartbeat older than nimbus.task.timeout.secs drops a worker from the view)
    before = until(lambda: (lambda p: p if len(p) == 2 else None)(pids(cluster, name)), 60,
                   lambda: f"workers {pids(cluster, name)}")
    latest = {comp: max(e["error_time_secs"] for e in s["components"][comp]["errors"]) for comp in expected}

    # the marker that the workers went on past more bad input: each bad bolt reported a newer error
    # (the failed inputs replay), and every worker wrote a newer heartbeat, still from the same pids
    def reported_again():
        now = status(cluster, name)
        for comp in expected:
            assert max(e["error_time_secs"] for e in now["components"][comp]["errors"]) > latest[comp], comp

    eventually(reported_again, 60)
    next_heartbeats(cluster, name)
    # no worker crashed (the processes live) and none was relaunched (no pid but theirs)
    assert [p for p in before if not pid_alive(p)] == [], "a worker crashed"
    assert set(pids(cluster, name)) <= set(before), "a worker was relaunched"
    assert daemons_alive(cluster)
    # the CLI shows the errors too
    out = cli(cluster, "status", name).stdout
    assert "last errors:" in out and "bad input" in out


def test_corrupt_znodes_are_reported_and_survived(cluster, topologies, tmp_path):
    work = DurableInput(tmp_path, 200000)
    name, tid = topologies.submit(DURABLE_WC, "zk-corrupt", *work.overrides(**SLOW_SINK))
    work.wait_acked_beyond(100, 60)
    zk = KazooClient(hosts=cluster.zk.address)
    zk.start(timeout=10)
    root = cluster.root
    planted = [f"{root}/storms/bogus-1-1", f"{root}/assignments/bogus-1-1", f"{root}/supervisors/bogus",
               f"{root}/workerbeats/{tid}/junk-1", f"{root}/assignments/bogus-2-2"]
    try:
        zk.create(planted[0], b"{not json")
        zk.create(planted[1], json.dumps({"version": 1, "hello": "world"}).encode())
        zk.create(planted[2], b"\x00\xff" * 10, ephemeral=True)
        zk.create(planted[3], b"[" * 900_000)  # oversized garbage (just under ZooKeeper's 1 MB limit)
        zk.create(planted[4], json.dumps({"version": 99}).encode())
        work.wait_acked_beyond(len(work.acked()) + 500, 30)  # the topology keeps running
        listed = json.loads(cli(cluster, "list", "--json").stdout)
        assert name in [t["name"] for t in listed]
        assert not [t for t in listed if t["id"].startswith("bogus")]  # the corrupt StormBase is skipped
        assert status(cluster, name)["executors_running"] > 0
        cluster_went_on(cluster)  # several scheduling rounds and supervisor loops over the corrupt nodes
        assert daemons_alive(cluster)

        def logged():
            log = cluster.nimbus_procs[0].log_path.read_text()
            for path in planted[:2]:
                assert f'"path": "{path}"' in log and "corrupt-znode" in log, path
            assert "written by a newer Gale" in log

        eventually(logged, 30)
    finally:
        for p in planted:
            if zk.exists(p):
                zk.delete(p)
        zk.stop()


def _bundle(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.SYMTYPE
                info.linkname = "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_api_refuses_crafted_bundles_and_oversized_requests(cluster):
    url = cluster.nimbus_url(0) + "/api/v1/topologies"
    zk = KazooClient(hosts=cluster.zk.address)
    zk.start(timeout=10)
    try:
        before = set(zk.get_children(f"{cluster.root}/storms"))
        cases = [
            (_bundle([("topology.json", b"{}"), ("conf.json", b"{}"), ("../../evil.py", b"x")]), 400,
             "outside the bundle directory"),
            (_bundle([("topology.json", b"{}"), ("conf.json", b"{}"), ("code/link", None)]), 400, "link or special"),
            (b"definitely not a gzip", 400, "not a valid gzipped tar"),
            (b"", 400, "empty request body"),
            (b"0" * (5 * 1024 * 1024), 413, "exceeds the limit"),
        ]
        for body, code, message in cases:
            resp = httpx.post(url, params={"name": "crafted"}, content=body, trust_env=False, timeout=30,
                              headers={"Content-Type": "application/gzip"})
            assert resp.status_code == code, resp.text
            assert message in resp.json()["error"]
        resp = httpx.post(url, params={"name": "bad name!"}, content=b"x", trust_env=False,
                          headers={"Content-Type": "application/gzip"})
        assert resp.status_code == 400 and "invalid topology name" in resp.json()["error"]
        assert not set(zk.get_children(f"{cluster.root}/storms")) - before  # nothing written
        assert not list(Path(cluster.base).rglob("evil.py"))
        assert daemons_alive(cluster)
    finally:
        zk.stop()


def test_corrupt_supervisor_local_state_is_survived(cluster, topologies, tmp_path):
    work = DurableInput(tmp_path, 200000)
    name, _tid = topologies.submit(DURABLE_WC, "ls-corrupt", *work.overrides(**SLOW_SINK))
    work.wait_acked_beyond(100, 60)
    sup = cluster.supervisor_procs[1]
    sup.stop()
    ls_dir = Path(cluster.supervisor_confs[1]["storm.local.dir"]) / "supervisor" / "localstate"
    for f in sorted(ls_dir.glob("*.state"))[-2:]:
        f.write_bytes(b"\x00garbage" * 10)
    (Path(cluster.supervisor_confs[1]["storm.local.dir"]) / "supervisor" / "isupervisor" / "junk.state").write_text("x")
    cluster.add_supervisor(1)
    until(lambda: "local-state-bad-version" in cluster.supervisor_procs[1].run_log(), 30)
    cluster_went_on(cluster)  # the restarted supervisor kept looping past its bad local state
    assert cluster.supervisor_procs[1].alive()
    work.wait_acked_beyond(len(work.acked()) + 500, 60)

    def all_running():
        s = status(cluster, name)
        assert s["executors_running"] == s["executors"], s

    eventually(all_running, 60)


def test_invalid_cli_arguments(cluster, tmp_path):
    cases = [
        (["rebalance", "x", "-e", "split"], 1, "-e expects COMPONENT=N"),
        (["rebalance", "x", "-e", "split=many"], 1, "-e expects COMPONENT=N"),
        (["status", "x", "--window", "5"], 2, "Invalid value for '--window'"),
        (["submit"], 2, "Missing argument 'TOPOLOGY_FILE'"),
        (["submit", str(DURABLE_WC), "-c", "novalue"], 1, "-c expects key=value"),
        (["kill", "x", "--wait", "soon"], 2, "'soon' is not a valid integer"),
        (["frobnicate"], 2, "No such command 'frobnicate'"),
    ]
    for args, code, message in cases:
        proc = cli(cluster, *args, check=False)
        assert proc.returncode == code, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
    bad_conf = tmp_path / "bad.yaml"
    bad_conf.write_text("storm.zookeeper.servers: localhost\n")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "gale.supervisor.cli", "serve", "--config", str(bad_conf)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "invalid value for 'storm.zookeeper.servers'" in proc.stderr and "expected a list of strings" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "gale.nimbus.cli", "serve", "--config", str(tmp_path / "missing.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "cannot read config file" in proc.stderr
