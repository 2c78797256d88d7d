"""The RabbitMQ spout against a real private RabbitMQ node, in local mode."""

from __future__ import annotations

import random
import threading
import uuid

import pytest

from gale import Bolt, TopologyBuilder
from gale.errors import ConfigError, GaleError
from gale.connectors import RabbitMQSpout
from gale import LocalCluster
from tests.brokers import rabbitmq  # noqa: F401
from tests.waiting import eventually, until

pytestmark = pytest.mark.timeout(120)


class Flaky(Bolt):
    """Fails a tuple with probability ``p_fail``; records the bodies it acked. With ``hold_after``,
    stops acking after that many (holds the rest unacked, like a worker about to die)."""

    def __init__(self, p_fail=0.0, hold_after=None):
        self.p_fail = p_fail
        self.hold_after = hold_after

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.rng = random.Random(context.task_id)
        self.acked: list[str] = []
        self.failed = 0
        self.held: list = []

    def execute(self, tup):
        if self.hold_after is not None and len(self.acked) >= self.hold_after:
            self.held.append(tup)
            return
        if self.rng.random() < self.p_fail:
            self.failed += 1
            self.collector.fail(tup)
            return
        self.acked.append(tup["body"])
        self.collector.ack(tup)


def topology(queue, spouts=2, bolts=2, **bolt_kwargs):
    b = TopologyBuilder()
    b.set_spout("mq", RabbitMQSpout, spouts, kwargs={"config": {"rabbitmq.queue": queue}})
    b.set_bolt("work", Flaky, bolts, kwargs=bolt_kwargs).shuffle_grouping("mq")
    return b.create_topology(name="mq")


def mq_conf(node, **extra):
    return {"rabbitmq.host": node.host, "rabbitmq.port": node.port, "rabbitmq.reconnect.max.delay.ms": 500,
            "topology.max.spout.pending": 50, **extra}


def bolts(running, component="work"):
    out = []
    for ex_id, ex in running.runtime.executors.items():
        if running.layout.executor_to_component[ex_id] == component:
            out.extend((getattr(ex, "bolts", None) or getattr(ex, "spouts", None)).values())
    return out


def acked(running):
    return [body for b in bolts(running) for body in b.acked]


def new_queue(node):
    name = f"q-{uuid.uuid4().hex[:8]}"
    node.declare(name)
    return name


def test_every_message_processed_at_least_once_when_bolts_fail_randomly(rabbitmq):
    queue = new_queue(rabbitmq)
    bodies = [f"m{i}" for i in range(1000)]
    rabbitmq.publish(queue, bodies)
    with LocalCluster() as cluster:
        running = cluster.submit_topology("flaky", mq_conf(rabbitmq), topology(queue, p_fail=0.2))
        until(lambda: set(acked(running)) == set(bodies), 60, "all 1000 acked")

        # every delivery settled at the broker (nothing ready, nothing unacknowledged), and the
        # spout's counters say so
        def settled():
            rabbitmq.expect_counts(queue, 0, 0)
            stats = running.component_stats()["mq"]
            assert stats["failed"] >= 100 and stats["extra"]["rabbitmq_rejected"] >= 100, stats
            assert stats["acked"] >= 1000 and stats["extra"]["rabbitmq_acked"] >= 1000, stats

        eventually(settled, 20)
    assert sum(b.failed for b in bolts(running)) > 100


def test_killed_topology_leaves_its_unacked_messages_to_the_next_one(rabbitmq):
    queue = new_queue(rabbitmq)
    bodies = [f"k{i}" for i in range(500)]
    rabbitmq.publish(queue, bodies)
    with LocalCluster() as cluster:
        first = cluster.submit_topology("first", mq_conf(rabbitmq), topology(queue, hold_after=50))
        # 2 bolt tasks ack 50 each, then hold everything they get; 2 spout tasks x prefetch 50
        until(lambda: len(acked(first)) == 100 and sum(len(b.held) for b in bolts(first)) == 100,
              60, "100 acked and the prefetch window held")
        eventually(lambda: rabbitmq.expect_counts(queue, 300, 100), 20)
        done_first = acked(first)
        cluster.kill_topology("first")  # dies with 100 deliveries unacked
        eventually(lambda: rabbitmq.expect_counts(queue, 400, 0), 20)  # the unacked ones requeued
        second = cluster.submit_topology("second", mq_conf(rabbitmq), topology(queue))
        until(lambda: set(acked(second)) | set(done_first) == set(bodies), 60, "the rest drained")
        eventually(lambda: rabbitmq.expect_counts(queue, 0, 0), 20)  # an empty queue
    assert len(done_first) == 100 and not set(done_first) & set(acked(second))


