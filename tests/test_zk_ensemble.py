"""Gale on a ZooKeeper ensemble of three servers, and what it does without a quorum.

A quorum is a majority of the servers (two of three); the server left alone refuses clients. Then
daemons wait and report — a ``zookeeper-unavailable`` or ``zookeeper-suspended`` log line and the
``gale_zookeeper_connected`` metric at 0 — and never exit (under systemd that would be a restart
loop) nor write part of an action: a submit during the outage is refused whole, running workers go
on, and once the quorum is back the cluster carries on where it was.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from kazoo.client import KazooClient

from gale.layout import Layout
from gale.records import Assignment
from gale.zkserver import ZooKeeperEnsemble
from gale.nimbus.devcluster import DevCluster
from tests.brokers import kafka_broker  # noqa: F401 - a fixture
from tests.cluster import DURABLE_WC, FAST, DurableInput, cli, dump_logs
from tests.waiting import eventually, until

pytestmark = pytest.mark.cluster

CONF = {**FAST, "storm.zookeeper.connection.timeout": 2000}


@pytest.fixture
def ensemble(tmp_path):
    zk = ZooKeeperEnsemble(3, base_dir=tmp_path / "zk", tick_time_ms=500)
    zk.start()
    yield zk
    zk.cleanup()


@pytest.fixture
def cluster(ensemble, tmp_path):
    dev = DevCluster(tmp_path / "cluster", supervisors=2, slots=1, zookeeper=ensemble,
                     root=f"/e-{uuid.uuid4().hex[:8]}/storm", conf=CONF)
    yield dev
    dev.cleanup()


def lines(daemon, event: str) -> int:
    return daemon.log_tail(100000).count(f'"event": "{event}"')


def metric(url: str, name: str) -> float | None:
    text = httpx.get(f"{url}/metrics", timeout=5, trust_env=False).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_daemons_started_without_a_quorum_wait_and_report_then_run(ensemble, cluster, tmp_path):
    ensemble.kill(0)
    ensemble.kill(1)  # one server of three: no quorum, it refuses clients
    nimbus = cluster.add_nimbus(0)
    supervisor = cluster.add_supervisor()

    def waiting_and_reporting():
        # two reports each: they got past a whole connection timeout and went on waiting
        assert lines(nimbus, "zookeeper-unavailable") >= 2, nimbus.log_tail(10)
        assert lines(supervisor, "zookeeper-unavailable") >= 2, supervisor.log_tail(10)

    eventually(waiting_and_reporting, 60)
    assert nimbus.alive() and supervisor.alive()  # waiting, not exiting
    health = cluster.health(0)
    assert health["zookeeper"] == "CONNECTING" and health["leader"] is False
    assert metric(cluster.nimbus_url(0), "gale_zookeeper_connected") == 0.0

    ensemble.start()  # the quorum is back
    cluster.wait_for_leader(60)
    cluster.wait_for_supervisors(1, 60)
    assert cluster.health(0)["zookeeper"] == "CONNECTED"
    assert metric(cluster.nimbus_url(0), "gale_zookeeper_connected") == 1.0
    # the same processes: they never exited
    assert nimbus.alive() and supervisor.alive()


def test_losing_the_quorum_while_running_stops_nothing_and_writes_nothing_partial(ensemble, cluster, tmp_path):
    cluster.start(timeout=120)
    data = DurableInput(tmp_path / "data", 3000)
    tid = cli(cluster, "submit", str(DURABLE_WC), "--name", "steady", *data.overrides(**{"test.workers": 2}),
              "--wait", "--wait-timeout", "120").stdout.strip().splitlines()[-1]
    layout = Layout(cluster.root)
    observer = KazooClient(hosts=ensemble.address)
    observer.start(timeout=10)
    try:
        before = Assignment.decode(observer.get(layout.assignment(tid))[0], "a")
        workers = cluster.worker_pids()
        assert len(workers) == 2
        nimbus, supervisors = cluster.nimbus_procs[0], cluster.supervisor_procs

        leader = ensemble.leader()
        for i in [leader, *(j for j in range(3) if j != leader)][:2]:
            ensemble.kill(i)  # two of three gone: the one left refuses clients

        def everyone_noticed():
            assert lines(nimbus, "zookeeper-suspended") >= 1, nimbus.log_tail(10)
            for s in supervisors:
                assert lines(s, "zookeeper-suspended") >= 1, s.log_tail(10)

        eventually(everyone_noticed, 60)
        health = cluster.health(0)
        assert health["zookeeper"] != "CONNECTED" and health["leader"] is False
        # a submit during the outage is refused as a whole
        refused = cli(cluster, "submit", str(DURABLE_WC), "--name", "during-outage", *data.overrides(),
                      check=False, timeout=120)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "leader" in refused.stderr or "unreachable" in refused.stderr, refused.stderr
        # nothing exited: daemons wait, workers run on the assignment they have
        assert nimbus.alive() and all(s.alive() for s in supervisors)
        assert cluster.worker_pids() == workers

        rounds = cluster.health(0)["scheduling_rounds"]
        ensemble.start()  # the quorum is back

        def carried_on():
            h = cluster.health(0)
            assert h and h["zookeeper"] == "CONNECTED" and h["leader"], h
            assert h["scheduling_rounds"] > rounds + 1, h  # it has scheduled since, twice

        eventually(carried_on, 90)
        # the observer's own session may have expired in an outage longer than its timeout (a loaded
        # machine): read with a session opened now that the quorum is back
        observer.stop()
        observer.close()
        observer = KazooClient(hosts=ensemble.address)
        observer.start(timeout=30)
        # where it was: the same workers on the same assignment; the refused submit left nothing
        after = Assignment.decode(observer.get(layout.assignment(tid))[0], "a")
        assert after.executors() == before.executors(), dump_logs(cluster)
        assert cluster.worker_pids() == workers
        assert observer.get_children(layout.storms_dir) == [tid]
        assert observer.get_children(layout.dir("blobstore")) == [tid]
        assert [t["name"] for t in httpx.get(f"{cluster.nimbus_url(0)}/api/v1/topologies", timeout=5,
                                             trust_env=False).json()] == ["steady"]
        data.wait_all_acked(120)  # and the topology finished its input
    finally:
        observer.stop()
        observer.close()


def test_the_kafka_spout_consumes_through_a_zookeeper_leader_kill(ensemble, conf, kafka_broker):
    """The Kafka spout's consumer group lives in ZooKeeper: with the full server list it keeps its
    members and commits through the loss of the ensemble's leader, and consumes every record."""
    from gale import LocalCluster
    from gale.worker.connectors.kafka_group import ConsumerGroupPaths
    from tests.test_kafka_spout import PARTITIONS, instances, kafka_conf, recorder_topology, seen, settled

    conf = {**conf, "storm.zookeeper.servers": ensemble.client_servers()}
    kafka_broker.create_topic("ensemble", PARTITIONS)
    kafka_broker.produce("ensemble", [f"a{i}" for i in range(400)], partitions=PARTITIONS)
    zk = KazooClient(hosts=ensemble.address)
    zk.start(timeout=10)
    try:
        with LocalCluster(conf) as cluster:
            running = cluster.submit_topology("ens", kafka_conf(kafka_broker, "/", "ensemble", "eg"), recorder_topology(2))
            spouts = instances(running, "kafka")
            until(lambda: settled(running) and sum(len(s.member.owned) for s in spouts) == PARTITIONS, 60,
                  lambda: "two members owning every partition")
            until(lambda: len(set(seen(running))) >= 400, 60, lambda: f"{len(set(seen(running)))}/400 seen")
            members = sorted(zk.get_children(ConsumerGroupPaths("/", "eg").ids_dir))
            ensemble.kill(ensemble.leader())  # the followers elect a new leader; sessions move over
            kafka_broker.produce("ensemble", [f"b{i}" for i in range(400)], partitions=PARTITIONS)
            hws = kafka_broker.high_watermarks("ensemble", PARTITIONS)
            eventually(lambda: _all_offsets_seen(running, hws), 90)
            eventually(lambda: _committed_at(zk, hws), 90, retry_on=(AssertionError, Exception))
            # the same members: their sessions survived the leader change
            assert sorted(zk.get_children(ConsumerGroupPaths("/", "eg").ids_dir)) == members
            assert running.errors == {}
    finally:
        zk.stop()
        zk.close()


def _all_offsets_seen(running, hws):
    from tests.test_kafka_spout import seen

    got = set(seen(running))
    missing = {(p, o) for p, hw in hws.items() for o in range(hw)} - got
    assert not missing, f"{len(missing)} offsets not seen"


def _committed_at(zk, hws):
    from tests.test_kafka_spout import committed

    assert committed(zk, "eg", "ensemble") == hws
