"""The Kafka spout against a real Kafka-protocol broker (Tansu) and a real ZooKeeper, in local mode."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from common.api import Bolt, TopologyBuilder
from worker.connectors.kafka_group import ConsumerGroupPaths, range_assign
from worker.connectors.kafka_spout import KafkaSpout
from worker.local import LocalCluster
from tests.brokers import kafka_broker  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import kafka_word_count  # noqa: E402

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 4


class Recorder(Bolt):
    """Records (partition, offset) of every tuple; fails each offset listed in ``fail_first`` once."""

    def __init__(self, fail_first=()):
        self.fail_first = {tuple(x) for x in fail_first}

    def declare_output_fields(self, declarer):
        declarer.declare(["partition", "offset"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: list[tuple[int, int]] = []
        self.failed: set[tuple[int, int]] = set()

    def execute(self, tup):
        key = (tup["partition"], tup["offset"])
        self.seen.append(key)
        if key in self.fail_first and key not in self.failed:
            self.failed.add(key)
            self.collector.fail(tup)
            return
        self.collector.ack(tup)


def kafka_conf(broker, zk_chroot, topic, group, **extra):
    return {
        "kafka.bootstrap.servers": broker.bootstrap,
        "kafka.topic": topic,
        "kafka.group": group,
        "kafka.zookeeper.root": zk_chroot,
        "kafka.rebalance.backoff.ms": 200,
        "kafka.commit.interval.ms": 200,
        "kafka.retry.initial.delay.ms": 50,
        **extra,
    }


def recorder_topology(spout_tasks=2, fail_first=(), spout_config=None):
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, spout_tasks, kwargs={"fields": ["partition", "offset", "value"],
                                                          "config": spout_config or {}})
    b.set_bolt("record", Recorder, 2, kwargs={"fail_first": [list(x) for x in fail_first]}).shuffle_grouping("kafka")
    return b.create_topology(name="rec", conf={"topology.max.spout.pending": 500})


def instances(running, component):
    out = []
    for ex_id, ex in running.runtime.executors.items():
        if running.layout.executor_to_component[ex_id] == component:
            out.extend((getattr(ex, "spouts", None) or getattr(ex, "bolts", None)).values())
    return out


def seen(running):
    out = []
    for bolt in instances(running, "record"):
        out.extend(bolt.seen)
    return out


def wait_for(predicate, timeout=30.0, what="condition", interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def committed(zk, group, topic, partitions=PARTITIONS):
    """Committed offsets, read with the test's ``zk`` client (chrooted at the spout's kafka.zookeeper.root)."""
    paths = ConsumerGroupPaths("/", group)
    out = {}
    for p in range(partitions):
        if zk.exists(paths.offset(topic, p)):
            out[p] = int(zk.get(paths.offset(topic, p))[0])
    return out


def owners(zk, group, topic):
    paths = ConsumerGroupPaths("/", group)
    if not zk.exists(paths.owners_dir(topic)):
        return {}
    return {int(p): zk.get(paths.owner(topic, int(p)))[0].decode() for p in zk.get_children(paths.owners_dir(topic))}


def settled(running, n_tasks_total=None):
    """Every spout task unpaused with an applied assignment, and the partitions all owned."""
    spouts = instances(running, "kafka")
    owned = [tp for s in spouts for tp in s.member.owned]
    return (all(not s.member.paused and s._generation == s.member.assignment.generation for s in spouts)
            and sorted(owned) == sorted(set(owned)))


# ---------------------------------------------------------------------------------------------------


def test_two_tasks_form_the_seed_consumer_group(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("layout", PARTITIONS)
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("layout", kafka_conf(kafka_broker, zk_chroot, "layout", "g1"),
                                          recorder_topology(2))
        spouts = instances(running, "kafka")
        wait_for(lambda: settled(running) and sum(len(s.member.owned) for s in spouts) == PARTITIONS,
                 what="two members owning all partitions")
        paths = ConsumerGroupPaths("/", "g1")  # zk is chrooted at kafka.zookeeper.root
        ids = sorted(zk.get_children(paths.ids_dir))
        assert ids == sorted(s.consumer_id for s in spouts)
        for cid in ids:
            # <group>_<hostname>-<ms>-<8 hex>
            assert cid.startswith("g1_")
            host_ms, _, tail = cid[len("g1_"):].rpartition("-")
            assert len(tail) == 8 and int(tail, 16) >= 0
            assert host_ms.rpartition("-")[2].isdigit()
            data, stat = zk.get(paths.member(cid))
            doc = json.loads(data)
            assert doc == {"version": 1, "subscription": {"layout": 1}, "pattern": "static",
                           "timestamp": doc["timestamp"]}
            assert isinstance(doc["timestamp"], str) and doc["timestamp"].isdigit()
            assert stat.ephemeralOwner != 0
        # range assignment: threads sorted as strings, contiguous ranges
        first, second = sorted(f"{cid}-0" for cid in ids)
        assert owners(zk, "g1", "layout") == {0: first, 1: first, 2: second, 3: second}
        for p in range(PARTITIONS):
            assert zk.get(paths.owner("layout", p))[1].ephemeralOwner != 0
        expected = range_assign({"layout": range(PARTITIONS)}, {cid: {"layout": 1} for cid in ids})
        for s in spouts:
            assert sorted(s.member.owned) == expected[s.member.thread_id]
        # offsets appear (persistent) once something was consumed and committed
        kafka_broker.produce("layout", [f"r{i}" for i in range(40)], partitions=PARTITIONS)
        wait_for(lambda: committed(zk, "g1", "layout") == {p: 10 for p in range(PARTITIONS)},
                 what="offsets committed at the high watermark")
        assert all(zk.get(paths.offset("layout", p))[1].ephemeralOwner == 0 for p in range(PARTITIONS))
    # a clean shutdown leaves the group: no ids, no owners; offsets stay
    assert zk.get_children(paths.ids_dir) == []
    assert owners(zk, "g1", "layout") == {}
    assert committed(zk, "g1", "layout") == {p: 10 for p in range(PARTITIONS)}


def test_word_count_processes_every_record_and_commits_the_high_watermark(kafka_broker, zk, zk_chroot, conf):
    import word_count

    kafka_broker.create_topic("sentences", PARTITIONS)
    sentences = [word_count.SENTENCES[i % len(word_count.SENTENCES)] + f" n{i}" for i in range(2000)]
    kafka_broker.produce("sentences", sentences, partitions=PARTITIONS)
    hws = kafka_broker.high_watermarks("sentences", PARTITIONS)
    assert sum(hws.values()) == 2000
    overrides = kafka_conf(kafka_broker, zk_chroot, "sentences", "wc", **{"kafka.spout.parallelism": 2})
    topo = kafka_word_count.topology(overrides)
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("kwc", overrides, topo)
        wait_for(lambda: running.component_stats()["sentences"]["acked"] >= 2000, timeout=60, what="2000 acks")
        wait_for(lambda: committed(zk, "wc", "sentences") == hws, what="commits at the high watermark")
        counts = Counter()
        for bolt in instances(running, "count"):
            counts.update(bolt.counts)
        stats = running.component_stats()
    expected = Counter(w for s in sentences for w in s.split())
    # at least once: every word counted at least as often as it occurs
    assert all(counts[w] >= n for w, n in expected.items())
    assert stats["sentences"]["failed"] == 0
    assert stats["sentences"]["extra"]["kafka_commit_writes"] >= PARTITIONS
    assert committed(zk, "wc", "sentences") == hws