def test_prefetch_follows_max_spout_pending(rabbitmq):
    queue = new_queue(rabbitmq)
    rabbitmq.publish(queue, [f"p{i}" for i in range(40)])
    with LocalCluster() as cluster:
        running = cluster.submit_topology("prefetch", mq_conf(rabbitmq, **{"topology.max.spout.pending": 7}),
                                          topology(queue, spouts=1, bolts=1, hold_after=0))
        # the broker's own record of the consumer's prefetch, and what it delivered: 7, not more
        def prefetch_of_seven():
            assert sum(len(b.held) for b in bolts(running)) == 7
            rabbitmq.expect_counts(queue, 33, 7)
            assert rabbitmq.consumer_prefetch(queue) == [7]

        eventually(prefetch_of_seven, 60)


@pytest.mark.timeout(180)
def test_spout_reconnects_after_a_broker_restart(rabbitmq):
    queue = new_queue(rabbitmq)
    rabbitmq.publish(queue, [f"a{i}" for i in range(100)])
    with LocalCluster() as cluster:
        running = cluster.submit_topology("restart", mq_conf(rabbitmq), topology(queue))
        until(lambda: len(set(acked(running))) == 100, 60, "the first 100")
        rabbitmq.stop()  # returns once the node is down: the spouts lose their connections
        rabbitmq.start()
        rabbitmq.publish(queue, [f"b{i}" for i in range(100)])  # durable queue, persistent messages
        until(lambda: set(acked(running)) >= {f"b{i}" for i in range(100)}, 60, "the next 100 after restart")
        eventually(lambda: rabbitmq.expect_counts(queue, 0, 0), 20)  # an empty queue
        # both spout tasks came back
        until(lambda: running.component_stats()["mq"]["extra"]["rabbitmq_reconnects"] >= 2, 20, "two reconnects")


def test_bad_configuration_is_named(rabbitmq):
    queue = new_queue(rabbitmq)
    b = TopologyBuilder()
    b.set_spout("mq", RabbitMQSpout, 1)
    b.set_bolt("work", Flaky, 1).shuffle_grouping("mq")
    topo = b.create_topology(name="bad")

    def error(conf):
        with LocalCluster() as cluster:
            with pytest.raises((ConfigError, GaleError)) as info:
                cluster.submit_topology("bad", conf, topo)
        return str(info.value)

    assert "rabbitmq.queue is required" in error(mq_conf(rabbitmq))
    msg = error(mq_conf(rabbitmq, **{"rabbitmq.queue": "no-such-queue"}))
    assert "'no-such-queue' does not exist" in msg and str(rabbitmq.port) in msg
    msg = error({**mq_conf(rabbitmq, **{"rabbitmq.queue": queue}), "rabbitmq.port": 1})
    assert "cannot connect to 127.0.0.1:1" in msg
    msg = error(mq_conf(rabbitmq, **{"rabbitmq.queue": queue, "rabbitmq.password": "wrong"}))
    assert "refused the credentials" in msg
    with pytest.raises(ConfigError, match="unknown RabbitMQ setting 'rabbitmq.qeue'"):
        RabbitMQSpout(config={"rabbitmq.qeue": "x"})
    # declare=true creates a missing queue
    created = f"q-{uuid.uuid4().hex[:8]}"
    with LocalCluster() as cluster:
        cluster.submit_topology("declare", mq_conf(rabbitmq, **{"rabbitmq.queue": created,
                                                                "rabbitmq.queue.declare": True}), topo)
        assert rabbitmq.queue_counts(created) == (0, 0)


def test_threads_are_gone_after_close(rabbitmq):
    queue = new_queue(rabbitmq)
    before = {t.name for t in threading.enumerate()}
    with LocalCluster() as cluster:
        cluster.submit_topology("threads", mq_conf(rabbitmq), topology(queue))
        assert any(n.startswith("rabbitmq-mq-") for n in {t.name for t in threading.enumerate()} - before)
    until(lambda: not any(t.name.startswith("rabbitmq-mq-") for t in threading.enumerate()), 10,
          lambda: f"threads {[t.name for t in threading.enumerate()]}")
