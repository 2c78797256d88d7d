"""Capabilities composed on a real cluster (ZooKeeper, nimbus, supervisors, worker processes, a
Kafka-protocol broker, Redis): a word count from Kafka whose middle stage is an unmodified pystorm
bolt (a subprocess) or a Spark batch stage, feeding a stateful count; kill -9 of the worker holding
the counting tasks while records flow. Exactly once, the committed counts equal the topic's counts
exactly; at least once, no word is lost. The local matrix (tests/test_combinations_*.py) runs every
combination; these are the representative ones that cross worker processes and survive a kill."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from gale.worker.state.inspect import read_committed
from gale.worker.state.redis_provider import RedisStateProvider
from tests.brokers import kafka_broker  # noqa: F401
from tests.cluster import Topologies, make_cluster
from tests.eo_cuts import logs_kept_on_failure
from tests.test_exactly_once_cluster import (PARTITIONS, WORDS, assert_every_cut_consistent, some_committed,
                                             wait_exact, watch_cuts, worker_of)
from tests.waiting import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

TOPOLOGY = Path(__file__).resolve().parent / "cluster_topologies" / "eo_kafka_composed.py"


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = make_cluster(zk_server, tmp_path_factory.mktemp("composed"), supervisors=2, slots=2)
    c.start()
    yield c
    c.cleanup()


def first_half(kafka_broker, topic):  # noqa: F811
    """A topic of 3,000 words with the first half produced; returns every word, in order."""
    kafka_broker.create_topic(topic, PARTITIONS)
    values = [WORDS[(i * 7) % len(WORDS)] for i in range(3000)]
    kafka_broker.produce(topic, values[:1500], partitions=PARTITIONS)
    return values


def submit(cluster, topologies, redis_server, kafka_broker, topic, name, *conf):  # noqa: F811
    return topologies.submit(TOPOLOGY, name, *[x for k, v in {
        "kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": topic, "kafka.group": name,
        "kafka.zookeeper.root": cluster.root.rsplit("/", 1)[0] + "/kafka",
        "topology.state.provider": "redis", "topology.state.redis.url": redis_server.url,
    }.items() for x in ("-c", f"{k}={v}")], *conf)[0]


@pytest.mark.parametrize("middle", ["shell", pytest.param("spark", marks=pytest.mark.spark)])
def test_kill_minus_9_of_the_counting_worker_behind_another_capability_counts_exactly_once(
        cluster, redis_server, kafka_broker, middle):  # noqa: F811
    topic = f"composed-{middle}"
    values = first_half(kafka_broker, topic)
    provider = RedisStateProvider(redis_server.url)
    with Topologies(cluster) as topologies:
        name = submit(cluster, topologies, redis_server, kafka_broker, topic, f"eo-{middle}",
                      "-c", f"test.middle={middle}")
        with logs_kept_on_failure(cluster, name), watch_cuts(redis_server, name) as cuts:
            eventually(lambda: some_committed(provider, name), 240)
            pid = eventually(lambda: worker_of(cluster, name, "count"), 30)
            kafka_broker.produce(topic, values[1500:], partitions=PARTITIONS)  # records flowing at the kill
            os.kill(pid, signal.SIGKILL)
            hws = kafka_broker.high_watermarks(topic, PARTITIONS)
            assert sum(hws.values()) == len(values)
            epoch = wait_exact(provider, name, hws, values, cuts)
        assert_every_cut_consistent(cuts)
        assert epoch.generation >= 2, epoch  # the kill rolled the topology back


def test_kill_minus_9_of_the_counting_worker_behind_a_shell_bolt_loses_nothing_at_least_once(
        cluster, redis_server, kafka_broker):  # noqa: F811
    topic = "composed-alo"
    values = first_half(kafka_broker, topic)
    provider = RedisStateProvider(redis_server.url)
    expected = Counter(values)
    with Topologies(cluster) as topologies:
        name = submit(cluster, topologies, redis_server, kafka_broker, topic, "alo-shell",
                      "-c", "test.middle=shell", "-c", "test.guarantee=at-least-once")
        with logs_kept_on_failure(cluster, name):
            eventually(lambda: some_committed(provider, name), 240)
            pid = eventually(lambda: worker_of(cluster, name, "count"), 30)
            kafka_broker.produce(topic, values[1500:], partitions=PARTITIONS)
            os.kill(pid, signal.SIGKILL)

            def nothing_lost():
                counts = read_committed(provider, name, "count", key_groups=128)
                short = {w: (counts.get(w, 0), n) for w, n in expected.items() if counts.get(w, 0) < n}
                assert not short, f"committed below the topic's counts (word: (committed, in topic)): {short}"

            eventually(nothing_lost, 240)
