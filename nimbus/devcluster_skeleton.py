"""Interim ``make demo``: a real ZooKeeper, the /storm skeleton written and read back."""

from __future__ import annotations

from common.cluster_state import ClusterState
from common.config import defaults
from common.zkserver import ZooKeeperServer
from common.zk import start_client


def run_skeleton() -> int:
    with ZooKeeperServer() as zk:
        print(f"ZooKeeper {zk.address} started (data dir {zk.data_dir})")
        conf = defaults()
        conf["storm.zookeeper.servers"] = ["127.0.0.1"]
        conf["storm.zookeeper.port"] = zk.port
        client = start_client(conf)
        try:
            state = ClusterState(client)
            state.ensure_layout()
            for name in sorted(client.get_children("/storm")):
                print(f"  /storm/{name}")
        finally:
            client.stop()
    return 0
