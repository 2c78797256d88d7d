"""Access control: the API token, and worker-to-worker batches authenticated per topology."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from gale.topology.tuple import Fields, Tuple
from gale.zkserver import free_port
from tests.cluster import DURABLE_WC, DurableInput, cli, make_cluster, wait_for
from gale.worker.transfer import Transfer


def _transfer(port, secret, delivered):
    fields = Fields(["v"], "src:default")
    t = Transfer(bind_host="127.0.0.1", port=port, secret=secret,
                 deliver=lambda task, payload: delivered.append((task, payload)) or True,
                 fields_for=lambda c, s: fields if (c, s) == ("src", "default") else None)
    t.start()
    return t, fields


def test_workers_reject_batches_from_outside_the_topology():
    recv_port, a_port, b_port = free_port(), free_port(), free_port()
    delivered: list = []
    receiver, fields = _transfer(recv_port, b"topology-secret", delivered)
    member, _ = _transfer(a_port, b"topology-secret", [])
    intruder, _ = _transfer(b_port, b"guessed-secret", [])
    try:
        for sender in (intruder, member):
            sender.set_routes({7: f"127.0.0.1:{recv_port}"})
        intruder.send_tuple(7, Tuple(["injected"], fields, "src", "default", 1, {5: 6}))
        wait_for(lambda: receiver.stats["rejected_batches"] >= 1, 10)
        assert delivered == []
        member.send_tuple(7, Tuple(["legit"], fields, "src", "default", 1, {5: 6}))
        wait_for(lambda: delivered, 10)
        (task, tup), = delivered
        assert task == 7 and tup.values == ["legit"] and tup.message_id == {5: 6}
        assert receiver.stats["rejected_batches"] == 1
    finally:
        for t in (receiver, member, intruder):
            t.close(0.1)


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_api_token_guards_writes(zk_server, tmp_path):
    c = make_cluster(zk_server, tmp_path, supervisors=1, slots=1, conf={"nimbus.api.token": "t0ps3cret"})
    c.start()
    try:
        base = c.nimbus_url(0) + "/api/v1"
        # reads are open unless nimbus.api.read.token.required
        assert httpx.get(f"{base}/topologies", trust_env=False).status_code == 200
        for path in ("/topologies?name=x", "/topologies/x/kill", "/topologies/x/activate"):
            resp = httpx.post(base + path, content=b"x", trust_env=False)
            assert resp.status_code == 401, path
            assert "API token" in resp.json()["error"]
        resp = httpx.post(f"{base}/topologies/x/kill", headers={"Authorization": "Bearer wrong"}, trust_env=False)
        assert resp.status_code == 401
        # the CLI (and supervisors downloading code) read the token from the config
        work = DurableInput(tmp_path / "w", 50)
        cli(c, "submit", str(DURABLE_WC), "--name", "guarded", "--wait", *work.overrides())
        work.wait_all_acked(60)
        cli(c, "kill", "guarded", "--wait", "0")
    finally:
        c.cleanup()
