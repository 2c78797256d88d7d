"""The Kafka spout in real worker processes: kill -9 the worker holding partitions; the other task
takes them over after the rebalance, nothing is lost, and committed offsets reach the high watermark."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tests.brokers import kafka_broker  # noqa: F401
from tests.cluster import cli, dump_logs, make_cluster
from tests.waiting import eventually, until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]
TOPOLOGY = Path(__file__).resolve().parent / "cluster_topologies" / "kafka_record_sink.py"
PARTITIONS = 4


def seen(state: Path) -> set[tuple[int, int]]:
    out = set()
    for p in state.glob("seen-*.log"):
        for line in p.read_text().splitlines():
            part, off = line.split()
            out.add((int(part), int(off)))
    return out


def test_worker_holding_partitions_killed_nothing_lost(zk_server, tmp_path, kafka_broker):  # noqa: F811
    c = make_cluster(zk_server, tmp_path, supervisors=2, slots=1)
    c.start()
    zk = KazooClient(hosts=zk_server.address)
    zk.start(timeout=10)
    try:
        kafka_broker.create_topic("events", PARTITIONS)
        first = kafka_broker.produce("events", [f"e{i}" for i in range(4000)], partitions=PARTITIONS)
        state = tmp_path / "state"
        group_root = c.root.rsplit("/", 1)[0] + "/kafka"
        overrides = {
            "kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": "events", "kafka.group": "g1",
            "kafka.zookeeper.root": group_root, "kafka.commit.interval.ms": 500, "test.state.dir": str(state),
        }
        args = [x for k, v in overrides.items() for x in ("-c", f"{k}={v}")]
        cli(c, "submit", str(TOPOLOGY), "--name", "kafka-kill", "--wait", *args)
        until(lambda: len(seen(state)) > 500, 90)
        # each spout task owns 2 partitions (range assignment, docs/storm-model.md §10); kill the worker of one

        def first_spout_worker():
            worker = json.loads(cli(c, "status", "kafka-kill", "--json").stdout)[
                "components"]["kafka"]["executor_list"][0]["worker"]
            assert worker and worker["pid"], "the spout's worker has not reported yet"
            return worker["pid"]

        victim = eventually(first_spout_worker, 30)

        def owners():
            found = {}
            for p in range(PARTITIONS):
                try:
                    found[p] = zk.get(f"{group_root}/consumers/g1/owners/events/{p}")[0].decode()
                except NoNodeError:
                    pass  # released during a rebalance
            return found

        # the two tasks may still be settling their first rebalance (one joined before the other)
        until(lambda: len(owners()) == PARTITIONS and len(set(owners().values())) == 2, 60,
              lambda: f"owners {owners()}")
        os.kill(victim, signal.SIGKILL)
        more = kafka_broker.produce("events", [f"f{i}" for i in range(2000)], partitions=PARTITIONS)
        expected = {(p, o) for p, o in first + more}
        until(lambda: seen(state) >= expected, 180, lambda: f"{len(expected - seen(state))} records missing")
        hws = kafka_broker.high_watermarks("events", PARTITIONS)

        def committed():
            return {p: int(zk.get(f"{group_root}/consumers/g1/offsets/events/{p}")[0]) for p in range(PARTITIONS)
                    if zk.exists(f"{group_root}/consumers/g1/offsets/events/{p}")}

        until(lambda: committed() == hws, 60, lambda: f"committed {committed()} vs {hws}")

        # the group re-formed: every partition owned again, by the surviving and the relaunched task
        def reformed():
            ids = zk.get_children(f"{group_root}/consumers/g1/ids")
            assert len(ids) == 2, ids
            assert set(owners()) == set(range(PARTITIONS)) and len(set(owners().values())) == 2, owners()

        eventually(reformed, 30)
    except BaseException:
        print(dump_logs(c))
        raise
    finally:
        zk.stop()
        c.cleanup()
