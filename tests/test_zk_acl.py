"""ZooKeeper digest ACLs: with credentials configured, only cluster members can write."""

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from gale.cluster_state import ClusterState
from gale.layout import Layout
from gale.records import StormBase
from gale.zk import start_client


def test_cluster_nodes_are_writable_only_with_credentials(zk_server, zk_chroot, conf):
    conf = dict(conf, **{"storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "gale:s3cret"})
    member = start_client(conf)
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
        start_client(bad)
