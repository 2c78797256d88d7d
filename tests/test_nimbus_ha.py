"""Nimbus HA with real processes: election, code replication, failover, countdowns, forwarding."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from kazoo.client import KazooClient

from tests.cluster import DURABLE_WC, DurableInput, cli, dump_logs, make_cluster
from tests.waiting import eventually, until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture
def ha(zk_server, tmp_path, request):
    c = make_cluster(zk_server, tmp_path, supervisors=1, slots=3, nimbuses=2,
                     conf={"topology.min.replication.count": 2, "topology.max.replication.wait.time.sec": 30})
    c.start()
    yield c
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        print(dump_logs(c))
    c.cleanup()


def _equal(a, b):
    assert a == b, (a, b)


def leader_index(c) -> int:
    return c.wait_for_leader(30)


def test_failover_keeps_code_countdowns_and_scheduling(ha, tmp_path):
    zk = KazooClient(hosts=ha.zk.address)
    zk.start(timeout=10)
    try:
        lead = leader_index(ha)
        standby = 1 - lead
        # every nimbus registers its summary; exactly one is the leader (summaries refresh each round)
        def registered():
            summaries = {n: json.loads(zk.get(f"{ha.root}/nimbuses/{n}")[0])
                         for n in zk.get_children(f"{ha.root}/nimbuses")}
            assert sorted(summaries) == sorted(f"127.0.0.1:{p}" for p in ha.nimbus_ports), summaries
            assert sorted(s["is_leader"] for s in summaries.values()) == [False, True], summaries

        eventually(registered, 30)

        work = DurableInput(tmp_path / "w", 200000)
        tid = cli(ha, "submit", str(DURABLE_WC), "--name", "ha1", "--wait", *work.overrides()).stdout.strip()
        # replicated to both nimbuses before submit returned (topology.min.replication.count = 2)
        holders = zk.get_children(f"{ha.root}/blobstore/{tid}")
        assert len(holders) == 2
        assert (ha.base / f"nimbus-{standby}" / "nimbus" / "stormdist" / tid / "stormcode.tar.gz").is_file()

        # a standby answers write requests with the leader's address; the CLI follows it
        resp = httpx.post(f"{ha.nimbus_url(standby)}/api/v1/topologies/ha1/deactivate", json={}, trust_env=False)
        assert resp.status_code == 409 and resp.json()["leader"] == f"127.0.0.1:{ha.nimbus_ports[lead]}"

        # start a kill countdown, then kill -9 the leader in the middle of it
        cli(ha, "kill", "ha1", "--wait", "20")
        countdown = json.loads(zk.get(f"{ha.root}/storms/{tid}")[0])["topology_action_options"]
        deadline = countdown["deadline_secs"]
        assert countdown["kill"]["wait_secs"] == 20
        epoch_before = int(zk.get(f"{ha.root}/leader-epoch")[0])
        ha.nimbus_procs[lead].kill()
        killed_at = time.monotonic()
        until(lambda: (ha.health(standby) or {}).get("leader"), 40)
        failover = time.monotonic() - killed_at
        eventually(lambda: _equal(int(zk.get(f"{ha.root}/leader-epoch")[0]), epoch_before + 1), 10)
        print(f"failover: new leader in {failover:.2f}s (ZooKeeper session timeout 6 s)")
        # the countdown resumes on the new leader: the record keeps the original deadline (a new
        # leader does not restart it; the decision from the record is tests/test_transitions.py's),
        # and the topology is removed once it passed, not before
        if tid in zk.get_children(f"{ha.root}/storms"):
            kept = json.loads(zk.get(f"{ha.root}/storms/{tid}")[0])["topology_action_options"]
            assert kept["deadline_secs"] == deadline, (kept, countdown)
        until(lambda: tid not in zk.get_children(f"{ha.root}/storms"), 60)
        removed_at = time.time()
        assert removed_at >= deadline - 1
        print(f"removed {removed_at - deadline:+.1f}s from the original deadline")

        # the new leader schedules new work
        work2 = DurableInput(tmp_path / "w2", 500)
        cli(ha, "submit", str(DURABLE_WC), "--name", "ha2", "--wait", *work2.overrides())
        work2.wait_all_acked(60)
    finally:
        zk.stop()


def test_deposed_leader_cannot_overwrite(ha, tmp_path):
    """A leader that missed its successor's election has its writes fenced by the epoch."""
    zk = KazooClient(hosts=ha.zk.address)
    zk.start(timeout=10)
    try:
        lead = leader_index(ha)
        work = DurableInput(tmp_path / "w", 10)
        tid = cli(ha, "submit", str(DURABLE_WC), "--name", "fence", *work.overrides()).stdout.strip()
        epoch_path = f"{ha.root}/leader-epoch"
        epoch = int(zk.get(epoch_path)[0])
        # a successor was elected (it bumps the epoch) but the old leader has not noticed yet
        zk.set(epoch_path, str(epoch + 1).encode())
        resp = httpx.post(f"{ha.nimbus_url(lead)}/api/v1/topologies/fence/deactivate", json={}, trust_env=False)
        assert resp.status_code == 409, resp.text
        assert "not the leader" in resp.json()["error"]
        base = json.loads(zk.get(f"{ha.root}/storms/{tid}")[0])
        assert base["status"] == "ACTIVE", "the fenced write did not land"
        # the cluster recovers a leader (with a newer epoch) and accepts the action
        ha.wait_for_leader(30)
        assert int(zk.get(epoch_path)[0]) >= epoch + 2
        cli(ha, "deactivate", "fence")
        assert json.loads(zk.get(f"{ha.root}/storms/{tid}")[0])["status"] == "INACTIVE"
    finally:
        zk.stop()
