"""The combination matrix for the spout kinds (tests/combinations.py has the table): a Storm-style
Spout, a ReliableSpout, the KafkaSpout (a real Tansu broker, one for the module, and the test
session's ZooKeeper for its consumer group) and an unmodified pystorm spout through ShellSpout, each
with 2 tasks, under acking off/on, at-least-once and exactly-once state — exact results, or refused
at submit naming the spout (exactly-once needs a source that can rewind)."""

from __future__ import annotations

import uuid

import pytest

from tests.brokers import TansuBroker
from tests.combinations import N, build_spout_case, params, run_case, spout_cases
from tests.test_kafka_spout import PARTITIONS, kafka_conf

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = TansuBroker(tmp_path_factory.mktemp("tansu"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.parametrize("case", params(spout_cases()))
def test_combination(case, tmp_path, request):
    cluster_conf, kafka = {}, None
    if case.kind == "KafkaSpout":
        broker = request.getfixturevalue("broker")
        # the session's ZooKeeper, a chroot of this test: only its keys (LocalCluster's conf overrides the
        # topology's, and the fixture's holds every default, topology.state.guarantee included)
        cluster_conf = {k: v for k, v in request.getfixturevalue("conf").items()
                        if k.startswith("storm.zookeeper.") or k == "storm.local.dir"}
        topic = f"matrix-{case.guarantee}-{uuid.uuid4().hex[:6]}"
        broker.create_topic(topic, PARTITIONS)
        broker.produce(topic, [str(i) for i in range(N)], partitions=PARTITIONS)
        kafka = kafka_conf(broker, request.getfixturevalue("zk_chroot"), topic, f"g-{topic}")
    run_case(build_spout_case(case, tmp_path, kafka), timeout=30, cluster_conf=cluster_conf)
