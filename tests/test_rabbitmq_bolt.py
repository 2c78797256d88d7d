"""The RabbitMQ publish bolt against a real private RabbitMQ node, in local mode."""

from __future__ import annotations

import json
import uuid

import pytest

from gale import Spout, TopologyBuilder
from gale.errors import ConfigError, GaleError
from gale.connectors import RabbitMQBolt
from gale.connectors import RabbitMQSpout
from gale import LocalCluster
from tests.brokers import rabbitmq  # noqa: F401
from tests.waiting import eventually, until

pytestmark = pytest.mark.timeout(120)


class Numbers(Spout):
    def __init__(self, n=100):
        self.n = n

    def declare_output_fields(self, declarer):
        declarer.declare(["n", "text"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0
        self.acked: set[int] = set()
        self.failed: list[int] = []

    def next_tuple(self):
        if self.i < self.n:
            self.collector.emit([self.i, f"t{self.i}"], msg_id=self.i)
            self.i += 1

    def ack(self, msg_id):
        self.acked.add(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


def spout_of(running, component="src"):
    for ex_id, ex in running.runtime.executors.items():
        if running.layout.executor_to_component[ex_id] == component:
            return next(iter(ex.spouts.values()))
    raise AssertionError(component)


def topo(n, **bolt_kwargs):
    b = TopologyBuilder()
    b.set_spout("src", Numbers, 1, kwargs={"n": n})
    b.set_bolt("pub", RabbitMQBolt, 1, kwargs=bolt_kwargs).shuffle_grouping("src")
    return b.create_topology(name="pub")


def drain(node, queue):
    conn = node.connection()
    try:
        ch = conn.channel()
        out = []
        while True:
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append(body)
    finally:
        conn.close()


def test_tuples_are_published_with_confirms_and_acked(rabbitmq):
    queue = f"out-{uuid.uuid4().hex[:8]}"
    rabbitmq.declare(queue)
    conf = {"rabbitmq.host": rabbitmq.host, "rabbitmq.port": rabbitmq.port, "rabbitmq.routing.key": queue}
    with LocalCluster() as cluster:
        running = cluster.submit_topology("pub", conf, topo(200))
        src = spout_of(running)
        until(lambda: len(src.acked) == 200, 30, "200 acks")
        until(lambda: running.component_stats()["pub"]["extra"]["rabbitmq_published"] == 200, 30, "200 published")
    assert src.failed == []
    eventually(lambda: rabbitmq.expect_counts(queue, 200, 0), 30)  # 200 messages queued
    assert sorted(json.loads(b)["n"] for b in drain(rabbitmq, queue)) == list(range(200))


def test_unroutable_messages_fail_their_tuples(rabbitmq):
    conf = {"rabbitmq.host": rabbitmq.host, "rabbitmq.port": rabbitmq.port,
            "rabbitmq.routing.key": f"nobody-{uuid.uuid4().hex[:8]}"}
    with LocalCluster() as cluster:
        running = cluster.submit_topology("unroutable", conf, topo(5, body_field="text"))
        src = spout_of(running)
        until(lambda: len(src.failed) == 5, 30, "5 failures")
    assert src.acked == set()


def test_rabbitmq_to_rabbitmq_pipeline(rabbitmq):
    source, sink = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    rabbitmq.declare(source)
    rabbitmq.declare(sink)
    rabbitmq.publish(source, [f"m{i}" for i in range(300)])
    b = TopologyBuilder()
    b.set_spout("mq", RabbitMQSpout, 2, kwargs={"config": {"rabbitmq.queue": source}})
    b.set_bolt("pub", RabbitMQBolt, 2, kwargs={"config": {"rabbitmq.routing.key": sink}, "body_field": "body"}) \
        .shuffle_grouping("mq")
    conf = {"rabbitmq.host": rabbitmq.host, "rabbitmq.port": rabbitmq.port}
    with LocalCluster() as cluster:
        cluster.submit_topology("pipe", conf, b.create_topology(name="pipe"))
        until(lambda: rabbitmq.ready(sink) >= 300, 30, "everything moved")
        eventually(lambda: rabbitmq.expect_counts(source, 0, 0), 30)
    assert sorted(drain(rabbitmq, sink)) == sorted(f"m{i}".encode() for i in range(300))


def test_bad_configuration_is_named(rabbitmq):
    base = {"rabbitmq.host": rabbitmq.host, "rabbitmq.port": rabbitmq.port}

    def error(conf, **kwargs):
        with LocalCluster() as cluster:
            with pytest.raises((ConfigError, GaleError)) as info:
                cluster.submit_topology("bad", conf, topo(1, **kwargs))
        return str(info.value)

    assert "rabbitmq.routing.key is required" in error(base)
    assert "exchange 'nope' does not exist" in error({**base, "rabbitmq.routing.key": "k", "rabbitmq.exchange": "nope"})
    assert "cannot connect to 127.0.0.1:1" in error({**base, "rabbitmq.routing.key": "k", "rabbitmq.port": 1})
    with pytest.raises(ConfigError, match="unknown RabbitMQ setting 'rabbitmq.queue'"):
        RabbitMQBolt(config={"rabbitmq.queue": "x"})
