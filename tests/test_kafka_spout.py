"""The Kafka spout against a real Kafka-protocol broker (Tansu) and a real ZooKeeper, in local mode."""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from gale import Bolt, TopologyBuilder
from gale.worker.connectors.kafka_group import ConsumerGroupPaths, range_assign
from gale.connectors import KafkaSpout
from gale import LocalCluster
from tests.brokers import kafka_broker  # noqa: F401
from tests.waiting import until

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


def recorder_topology(spout_tasks=2, fail_first=(), spout_config=None, bolts=2):
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, spout_tasks, kwargs={"fields": ["partition", "offset", "value"],
                                                          "config": spout_config or {}})
    b.set_bolt("record", Recorder, bolts, kwargs={"fail_first": [list(x) for x in fail_first]}).shuffle_grouping("kafka")
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


def test_two_tasks_form_the_zookeeper_consumer_group(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("layout", PARTITIONS)
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("layout", kafka_conf(kafka_broker, zk_chroot, "layout", "g1"),
                                          recorder_topology(2))
        spouts = instances(running, "kafka")
        until(lambda: settled(running) and sum(len(s.member.owned) for s in spouts) == PARTITIONS,
              60, "two members owning all partitions")
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
        until(lambda: committed(zk, "g1", "layout") == {p: 10 for p in range(PARTITIONS)},
              60, "offsets committed at the high watermark")
        assert running.errors == {}
        assert all(zk.get(paths.offset("layout", p))[1].ephemeralOwner == 0 for p in range(PARTITIONS))
    # a clean shutdown leaves the group: no ids, no owners; offsets stay; the member threads end
    until(lambda: not [t.name for t in threading.enumerate() if t.name.startswith("kafka-group-kafka-")], 10,
          lambda: f"threads {[t.name for t in threading.enumerate()]}")
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
        until(lambda: running.component_stats()["sentences"]["acked"] >= 2000, 60, "2000 acks")
        until(lambda: committed(zk, "wc", "sentences") == hws, 60, "commits at the high watermark")
        # the member thread's write counter reaches the spout's stats on its next publish
        until(lambda: running.component_stats()["sentences"]["extra"]["kafka_commit_writes"] >= PARTITIONS,
              60, "commit writes in the stats")
        counts = Counter()
        for bolt in instances(running, "count"):
            counts.update(bolt.counts)
        stats = running.component_stats()
        assert running.errors == {}
    expected = Counter(w for s in sentences for w in s.split())
    # at least once: every word counted at least as often as it occurs
    assert all(counts[w] >= n for w, n in expected.items())
    assert stats["sentences"]["failed"] == 0
    assert committed(zk, "wc", "sentences") == hws


def all_offsets(hws):
    return {(p, o) for p, hw in hws.items() for o in range(hw)}


def test_a_member_leaving_hands_its_partitions_over_and_nothing_is_lost(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("handover", PARTITIONS)
    kafka_broker.produce("handover", [f"a{i}" for i in range(400)], partitions=PARTITIONS)
    overrides = kafka_conf(kafka_broker, zk_chroot, "handover", "ho")
    with LocalCluster(conf) as cluster:
        # two "workers" of one consumer group, one spout task each
        a = cluster.submit_topology("a", overrides, recorder_topology(1))
        b = cluster.submit_topology("b", overrides, recorder_topology(1))
        (sa,), (sb,) = instances(a, "kafka"), instances(b, "kafka")
        until(lambda: settled(a) and settled(b) and len(sa.member.owned) == 2 and len(sb.member.owned) == 2,
              60, "a 2+2 split")
        until(lambda: len(seen(a)) + len(seen(b)) >= 400, 60, "the first records")
        seen_a = instances(a, "record")
        cluster.kill_topology("a")  # a leaves the group (commits, releases, deletes its ids node)
        until(lambda: settled(b) and len(sb.member.owned) == PARTITIONS, 60, "b owning every partition")
        assert zk.get_children("/consumers/ho/ids") == [sb.consumer_id]
        assert set(owners(zk, "ho", "handover").values()) == {sb.member.thread_id}
        kafka_broker.produce("handover", [f"b{i}" for i in range(400)], partitions=PARTITIONS)
        hws = kafka_broker.high_watermarks("handover", PARTITIONS)
        until(lambda: committed(zk, "ho", "handover") == hws, 60, "commits at the high watermark")
        got = set(seen(b)) | {x for bolt in seen_a for x in bolt.seen}
        assert a.errors == {} and b.errors == {}
    assert got == all_offsets(hws)


def test_a_rebalance_re_emits_the_failed_tuples_it_gives_up_so_the_next_owner_replays_nothing(
        kafka_broker, zk, zk_chroot, conf):
    """A task giving partitions up with a failed tuple waiting for its retry and the later records
    acked (a rolled-back checkpoint fails every tuple since the last commit): it re-emits the failed
    ones while the rebalance drains and commits past everything, so the next owner reads nothing
    again — without that the commit stops at the failed offset and the next owner replays every
    record after it."""
    kafka_broker.create_topic("settle", PARTITIONS)
    kafka_broker.produce("settle", [f"s{i}" for i in range(400)], partitions=PARTITIONS)
    to_fail = [(p, 5) for p in range(PARTITIONS)]
    # the retries fall due well after the second member joins, and the drain outlasts them
    overrides = kafka_conf(kafka_broker, zk_chroot, "settle", "st", **{
        "kafka.retry.initial.delay.ms": 6000, "kafka.rebalance.drain.ms": 60000})
    with LocalCluster(conf) as cluster:
        a = cluster.submit_topology("a", overrides, recorder_topology(1, fail_first=to_fail, bolts=1))
        (sa,) = instances(a, "kafka")

        def failed_waiting():
            with sa.member.lock:
                trackers = dict(sa._trackers)
                assert len(trackers) == PARTITIONS and all(
                    t.emit_position == 100 and not t.inflight and list(t.failed) == [5] for t in trackers.values()
                ), {tp: (t.emit_position, sorted(t.inflight), sorted(t.failed)) for tp, t in trackers.items()}

        until(lambda: failed_waiting() is None, 60, "every record acked but offset 5 of each partition")
        until(lambda: committed(zk, "st", "settle") == {p: 5 for p in range(PARTITIONS)}, 10,
              "commits stopped at the failed offsets")
        b = cluster.submit_topology("b", overrides, recorder_topology(1, bolts=1))
        (sb,) = instances(b, "kafka")
        until(lambda: settled(a) and settled(b) and len(sa.member.owned) == 2 and len(sb.member.owned) == 2,
              60, "a 2+2 split")
        until(lambda: committed(zk, "st", "settle") == {p: 100 for p in range(PARTITIONS)}, 60,
              "commits at the high watermark")
        got_a, got_b = Counter(seen(a)), Counter(seen(b))
        stats = a.component_stats()["kafka"]["extra"]
        assert a.errors == {} and b.errors == {}
        assert sorted(sb.member.owned) == [("settle", 2), ("settle", 3)]
    assert got_b == Counter(), f"the next owner read again: {sorted(got_b)[:10]}"
    assert got_a == Counter({x: 2 if x in to_fail else 1 for x in all_offsets({p: 100 for p in range(PARTITIONS)})})
    assert stats["kafka_retried"] == len(to_fail) and stats["kafka_drain_timeouts"] == 0


def test_more_tasks_than_partitions_leaves_a_task_idle(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("single", 1)
    kafka_broker.produce("single", [f"v{i}" for i in range(30)], partitions=1)
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("single", kafka_conf(kafka_broker, zk_chroot, "single", "sg"),
                                          recorder_topology(2))
        spouts = instances(running, "kafka")
        until(lambda: settled(running) and sorted(len(s.member.owned) for s in spouts) == [0, 1], 60, "1+0")
        until(lambda: committed(zk, "sg", "single", 1) == {0: 30}, 60, "all consumed")
        assert set(seen(running)) == all_offsets({0: 30})
        assert running.errors == {}


def test_with_acking_off_records_count_as_done_when_emitted(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("noack", 2)
    kafka_broker.produce("noack", [f"v{i}" for i in range(100)], partitions=2)
    overrides = {**kafka_conf(kafka_broker, zk_chroot, "noack", "na"), "topology.acker.executors": 0}
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("noack", overrides, recorder_topology(1))
        until(lambda: committed(zk, "na", "noack", 2) == {0: 50, 1: 50}, 60, "commits at the end")
        assert set(seen(running)) == all_offsets({0: 50, 1: 50})


def test_a_crashed_member_is_replaced_and_its_uncommitted_work_is_replayed(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("crash", PARTITIONS)
    overrides = kafka_conf(kafka_broker, zk_chroot, "crash", "cr", **{"kafka.commit.interval.ms": 60000})
    with LocalCluster(conf) as cluster:
        a = cluster.submit_topology("a", overrides, recorder_topology(1))
        b = cluster.submit_topology("b", overrides, recorder_topology(1))
        (sa,), (sb,) = instances(a, "kafka"), instances(b, "kafka")
        until(lambda: settled(a) and settled(b) and len(sa.member.owned) == 2 and len(sb.member.owned) == 2,
              60, "a 2+2 split")
        # the records arrive once the group has formed: had they been there before, a (alone in the
        # group for a moment) could have read some of b's partitions and committed them on release
        kafka_broker.produce("crash", [f"c{i}" for i in range(400)], partitions=PARTITIONS)
        hws = kafka_broker.high_watermarks("crash", PARTITIONS)
        a_parts = {p for _, p in sa.member.owned}
        until(lambda: {p for p, _ in seen(a)} == a_parts and len(seen(a)) >= 50, 60, "a processing")
        # a's worker dies: its executors stop where they are (nothing more acked or committed) and its
        # ZooKeeper session ends, so its ephemeral ids and owner nodes vanish
        a.runtime.stopping = True
        for t in a.runtime.threads:
            t.join(5)
        seen_by_a = set(seen(a))
        sa.zk_client.stop()
        until(lambda: settled(b) and len(sb.member.owned) == PARTITIONS, 60, "b taking over a's partitions")

        def b_caught_up():
            sb.member.commit(wait=5)  # the periodic commit is 60 s away
            return committed(zk, "cr", "crash") == hws

        until(b_caught_up, 30, "b committing the high watermark")
        got = set(seen(b))
    assert seen_by_a and {p for p, _ in seen_by_a} == a_parts
    # nothing lost, and a's uncommitted work was done again by b
    assert got | seen_by_a == all_offsets(hws)
    assert seen_by_a <= got
    assert committed(zk, "cr", "crash") == hws


def test_a_restarted_topology_resumes_from_the_committed_offsets(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("resume", PARTITIONS)
    kafka_broker.produce("resume", [f"x{i}" for i in range(200)], partitions=PARTITIONS)
    overrides = kafka_conf(kafka_broker, zk_chroot, "resume", "rs", **{"kafka.commit.interval.ms": 60000})
    with LocalCluster(conf) as cluster:
        first = cluster.submit_topology("first", overrides, recorder_topology(1))  # one task: no rebalance commits
        until(lambda: len(set(seen(first))) == 200 and first.component_stats()["kafka"]["acked"] >= 200,
              60, "200 records acked")
        assert committed(zk, "rs", "resume") == {}  # the periodic commit is 60 s away
        first.deactivate()  # deactivate commits
        until(lambda: committed(zk, "rs", "resume") == {p: 50 for p in range(PARTITIONS)}, 60, "commit")
        cluster.kill_topology("first")
    assert committed(zk, "rs", "resume") == {p: 50 for p in range(PARTITIONS)}
    with LocalCluster(conf) as cluster:
        second = cluster.submit_topology("second", overrides, recorder_topology(2))

        def group_settled():
            spouts = instances(second, "kafka")
            owned = [tp for s in spouts for tp in s.member.owned]
            return settled(second) and len(spouts) == 2 and all(s.member.owned for s in spouts) \
                and sorted(p for _, p in owned) == list(range(PARTITIONS))

        # the two tasks split the partitions before there is anything new to read: a record fetched
        # by the first task before the second joins would be replayed by its next owner
        until(group_settled, 60, "both spout tasks owning their partitions")
        kafka_broker.produce("resume", [f"y{i}" for i in range(80)], partitions=PARTITIONS)
        until(lambda: len(seen(second)) >= 80, 60, "the new records")
        until(lambda: second.component_stats()["kafka"]["acked"] >= 80, 60, "acks")
    # the kill committed 70 per partition: every offset from the start position up to 70 was acked
    # (and so recorded) — had the start been offset zero, 0-49 would be among the records seen
    assert committed(zk, "rs", "resume") == {p: 70 for p in range(PARTITIONS)}
    # only the records produced after the restart; nothing from offset zero again
    assert sorted(seen(second)) == sorted((p, o) for p in range(PARTITIONS) for o in range(50, 70))


def test_failed_tuples_are_replayed_from_their_offsets(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("replay", PARTITIONS)
    kafka_broker.produce("replay", [f"v{i}" for i in range(400)], partitions=PARTITIONS)
    to_fail = [(p, o) for p in range(PARTITIONS) for o in (0, 7, 33, 99)]
    overrides = kafka_conf(kafka_broker, zk_chroot, "replay", "rp")
    with LocalCluster(conf) as cluster:
        # one spout task and one recorder: no startup rebalance, and each failure happens exactly once
        running = cluster.submit_topology("replay", overrides, recorder_topology(1, fail_first=to_fail, bolts=1))
        until(lambda: committed(zk, "rp", "replay") == {p: 100 for p in range(PARTITIONS)},
              60, "commits past every failed offset")
        got = Counter(seen(running))
        stats = running.component_stats()["kafka"]
        assert running.errors == {}
    # each failed offset came back (from the broker, at its offset) and was acked the second time
    assert all(got[x] == 2 for x in to_fail), {x: got[x] for x in to_fail}
    assert set(got) == all_offsets({p: 100 for p in range(PARTITIONS)})
    assert stats["failed"] >= len(to_fail)
    assert stats["extra"]["kafka_retried"] == len(to_fail)
    assert stats["extra"]["kafka_dropped"] == 0


def test_retry_limit_drops_failed_tuples_and_counts_them(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("drops", 1)
    kafka_broker.produce("drops", [f"v{i}" for i in range(50)], partitions=1)
    to_fail = [(0, 3), (0, 10)]
    overrides = kafka_conf(kafka_broker, zk_chroot, "drops", "dr", **{"kafka.retry.limit": 0})
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("drops", overrides, recorder_topology(1, fail_first=to_fail, bolts=1))
        until(lambda: committed(zk, "dr", "drops", 1) == {0: 50}, 60, "commit past the dropped offsets")
        stats = running.component_stats()["kafka"]
        got = Counter(seen(running))
    assert stats["extra"]["kafka_dropped"] == 2
    assert all(got[x] == 1 for x in to_fail)  # never replayed


def test_spout_session_expiry_re_registers_and_rebalances(kafka_broker, zk, zk_chroot, conf, expire):
    kafka_broker.create_topic("expiry", PARTITIONS)
    overrides = kafka_conf(kafka_broker, zk_chroot, "expiry", "ex")
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("expiry", overrides, recorder_topology(2))
        s0, s1 = instances(running, "kafka")
        until(lambda: settled(running) and len(s0.member.owned) == 2 and len(s1.member.owned) == 2, 60, "2+2 split")
        old = zk.get(f"/consumers/ex/ids/{s0.consumer_id}")[1].ephemeralOwner
        kafka_broker.produce("expiry", [f"a{i}" for i in range(200)], partitions=PARTITIONS)
        expire(s0.zk_client)
        until(lambda: zk.exists(f"/consumers/ex/ids/{s0.consumer_id}") is not None
                 and zk.get(f"/consumers/ex/ids/{s0.consumer_id}")[1].ephemeralOwner != old, 60, "re-registration")
        until(lambda: settled(running) and len(s0.member.owned) == 2 and len(s1.member.owned) == 2,
              60, "2+2 split after the expiry")
        assert s0.member.rebalances >= 2 and s1.member.rebalances >= 2
        kafka_broker.produce("expiry", [f"b{i}" for i in range(200)], partitions=PARTITIONS)
        hws = kafka_broker.high_watermarks("expiry", PARTITIONS)
        until(lambda: committed(zk, "ex", "expiry") == hws, 60, "commits at the high watermark")
        assert set(seen(running)) == all_offsets(hws)
        assert running.errors == {}


@pytest.mark.parametrize("policy", ["earliest", "latest"])
def test_a_committed_offset_past_the_high_watermark_is_reset_by_policy(kafka_broker, zk, zk_chroot, conf, policy):
    kafka_broker.create_topic("oor", 2)
    kafka_broker.produce("oor", [f"v{i}" for i in range(40)], partitions=2)
    for p in range(2):  # e.g. the topic was deleted and created again
        zk.create(f"/consumers/oor/offsets/oor/{p}", b"10000", makepath=True)
    overrides = kafka_conf(kafka_broker, zk_chroot, "oor", "oor", **{"kafka.offset.reset": policy})
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("oor", overrides, recorder_topology(1))
        until(lambda: running.component_stats()["kafka"]["extra"]["kafka_offset_out_of_range"] == 2,
              60, "two out-of-range resets")
        if policy == "earliest":
            until(lambda: committed(zk, "oor", "oor", 2) == {0: 20, 1: 20}, 60, "everything read again")
            assert set(seen(running)) == all_offsets({0: 20, 1: 20})
        else:
            until(lambda: committed(zk, "oor", "oor", 2) == {0: 20, 1: 20}, 60, "reset to the end")
            assert seen(running) == []
            kafka_broker.produce("oor", ["n0", "n1"], partitions=2)
            until(lambda: len(seen(running)) == 2, 60, "only the new records")
            assert sorted(seen(running)) == [(0, 20), (1, 20)]


def test_a_committed_offset_below_the_log_start_is_reset(kafka_broker, zk, zk_chroot, conf, monkeypatch):
    """Retention deleted records the group never read. Tansu cannot delete records (DeleteRecords drops
    the connection), so the broker's log start is raised to 30 for this test through ListOffsets."""
    from kafka import KafkaConsumer

    real = KafkaConsumer.beginning_offsets

    def beginning_offsets(self, partitions, timeout_ms=None):
        return {tp: max(v, 30) if tp.topic == "trunc" else v for tp, v in real(self, partitions, timeout_ms).items()}

    monkeypatch.setattr(KafkaConsumer, "beginning_offsets", beginning_offsets)
    kafka_broker.create_topic("trunc", 1)
    kafka_broker.produce("trunc", [f"v{i}" for i in range(50)], partitions=1)
    zk.create("/consumers/tr/offsets/trunc/0", b"10", makepath=True)
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("trunc", kafka_conf(kafka_broker, zk_chroot, "trunc", "tr"),
                                          recorder_topology(1))
        until(lambda: committed(zk, "tr", "trunc", 1) == {0: 50}, 60, "consumed to the end")
        assert running.component_stats()["kafka"]["extra"]["kafka_offset_out_of_range"] == 1
        assert sorted(seen(running)) == [(0, o) for o in range(30, 50)]


def test_offset_reset_latest_without_a_commit_starts_at_the_end(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("late", 2)
    kafka_broker.produce("late", [f"v{i}" for i in range(300)], partitions=2)  # multi-record batches
    overrides = kafka_conf(kafka_broker, zk_chroot, "late", "lt", **{"kafka.offset.reset": "latest"})
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("late", overrides, recorder_topology(1))
        (spout,) = instances(running, "kafka")
        until(lambda: settled(running) and len(spout._trackers) == 2, 60, "start positions resolved")
        kafka_broker.produce("late", ["n0", "n1", "n2", "n3"], partitions=2)
        # committed at 152: every offset from the start position up to 152 was acked (and recorded)
        until(lambda: committed(zk, "lt", "late", 2) == {0: 152, 1: 152}, 60, "the new records committed")
        assert sorted(seen(running)) == [(0, 150), (0, 151), (1, 150), (1, 151)]


def test_brokers_and_partitions_discovered_from_kafkas_zookeeper_layout(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("disc", PARTITIONS)
    kafka_broker.produce("disc", [f"v{i}" for i in range(100)], partitions=PARTITIONS)
    # what a ZooKeeper-mode Kafka cluster keeps (docs/storm-model.md §10): /brokers/ids/<id>, /brokers/topics/<t>
    zk.create("/brokers/ids/1", json.dumps({
        "version": 4, "host": None, "port": -1, "jmx_port": -1, "timestamp": "1700000000000",
        "endpoints": [f"CLIENT://{kafka_broker.bootstrap}"],
        "listener_security_protocol_map": {"CLIENT": "PLAINTEXT"},
    }).encode(), makepath=True, ephemeral=True)
    zk.create("/brokers/topics/disc", json.dumps(
        {"version": 1, "partitions": {str(p): [1] for p in range(PARTITIONS)}}).encode(), makepath=True)
    for p in range(PARTITIONS):
        zk.create(f"/brokers/topics/disc/partitions/{p}/state", json.dumps(
            {"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1]}).encode(),
            makepath=True)
    overrides = kafka_conf(kafka_broker, zk_chroot, "disc", "dc", **{"kafka.zookeeper.discovery": True})
    del overrides["kafka.bootstrap.servers"]
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("disc", overrides, recorder_topology(2))
        until(lambda: committed(zk, "dc", "disc") == {p: 25 for p in range(PARTITIONS)}, 60, "all consumed")
        assert set(seen(running)) == all_offsets({p: 25 for p in range(PARTITIONS)})


def test_one_spout_reads_several_topics_with_a_range_per_topic(kafka_broker, zk, zk_chroot, conf):
    kafka_broker.create_topic("ta", 2)
    kafka_broker.create_topic("tb", 3)
    kafka_broker.produce("ta", [f"a{i}" for i in range(20)], partitions=2)
    kafka_broker.produce("tb", [f"b{i}" for i in range(30)], partitions=3)
    overrides = kafka_conf(kafka_broker, zk_chroot, "ta,tb", "multi")
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, 2, kwargs={"fields": ["topic", "partition", "offset"]})
    b.set_bolt("record", TopicRecorder, 1).shuffle_grouping("kafka")
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("multi", overrides, b.create_topology(name="multi"))
        s0, s1 = sorted(instances(running, "kafka"), key=lambda s: s.member.thread_id)
        until(lambda: settled(running) and len(s0.member.owned) + len(s1.member.owned) == 5, 60, "ownership")
        # per topic: ta 1+1, tb 2+1 (the first thread gets the extra partition)
        assert sorted(s0.member.owned) == [("ta", 0), ("tb", 0), ("tb", 1)]
        assert sorted(s1.member.owned) == [("ta", 1), ("tb", 2)]
        doc = json.loads(zk.get(f"/consumers/multi/ids/{s0.consumer_id}")[0])
        assert doc["subscription"] == {"ta": 1, "tb": 1}
        until(lambda: committed(zk, "multi", "ta", 2) == {0: 10, 1: 10}
                 and committed(zk, "multi", "tb", 3) == {0: 10, 1: 10, 2: 10}, 60, "both topics committed")
        got = {x for bolt in instances(running, "record") for x in bolt.seen}
    assert got == {("ta", p, o) for p in range(2) for o in range(10)} | {("tb", p, o) for p in range(3) for o in range(10)}


class TopicRecorder(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen = []

    def execute(self, tup):
        self.seen.append((tup["topic"], tup["partition"], tup["offset"]))
        self.collector.ack(tup)


def test_a_crashed_group_thread_is_reported_as_a_component_error(kafka_broker, zk_chroot, conf, monkeypatch):
    from gale.worker.connectors.kafka_member import GroupMember

    def broken(self):
        raise RuntimeError("bug in the rebalance")

    monkeypatch.setattr(GroupMember, "_rebalance", broken)
    kafka_broker.create_topic("crashy", 1)
    with LocalCluster(conf) as cluster:
        running = cluster.submit_topology("crashy", kafka_conf(kafka_broker, zk_chroot, "crashy", "cy"),
                                          recorder_topology(1))
        until(lambda: running.errors.get("kafka"), 60, "an error report")
        assert "consumer-group thread" in running.errors["kafka"][0]
        assert "RuntimeError: bug in the rebalance" in running.errors["kafka"][0]


# --------------------------------------------------------------------------------------- bad input


def submit_error(conf, overrides, topology=None):
    with LocalCluster(conf) as cluster:
        with pytest.raises(Exception) as info:
            cluster.submit_topology("bad", overrides, topology or recorder_topology(1))
    return str(info.value)


def test_bad_configuration_is_named(kafka_broker, zk_chroot, conf):
    from gale.errors import ConfigError

    kafka_broker.create_topic("exists", 1)
    base = kafka_conf(kafka_broker, zk_chroot, "exists", "bad")
    no_topic = {k: v for k, v in base.items() if k != "kafka.topic"}
    assert "kafka.topic is required" in submit_error(conf, no_topic)
    no_group = {k: v for k, v in base.items() if k != "kafka.group"}
    assert "kafka.group is required" in submit_error(conf, no_group)
    msg = submit_error(conf, {**base, "kafka.offset.reset": "smallest"})
    assert "'kafka.offset.reset'" in msg and "'smallest'" in msg and "earliest, latest" in msg
    msg = submit_error(conf, {**base, "kafka.topic": "missing-topic"})
    assert "'missing-topic' does not exist" in msg and kafka_broker.bootstrap in msg
    msg = submit_error(conf, {**base, "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.bootstrap.timeout.ms": 500})
    assert "cannot reach the Kafka brokers 127.0.0.1:1" in msg
    msg = submit_error(conf, {**base, "kafka.bootstrap.servers": "nohostport"})
    assert "'kafka.bootstrap.servers'" in msg and "host:port" in msg
    msg = submit_error(conf, {**base, "kafka.rebalance.max.retries": 2, "kafka.rebalance.backoff.ms": 1000})
    assert "must exceed the ZooKeeper session timeout (6000 ms)" in msg
    with pytest.raises(ConfigError, match="unknown Kafka setting 'kafka.topik'"):
        KafkaSpout(config={"kafka.topik": "x"})
    with pytest.raises(ConfigError, match="kafka.topic is required"):
        kafka_word_count.topology({"kafka.bootstrap.servers": "h:1", "kafka.group": "g"})
