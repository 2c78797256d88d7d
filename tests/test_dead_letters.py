"""Dead letters: undecodable Kafka records and RabbitMQ messages go to the spout's error stream,
with the reason, tracked under the record's own message id (released only when the dead letter's
tree completes), counted in /metrics; against the real Tansu broker and a real RabbitMQ node."""

from __future__ import annotations

import json
import time
import uuid
from types import SimpleNamespace

import pytest

from gale import Bolt, LocalCluster, TopologyBuilder
from gale.connectors import KafkaBolt, KafkaSpout, RabbitMQBolt, RabbitMQSpout
from gale.errors import ConfigError
from gale.worker.connectors.dead_letter import ERROR_FIELDS, ERROR_STREAM
from gale.worker.connectors.kafka_group import ConsumerGroupPaths
from gale.worker.metrics import WorkerMetrics
from tests.brokers import kafka_broker, rabbitmq  # noqa: F401
from tests.waiting import eventually

pytestmark = pytest.mark.timeout(180)


class Record(Bolt):
    """Records the values of what it gets; acks."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: list = []

    def execute(self, tup):
        self.seen.append(tuple(tup.values))
        self.collector.ack(tup)


class FailFirstDeadLetter(Bolt):
    """Fails the first attempt of every dead letter (by its raw bytes), as a failing DLQ writer would;
    records every dead-letter tuple it sees."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: list = []
        self.failed: set = set()

    def execute(self, tup):
        self.seen.append(tup.as_dict())
        if tup["raw"] not in self.failed:
            self.failed.add(tup["raw"])
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def instances(running, component):
    out = []
    for ex_id, ex in running.runtime.executors.items():
        if running.layout.executor_to_component[ex_id] == component:
            out.extend((getattr(ex, "spouts", None) or getattr(ex, "bolts", None)).values())
    return out


def dead_letter_metric(running, conf, component, source):
    worker = SimpleNamespace(runtime=running.runtime, transfer=None, topology_id="t", supervisor_id="s", port=1,
                             worker_id="w", started=time.time(), conf=conf)
    for family in WorkerMetrics(worker).registry.collect():
        for sample in family.samples:
            if (sample.name == "gale_worker_dead_letters_total"
                    and sample.labels == {"component": component, "source": source}):
                return sample.value
    return None


GOOD = [json.dumps({"n": i}) for i in range(6)]
BAD = [b"not json", b"\xff\xfe\x00", b'{"n": ']


# ------------------------------------------------------------------------------ Kafka


def kafka_conf(broker, zk_chroot, topic, group):
    return {"kafka.bootstrap.servers": broker.bootstrap, "kafka.topic": topic, "kafka.group": group,
            "kafka.zookeeper.root": zk_chroot, "kafka.commit.interval.ms": 200, "kafka.rebalance.backoff.ms": 200,
            "kafka.retry.initial.delay.ms": 50}


def committed(zk, group, topic):
    path = ConsumerGroupPaths("/", group).offset(topic, 0)
    return int(zk.get(path)[0]) if zk.exists(path) else None


def test_undecodable_kafka_records_reach_a_dead_letter_topic_even_when_its_writer_fails(kafka_broker, zk, zk_chroot,
                                                                                          conf):
    kafka_broker.create_topic("events", 1)
    kafka_broker.create_topic("events-dlq", 1)
    values = [GOOD[0], BAD[0], GOOD[1], GOOD[2], BAD[1], GOOD[3], BAD[2], GOOD[4], GOOD[5]]
    positions = kafka_broker.produce("events", values, keys=[f"k{i}" for i in range(len(values))])
    bad_offsets = {o for (_, o), v in zip(positions, values) if isinstance(v, bytes)}
    overrides = kafka_conf(kafka_broker, zk_chroot, "events", "dl")
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 1, kwargs={"decode": "json", "fields": ["offset", "value"]})
    b.set_bolt("record", Record, 1).shuffle_grouping("kafka")
    b.set_bolt("dlq", KafkaBolt, 1, kwargs={"config": {"kafka.topic": "events-dlq"}, "value_field": "raw",
                                            "key_field": "key", "encode": "bytes"}).shuffle_grouping("kafka", ERROR_STREAM)
    b.set_bolt("flaky", FailFirstDeadLetter, 1).shuffle_grouping("kafka", ERROR_STREAM)
    topo = b.create_topology(name="dl")
    assert topo.definition.components["kafka"].streams[ERROR_STREAM].fields == list(ERROR_FIELDS)
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("dl", overrides, topo)

        def everything_done():
            assert committed(zk, "dl", "events") == len(values)
            extra = running.component_stats()["kafka"]["extra"]
            # each bad record: dead-lettered, failed by the flaky writer, re-read and dead-lettered again
            assert extra["kafka_dead_letters"] == 2 * len(BAD), extra
            return extra
        extra = eventually(everything_done, timeout=90)
        assert extra["kafka_retried"] == len(BAD) and extra["kafka_decode_errors"] == 2 * len(BAD)
        (record,) = instances(running, "record")
        assert sorted(v["n"] for _o, v in record.seen) == list(range(6))  # the good records, as data
        (flaky,) = instances(running, "flaky")
        first = {d["raw"]: d for d in flaky.seen}
        assert set(first) == set(BAD)
        for d in first.values():
            assert d["source"] == "kafka" and d["coordinates"]["topic"] == "events"
            assert d["coordinates"]["offset"] in bad_offsets and d["key"].startswith(b"k")
            assert d["reason"].startswith("cannot decode the value as json"), d["reason"]
        assert dead_letter_metric(running, overrides, "kafka", "kafka") == 2 * len(BAD)
        assert any("error stream 'error'" in e for e in running.errors.get("kafka", []))
    dlq = kafka_broker.read_all("events-dlq", 1)
    # at least once: the first attempt was written too before its tree failed
    assert sorted(r.value for r in dlq) == sorted(BAD * 2)
    assert {r.key for r in dlq} == {f"k{o}".encode() for o in bad_offsets}


