"""The Kafka output bolt against a real Kafka-protocol broker (Tansu), in local mode."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from gale import Spout, TopologyBuilder
from gale.errors import ConfigError, GaleError
from gale.connectors import KafkaBolt
from gale.connectors import KafkaSpout
from gale import LocalCluster
from tests.brokers import kafka_broker  # noqa: F401
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)


class WordSpout(Spout):
    """Emits (word, n) once per value with message ids; records acks and fails."""

    def __init__(self, n=100):
        self.n = n

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "n"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0
        self.acked: set[int] = set()
        self.failed: list[int] = []

    def next_tuple(self):
        if self.i < self.n:
            self.collector.emit([f"w{self.i % 7}", self.i], msg_id=self.i)
            self.i += 1

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


def spout_instance(running, component="src"):
    for ex_id, ex in running.runtime.executors.items():
        if running.layout.executor_to_component[ex_id] == component:
            return next(iter(ex.spouts.values()))
    raise AssertionError(component)


def sink_topology(n=100, **bolt_kwargs):
    b = TopologyBuilder()
    b.set_spout("src", WordSpout, 1, kwargs={"n": n})
    b.set_bolt("out", KafkaBolt, 2, kwargs=bolt_kwargs).shuffle_grouping("src")
    return b.create_topology(name="sink")


def test_every_tuple_is_produced_and_acked_after_the_broker_acks(kafka_broker):
    kafka_broker.create_topic("out", 2)
    conf = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": "out"}
    with LocalCluster() as cluster:
        running = cluster.submit_topology("sink", conf, sink_topology(300, key_field="word"))
        src = spout_instance(running)
        until(lambda: len(src.acked) == 300, 30, "300 acks")
        until(lambda: running.component_stats()["out"]["extra"]["kafka_produced"] == 300, 30, "300 produced")
    assert src.failed == []
    records = kafka_broker.read_all("out", 2)
    assert sorted(json.loads(r.value)["n"] for r in records) == list(range(300))
    # the key is the word: each word lands on one partition
    by_key = {}
    for r in records:
        by_key.setdefault(r.key, set()).add(r.partition)
        assert json.loads(r.value)["word"].encode() == r.key
    assert all(len(parts) == 1 for parts in by_key.values())


def test_kafka_to_kafka_copy_with_value_field(kafka_broker, zk_chroot, conf):
    kafka_broker.create_topic("in", 4)
    kafka_broker.create_topic("copy", 1)
    values = [f"line {i}" for i in range(200)]
    kafka_broker.produce("in", values, partitions=4)
    b = TopologyBuilder()
    b.set_spout("read", KafkaSpout, 1, kwargs={"fields": ["value"]})
    b.set_bolt("write", KafkaBolt, 1, kwargs={"config": {"kafka.topic": "copy"}, "value_field": "value"}) \
        .shuffle_grouping("read")
    topo = b.create_topology(name="copy")
    overrides = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": "in", "kafka.group": "copy",
                 "kafka.zookeeper.root": zk_chroot, "kafka.commit.interval.ms": 200}
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("copy", overrides, topo)
        until(lambda: running.component_stats()["read"]["acked"] >= 200, 30, "200 spout acks")
    assert Counter(r.value.decode() for r in kafka_broker.read_all("copy", 1)) == Counter(values)


def test_tuples_fail_when_the_broker_does_not_acknowledge(kafka_broker):
    kafka_broker.create_topic("gone", 1)
    conf = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": "gone",
            "kafka.producer.config": {"request_timeout_ms": 500, "delivery_timeout_ms": 1000, "max_block_ms": 500,
                                      "reconnect_backoff_max_ms": 200},
            "topology.message.timeout.secs": 60}
    with LocalCluster() as cluster:
        running = cluster.submit_topology("gone", conf, sink_topology(20, value_field="word"))
        src = spout_instance(running)
        until(lambda: len(src.acked) == 20, 30, "the first 20 acked")
        kafka_broker.stop()
        src.n = 40  # emit 20 more with the broker down
        until(lambda: len(src.failed) == 20, 60, "20 failures")
        until(lambda: running.component_stats()["out"]["extra"]["kafka_produce_errors"] == 20, 30, "20 errors")
    assert sorted(src.failed) == list(range(20, 40)) and len(src.acked) == 20


def test_bad_configuration_is_named(kafka_broker):
    kafka_broker.create_topic("exists", 1)
    base = {"kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": "exists"}

    def error(conf):
        with LocalCluster() as cluster:
            with pytest.raises((ConfigError, GaleError)) as info:
                cluster.submit_topology("bad", conf, sink_topology(1))
        return str(info.value)

    assert "kafka.topic is required" in error({"kafka.bootstrap.servers": kafka_broker.bootstrap})
    msg = error({**base, "kafka.topic": "nope", "kafka.producer.max.block.ms": 500})
    assert "'nope' does not exist" in msg
    msg = error({**base, "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.bootstrap.timeout.ms": 500})
    assert "cannot reach the Kafka brokers 127.0.0.1:1" in msg
    assert "'kafka.producer.acks'" in error({**base, "kafka.producer.acks": "some"})
    with pytest.raises(ConfigError, match="encode"):
        KafkaBolt(encode="avro")
