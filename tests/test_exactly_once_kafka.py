"""Exactly-once state from Kafka (real broker, real ZooKeeper consumer group, local mode): the Kafka
spout's position (next offset per partition) goes into each checkpoint, a failure rolls the topology
back and the spout rewinds every partition to the checkpoint, so the committed counts equal the
counts of the topic's records — nothing lost, nothing twice."""

from __future__ import annotations

from collections import Counter

import pytest

from gale import TopologyBuilder
from gale.connectors import KafkaSpout
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.worker.local import LocalCluster
from gale.worker.state.exactly_once import committed_position, read_epoch, source_namespace
from tests.brokers import kafka_broker  # noqa: F401
from tests.state_topologies import FlakyRecords, StatefulCount
from tests.test_kafka_spout import PARTITIONS, committed, kafka_conf
from tests.test_exactly_once_local import two_more_commits
from tests.test_state_local import counts_in
from tests.waiting import eventually

WORDS = [f"w{i}" for i in range(11)]


def topology(spout_tasks: int):
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, spout_tasks, kwargs={"fields": ["partition", "offset", "value"]})
    b.set_bolt("records", FlakyRecords, 2).shuffle_grouping("kafka")
    b.set_bolt("count", StatefulCount, 2).fields_grouping("records", ["word"])
    return b


def checkpointed_offsets(running, tasks: int) -> dict[int, int]:
    provider = running.runtime.resources["state"]
    names = [source_namespace(running.runtime.resources["state_prefix"], "kafka", i) for i in range(tasks)]
    merged = committed_position(provider, names, merge=True)
    return {int(key.rpartition("/")[2]): offset for key, offset in (merged or {}).items()}


@pytest.mark.parametrize("spout_tasks,fail_every", [(1, 0), (2, 29)])
def test_counts_from_a_topic_are_exact_through_failures(kafka_broker, zk, zk_chroot, conf, spout_tasks, fail_every):
    topic = f"eo{spout_tasks}{fail_every}"
    kafka_broker.create_topic(topic, PARTITIONS)
    values = [WORDS[(i * 7) % len(WORDS)] for i in range(400)]
    kafka_broker.produce(topic, values, partitions=PARTITIONS)
    hws = kafka_broker.high_watermarks(topic, PARTITIONS)
    overrides = {**kafka_conf(kafka_broker, zk_chroot, topic, f"g{topic}"), "topology.state.guarantee": "exactly-once",
                 "topology.state.checkpoint.interval.ms": 20, "test.fail.every": fail_every,
                 "topology.max.spout.pending": 8}
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology(topic, overrides, topology(spout_tasks).create_topology(topic))
        provider = running.runtime.resources["state"]

        def every_record_checkpointed():
            assert checkpointed_offsets(running, spout_tasks) == hws
            return read_epoch(provider, running.runtime.resources["state_prefix"]).txid

        txid = eventually(every_record_checkpointed, timeout=120)

        two_more_commits(provider, running.runtime.resources["state_prefix"], txid, running)
        counts = counts_in(running)
        stats = running.component_stats()
        group = committed(zk, f"g{topic}", topic)
    assert counts == dict(Counter(values))
    extra = stats[CHECKPOINT_COMPONENT]["extra"]
    if fail_every:
        # failures rolled the topology back, and at least one went back to a checkpoint with
        # positions in it (not only to the start): the spout rewound partitions to offsets
        assert extra["checkpoint_rollbacks"] >= 2 and extra["checkpoint_rollback_to_max"] >= 1, extra
    # the group's offsets are never ahead of the checkpoint (they are what a rewind went back to)
    assert all(group.get(p, 0) <= hws[p] for p in range(PARTITIONS))
