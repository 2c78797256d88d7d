"""The Kafka sink against the real test broker (Tansu, tests.brokers): why it does not use Kafka
transactions (the broker does not filter them for read_committed consumers — checked here, so the
claim stays true), the reader's filter (pure), the store contract read back through
``read_committed_kafka``, and an exactly-once word count through failures."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import pytest

from gale.topology.sink import SinkError
from gale.worker.connectors.kafka_config import bolt_settings
from gale.worker.local import LocalCluster
from gale.worker.sinks.kafka import (
    ABORT_MARKER,
    ATTEMPT_HEADER,
    COMMIT_MARKER,
    MARKER_HEADER,
    SINK_HEADER,
    TXID_HEADER,
    CommittedFilter,
    KafkaSink,
    KafkaStore,
    read_committed_kafka,
)
from gale.worker.sinks.protocol import SinkName
from gale.worker.state.provider import MemoryStateProvider
from tests.brokers import TansuBroker
from tests.sink_contract import EXACTLY_ONCE, SinkContract, expected_words, word_count_into
from tests.waiting import eventually


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = TansuBroker(tmp_path_factory.mktemp("tansu"))
    b.start()
    try:
        yield b
    finally:
        b.cleanup()


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
def test_the_test_broker_hands_aborted_transactions_to_read_committed_consumers(broker):
    """The evidence for the header scheme: Tansu takes a transactional producer's InitProducerId,
    AddPartitionsToTxn and EndTxn (abort) without an error, but a read_committed fetch returns the
    aborted record. If this starts failing, the broker filters transactions: the sink could use them."""
    from kafka import KafkaConsumer, KafkaProducer

    broker.create_topic("txn-evidence", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="gale-evidence", acks="all")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("txn-evidence", b"aborted")
    producer.flush()
    producer.abort_transaction()
    producer.close(timeout=5)
    consumer = KafkaConsumer("txn-evidence", bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             isolation_level="read_committed", consumer_timeout_ms=1500, group_id=None)
    try:
        seen = [m.value for m in consumer]
    finally:
        consumer.close()
    assert seen == [b"aborted"]


# ------------------------------------------------------------------------------ the reader's filter (pure)


@dataclass
class Rec:
    partition: int
    headers: list
    value: bytes | None = None


def data(p, sink, txid, attempt, value):
    return Rec(p, [(SINK_HEADER, sink), (TXID_HEADER, str(txid).encode()), (ATTEMPT_HEADER, attempt)], value)


def marker(p, sink, txid, kind):
    return Rec(p, [(SINK_HEADER, sink), (TXID_HEADER, str(txid).encode()), (MARKER_HEADER, kind)])


def released(records):
    f = CommittedFilter()
    out = [r.value for rec in records for r in f.feed(rec)]
    return out, f.holding


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
def test_records_wait_for_their_commit_marker():
    assert released([data(0, b"s", 1, b"a", b"x"), data(0, b"s", 1, b"a", b"y")]) == ([], 2)
    assert released([data(0, b"s", 1, b"a", b"x"), marker(0, b"s", 1, COMMIT_MARKER)]) == ([b"x"], 0)
    assert released([Rec(0, [], b"plain")]) == ([b"plain"], 0)


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
def test_a_new_attempt_replaces_an_abandoned_one_and_aborts_drop():
    recs = [data(0, b"s", 2, b"a", b"old"), data(0, b"s", 2, b"b", b"new"), marker(0, b"s", 2, COMMIT_MARKER)]
    assert released(recs) == ([b"new"], 0)
    recs = [data(0, b"s", 2, b"a", b"x"), marker(0, b"s", 2, ABORT_MARKER), data(0, b"s", 2, b"b", b"y"),
            marker(0, b"s", 2, COMMIT_MARKER)]
    assert released(recs) == ([b"y"], 0)


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
def test_repeated_markers_and_abandoned_checkpoints_release_nothing_twice():
    recs = [data(0, b"s", 1, b"a", b"x"), marker(0, b"s", 1, COMMIT_MARKER), marker(0, b"s", 1, COMMIT_MARKER),
            data(0, b"s", 2, b"a", b"gone"), data(0, b"s", 3, b"a", b"z"), marker(0, b"s", 3, COMMIT_MARKER)]
    assert released(recs) == ([b"x", b"z"], 0)


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
def test_partitions_and_sinks_are_independent():
    recs = [data(0, b"s", 1, b"a", b"p0"), data(1, b"s", 1, b"a", b"p1"), data(0, b"t", 1, b"a", b"t0"),
            marker(1, b"s", 1, COMMIT_MARKER), marker(0, b"t", 1, COMMIT_MARKER)]
    assert released(recs) == ([b"p1", b"t0"], 1)


# ------------------------------------------------------------------------------ against the broker


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
class TestKafkaContract(SinkContract):
    topology = "kafka"
    topic = "contract"

    @pytest.fixture(autouse=True)
    def _broker(self, broker):
        self.broker = broker
        if not getattr(type(self), "_made", False):
            broker.create_topic(self.topic, 2)
            type(self)._made = True
        self.state = getattr(type(self), "_state", None) or MemoryStateProvider()
        type(self)._state = self.state

    def make_store(self, name):
        settings = bolt_settings({}, {"kafka.bootstrap.servers": self.broker.bootstrap, "kafka.topic": self.topic})
        return KafkaStore(settings, name, self.state, lambda r: (r["key"].encode(), json.dumps(r).encode()))

    def visible(self):
        out: Counter = Counter()
        for r in read_committed_kafka(self.broker.bootstrap, self.topic, idle=0.3):
            rec = json.loads(r.value)
            out[rec["key"]] += rec["n"]
        return dict(out)


@pytest.mark.build_independent  # no tuple passes the hot path (tests/hot_path_audit.py)
def test_an_unreachable_broker_fails_the_checkpoint_naming_it():
    settings = bolt_settings({}, {"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic": "t",
                                  "kafka.bootstrap.timeout.ms": 500, "kafka.producer.max.block.ms": 500})
    store = KafkaStore(settings, SinkName("t", "k", 0, 1), MemoryStateProvider(), lambda r: (None, b"x"))
    batch = store.new_batch()
    batch.add({})
    with pytest.raises(SinkError, match=r"Kafka sink 'k' to topic 't' on 127.0.0.1:1: producing checkpoint 1"):
        store.prepare("gale:t:k:0:1", 1, batch, None)
    assert store.prepared() == []


def test_exactly_once_word_count_into_a_topic(broker):
    broker.create_topic("wc-out", 2)
    n = 300
    topo = word_count_into(KafkaSink, {"config": {"kafka.bootstrap.servers": broker.bootstrap,
                                                  "kafka.topic": "wc-out"}},
                           {**EXACTLY_ONCE, "test.sentences": n}, name="kafka-wc")
    with LocalCluster() as cluster:
        cluster.submit_topology("kafka-wc", {}, topo)

        def exact():
            outputs = Counter(json.loads(r.value)["word"] for r in read_committed_kafka(broker.bootstrap, "wc-out",
                                                                                        idle=0.3))
            assert dict(outputs) == expected_words(n)  # each (word, count) output committed once

        eventually(exact, timeout=90)
