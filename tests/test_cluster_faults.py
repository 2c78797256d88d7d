"""More faults against real processes: supervisor restart and re-adoption, busy user code,
ZooKeeper session expiry of a supervisor. "Nothing was relaunched" is checked after positive
markers (supervisor loops counted by its heartbeats, the busy bolt's ack, newer worker heartbeats)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.cluster import (
    DURABLE_WC, SLOW_SINK, DurableInput, cli, cluster_went_on, dump_logs, make_cluster, next_heartbeats, status,
)
from tests.waiting import eventually, until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]
BUSY = Path(__file__).resolve().parent / "cluster_topologies" / "busy.py"


@pytest.fixture
def cluster1(zk_server, tmp_path, request):
    c = make_cluster(zk_server, tmp_path, supervisors=1, slots=2)
    c.start()
    yield c
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        print(dump_logs(c))
    c.cleanup()


def worker_pids(c, name):
    s = status(c, name)
    return sorted({e["worker"]["pid"] for comp in s["components"].values() for e in comp["executor_list"] if e["worker"]})


def test_supervisor_restart_adopts_running_workers_and_kills_strays(cluster1, tmp_path):
    work = DurableInput(tmp_path / "w", 300000)
    # a slow sink, so the input outlasts the supervisor's restart (a busy run acked all 300,000 first)
    cli(cluster1, "submit", str(DURABLE_WC), "--name", "adopt", "--wait", *work.overrides(**SLOW_SINK))
    work.wait_acked_beyond(200, 60)
    before = until(lambda: (lambda p: p if len(p) == 2 else None)(worker_pids(cluster1, "adopt")), 30,
                   lambda: f"workers {worker_pids(cluster1, 'adopt')}")
    # a stray: a worker directory nobody approved, with a live process claiming it
    stray_dir = Path(cluster1.supervisor_confs[0]["storm.local.dir"]) / "workers" / "stray-worker-id"
    (stray_dir / "pids").mkdir(parents=True)
    import subprocess
    import sys

    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "stray-worker-id"],  # a stray: idles
                             start_new_session=True)
    (stray_dir / "pids" / str(stray.pid)).touch()
    try:
        sup = cluster1.supervisor_procs[0]
        sup.stop()  # SIGTERM: workers keep running
        work.wait_acked_beyond(len(work.acked()) + 200, 30)  # still processing without a supervisor
        assert all(_alive(p) for p in before)
        cluster1.add_supervisor(0)
        until(lambda: stray.poll() is not None, 30)  # the stray is killed
        until(lambda: not stray_dir.exists(), 10)
        cluster_went_on(cluster1)  # several supervisor loops since: nothing is relaunched
        # the same processes (a late heartbeat may drop one from the view, never add another)
        assert all(_alive(p) for p in before) and set(worker_pids(cluster1, "adopt")) <= set(before)
        work.wait_acked_beyond(len(work.acked()) + 200, 30)
    finally:
        if stray.poll() is None:
            stray.kill()


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_busy_user_code_does_not_starve_heartbeats(cluster1):
    cli(cluster1, "submit", str(BUSY), "--name", "busy", "--wait", "-c", "test.spin.secs=14")
    pids = until(lambda: worker_pids(cluster1, "busy"), 30)
    # the spin bolt holds the GIL in a pure-Python loop for 14 s; supervisor.worker.timeout.secs
    # is 8 s here, so a starved heartbeat would get the worker killed and relaunched
    until(lambda: status(cluster1, "busy")["components"]["spin"]["stats"].get("busy_secs", 0) >= 4, 30)
    # the marker that the spin is over: its tuple acked; then a heartbeat cycle more, same process
    until(lambda: status(cluster1, "busy")["components"]["spin"]["stats"].get("acked", 0) >= 1, 60)
    next_heartbeats(cluster1, "busy")
    assert all(_alive(p) for p in pids) and set(worker_pids(cluster1, "busy")) <= set(pids), "the worker was restarted"


def test_supervisor_session_expiry_re_registers(cluster1):
    """Freeze the supervisor past its ZooKeeper session timeout (a long GC pause or VM stall):
    its ephemeral node vanishes; once it runs again it re-registers with a new session."""
    zk = KazooClient(hosts=cluster1.zk.address)
    zk.start(timeout=10)
    try:
        path = f"{cluster1.root}/supervisors/{cluster1.supervisor_id(0)}"
        owner = zk.exists(path).ephemeralOwner
        pid = cluster1.supervisor_procs[0].proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            until(lambda: zk.exists(path) is None, 30)  # session timeout is 6 s here
        finally:
            os.kill(pid, signal.SIGCONT)
        stat = until(lambda: zk.exists(path), 30)
        assert stat.ephemeralOwner not in (0, owner)
        assert json.loads(zk.get(path)[0])["assignment_id"] == cluster1.supervisor_id(0)
    finally:
        zk.stop()


def test_a_worker_whose_slot_port_is_taken_fails_clearly_then_starts_once_it_is_free(cluster1, tmp_path):
    """Slot ports are reserved outside the ephemeral range (gale.ports), so only a program outside
    Gale can hold one; the worker then fails with the address named where `nimbus status` shows it."""
    import socket

    ports = cluster1.supervisor_confs[0]["supervisor.slots.ports"]
    holders = []
    for port in ports:
        s = socket.socket()
        s.bind(("0.0.0.0", port))
        s.listen()
        holders.append(s)
    try:
        work = DurableInput(tmp_path / "w", 500)
        cli(cluster1, "submit", str(DURABLE_WC), "--name", "taken", *work.overrides(**{"topology.workers": 1}))

        def reported():
            errors = status(cluster1, "taken")["worker_errors"]
            assert errors, "no worker error reported yet"
            assert "worker setup failed" in errors[0]["error"] and "Address already in use" in errors[0]["error"]
            assert errors[0]["port"] in ports and f":{errors[0]['port']}" in errors[0]["error"]

        eventually(reported, 60)
        out = cli(cluster1, "status", "taken").stdout
        assert "last errors:" in out and "Address already in use" in out
    finally:
        for s in holders:
            s.close()
    # the supervisor relaunches the worker (with its crash-loop backoff); now it binds
    work.wait_all_acked(120)