def test_without_a_subscriber_dead_letters_are_counted_and_reported_not_silent(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("quiet", 1)
    values = [GOOD[0], BAD[0], GOOD[1]]
    kafka_broker.produce("quiet", values)
    overrides = kafka_conf(kafka_broker, zk_chroot, "quiet", "q")
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 1, kwargs={"decode": "json"})
    b.set_bolt("record", Record, 1).shuffle_grouping("kafka")
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("q", overrides, b.create_topology(name="q"))

        def done():
            assert committed(zk, "q", "quiet") == len(values)
            assert running.component_stats()["kafka"]["extra"]["kafka_dead_letters"] == 1
        eventually(done, timeout=60)
        assert dead_letter_metric(running, overrides, "kafka", "kafka") == 1
        (error,) = running.errors["kafka"]
        assert "no subscriber: counted and dropped" in error and "offset=1" in error, error


# ------------------------------------------------------------------------------ RabbitMQ


def drain(node, queue):
    conn = node.connection()
    out = []
    try:
        ch = conn.channel()
        while True:
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return out
            out.append(body)
    finally:
        conn.close()


def test_undecodable_rabbitmq_messages_reach_a_dead_letter_queue_even_when_its_writer_fails(rabbitmq):
    queue, dlq = f"q-{uuid.uuid4().hex[:8]}", f"dlq-{uuid.uuid4().hex[:8]}"
    rabbitmq.declare(queue)
    rabbitmq.declare(dlq)
    rabbitmq.publish(queue, [GOOD[0], BAD[0], GOOD[1], BAD[1], GOOD[2], BAD[2]])
    overrides = {"rabbitmq.host": rabbitmq.host, "rabbitmq.port": rabbitmq.port, "topology.max.spout.pending": 10}
    b = TopologyBuilder()
    b.set_spout("mq", RabbitMQSpout, 1, kwargs={"config": {"rabbitmq.queue": queue}, "decode": "json"})
    b.set_bolt("record", Record, 1).shuffle_grouping("mq")
    b.set_bolt("dlq", RabbitMQBolt, 1, kwargs={"config": {"rabbitmq.routing.key": dlq}, "body_field": "raw",
                                               "encode": "bytes"}).shuffle_grouping("mq", ERROR_STREAM)
    b.set_bolt("flaky", FailFirstDeadLetter, 1).shuffle_grouping("mq", ERROR_STREAM)
    with LocalCluster() as cluster:
        running = cluster.submit_topology("mq", overrides, b.create_topology(name="mq"))

        def everything_done():
            extra = running.component_stats()["mq"]["extra"]
            assert extra["rabbitmq_dead_letters"] == 2 * len(BAD), extra
            assert rabbitmq.ready(dlq) == 2 * len(BAD)
            rabbitmq.expect_counts(queue, 0, 0)  # every delivery acked, none rejected for good
            return extra
        extra = eventually(everything_done, timeout=90, interval=0.3)
        assert extra["rabbitmq_poison"] == 2 * len(BAD)
        (record,) = instances(running, "record")
        assert sorted(v[0]["n"] for v in record.seen) == [0, 1, 2]
        (flaky,) = instances(running, "flaky")
        replays = [d for d in flaky.seen if d["coordinates"]["redelivered"]]
        assert {d["raw"] for d in replays} == set(BAD)  # the failed dead letters came back from the broker
        d = flaky.seen[0]
        assert d["source"] == "rabbitmq" and d["coordinates"]["queue"] == queue and d["key"] is None
        assert d["reason"].startswith("cannot decode the body as json"), d["reason"]
        assert dead_letter_metric(running, overrides, "mq", "rabbitmq") == 2 * len(BAD)
    assert sorted(drain(rabbitmq, dlq)) == sorted(BAD * 2)


def test_error_stream_is_validated_and_can_be_turned_off():
    with pytest.raises(ConfigError, match="error_stream"):
        KafkaSpout(error_stream="__x")
    with pytest.raises(ConfigError, match="error_stream"):
        RabbitMQSpout(config={"rabbitmq.queue": "q"}, error_stream="")
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 1, kwargs={"error_stream": None})
    b.set_spout("mq", RabbitMQSpout, 1, kwargs={"error_stream": "poison"})
    defn = b.create_topology().definition
    assert list(defn.components["kafka"].streams) == ["default"]
    assert sorted(defn.components["mq"].streams) == ["default", "poison"]
