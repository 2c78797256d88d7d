"""ZooKeeper digest ACLs: with credentials configured, only cluster members can write — the Kafka
spout's consumer group included, on a separate ZooKeeper too."""

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError

from gale.cluster_state import ClusterState
from gale.layout import Layout
from gale.records import StormBase
from gale.zk import start_client
from gale import Bolt
from gale.config_keys import Config
from tests.brokers import kafka_broker  # noqa: F401


class Sink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def test_cluster_nodes_are_writable_only_with_credentials(zk_server, zk_chroot, conf):
    conf = dict(conf, **{"storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "gale:s3cret"})
    member = start_client(Config.resolve(conf, allow_user_keys=False))
    try:
        state = ClusterState(member, Layout(conf["storm.zookeeper.root"]))
        state.ensure_layout()
        base = StormBase(name="t", status="ACTIVE", num_workers=1, component_executors={}, launch_time_secs=1)
        state.set_storm_base("t-1-1", base)
        root = conf["storm.zookeeper.root"]
        outsider = KazooClient(hosts=zk_server.address)
        outsider.start(timeout=10)
        try:
            # anyone may read (operators with zkCli.sh get) ...
            assert outsider.get(f"{root}/storms/t-1-1")[0] == base.encode()
            # ... but not change or delete anything
            with pytest.raises(NoAuthError):
                outsider.set(f"{root}/storms/t-1-1", b"{}")
            with pytest.raises(NoAuthError):
                outsider.create(f"{root}/assignments/evil", b"{}")
            with pytest.raises(NoAuthError):
                outsider.delete(f"{root}/storms/t-1-1")
            wrong = KazooClient(hosts=zk_server.address, auth_data=[("digest", "gale:wrong")])
            wrong.start(timeout=10)
            try:
                with pytest.raises(NoAuthError):
                    wrong.set(f"{root}/storms/t-1-1", b"{}")
            finally:
                wrong.stop()
        finally:
            outsider.stop()
        assert state.storm_base("t-1-1") == base
    finally:
        member.stop()


def test_malformed_auth_payload_is_a_config_error(conf):
    from gale.errors import ConfigError

    bad = dict(conf, **{"storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "nocolon"})
    with pytest.raises(ConfigError, match="user:password"):
        start_client(Config.resolve(bad, allow_user_keys=False))


def test_kafka_group_on_a_separate_zookeeper_keeps_the_cluster_credentials(conf):
    from gale.worker.connectors.kafka_config import group_zookeeper_config, spout_settings

    conf = dict(conf, **{"storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "gale:s3cret"})
    settings = spout_settings({"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic": "t", "kafka.group": "g",
                               "kafka.zookeeper.servers": "zk9:2181,zk10:2181", "kafka.zk.session.timeout.ms": 9000})
    zk_config = group_zookeeper_config(Config.resolve(conf, allow_user_keys=False), settings)
    assert zk_config.storm_zookeeper_servers == ("zk9:2181", "zk10:2181")
    assert zk_config.storm_zookeeper_session_timeout == 9000
    assert (zk_config.storm_zookeeper_auth_payload, zk_config.storm_zookeeper_auth_scheme) == ("gale:s3cret", "digest")


def test_kafka_spout_on_a_separate_zookeeper_creates_its_group_with_the_cluster_acl(kafka_broker, zk_server, conf,
                                                                                     tmp_path):
    """A consumer group on another ZooKeeper (kafka.zookeeper.servers): its nodes get the cluster's
    digest ACL there too — anyone may read the offsets, only the cluster's identity may change them."""
    from kazoo.security import make_digest_acl_credential

    from gale import LocalCluster, TopologyBuilder
    from gale.connectors import KafkaSpout
    from gale.worker.connectors.kafka_group import ConsumerGroupPaths
    from gale.zkserver import ZooKeeperServer
    from tests.waiting import eventually

    separate = ZooKeeperServer(data_dir=tmp_path / "kafka-zk", tick_time_ms=500)
    separate.start()
    conf = dict(conf, **{"storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "gale:s3cret"})
    kafka_broker.create_topic("secured", 2)
    kafka_broker.produce("secured", [f"r{i}" for i in range(20)], partitions=2)
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 1, kwargs={"fields": ["partition", "offset", "value"]})
    b.set_bolt("sink", Sink, 1).shuffle_grouping("kafka")
    topo_conf = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": "secured", "kafka.group": "sec",
                 "kafka.zookeeper.servers": separate.address, "kafka.commit.interval.ms": 200,
                 "kafka.rebalance.backoff.ms": 200}
    paths = ConsumerGroupPaths("/", "sec")
    outsider = KazooClient(hosts=separate.address)
    outsider.start(timeout=10)
    try:
        with LocalCluster(conf) as cluster:
            cluster.submit_topology("secured", topo_conf, b.create_topology(name="secured"))

            def committed():
                assert [int(outsider.get(paths.offset("secured", p))[0]) for p in (0, 1)] == [10, 10]
            eventually(committed, 60, retry_on=(AssertionError, NoNodeError))
            (member,) = outsider.get_children(paths.ids_dir)
            nodes = ["/consumers", f"/consumers/sec", paths.ids_dir, paths.member(member), paths.owners_dir("secured"),
                     paths.owner("secured", 0), paths.offset("secured", 0), paths.offset("secured", 1)]
            digest = make_digest_acl_credential("gale", "s3cret")
            member_client = KazooClient(hosts=separate.address, auth_data=[("digest", "gale:s3cret")])
            member_client.start(timeout=10)  # ZooKeeper shows the digest's hash to its owner only
            try:
                acl_sets = {node: member_client.get_acls(node)[0] for node in nodes}
            finally:
                member_client.stop()
            for node, acls in acl_sets.items():
                assert {(a.id.scheme, a.id.id, a.perms) for a in acls} == {("digest", digest, 31),
                                                                           ("world", "anyone", 1)}, node
            # the offsets are readable by anyone (above) but nobody else may move or delete them
            with pytest.raises(NoAuthError):
                outsider.set(paths.offset("secured", 0), b"0")
            with pytest.raises(NoAuthError):
                outsider.delete(paths.owner("secured", 0))
            with pytest.raises(NoAuthError):
                outsider.create(f"{paths.ids_dir}/intruder", b"{}")
        # the group lived on the separate ZooKeeper only
        cluster_zk = KazooClient(hosts=zk_server.address)
        cluster_zk.start(timeout=10)
        try:
            assert cluster_zk.exists(paths.ids_dir) is None
        finally:
            cluster_zk.stop()
    finally:
        outsider.stop()
        separate.cleanup()
