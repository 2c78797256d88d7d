"""Exactly-once state on a real cluster: real ZooKeeper, nimbus, supervisors and worker processes,
a real Kafka-protocol broker and a real Redis. kill -9 of the worker holding counting tasks while
records flow: the topology rolls back to its last checkpoint, the Kafka spout rewinds, and the counts
committed in Redis equal the counts of the topic's records exactly — nothing lost, nothing twice
(at-least-once, the same fault over-counts: tests/test_state_cluster.py)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from gale.worker.state.exactly_once import committed_position, read_epoch, source_namespace
from gale.worker.state.inspect import read_committed
from gale.worker.state.redis_provider import RedisStateProvider
from tests.brokers import kafka_broker  # noqa: F401
from tests.cluster import Topologies, make_cluster, status
from tests.eo_cuts import CutWatcher, logs_kept_on_failure
from tests.test_exactly_once_local import two_more_commits
from tests.waiting import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

TOPOLOGY = Path(__file__).resolve().parent / "cluster_topologies" / "eo_kafka_wc.py"
WINDOWS = Path(__file__).resolve().parent / "cluster_topologies" / "eo_kafka_windows.py"
PARTITIONS = 4
WORDS = [f"w{i}" for i in range(13)]


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = make_cluster(zk_server, tmp_path_factory.mktemp("eo"), supervisors=2, slots=2)
    c.start()
    yield c
    c.cleanup()


def checkpointed_offsets(provider, name) -> dict[int, int]:
    merged = committed_position(provider, [source_namespace(name, "kafka", i) for i in range(2)], merge=True)
    return {int(key.rpartition("/")[2]): offset for key, offset in (merged or {}).items()}


def submit(cluster, topologies, redis_server, kafka_broker, topic, name, topology=TOPOLOGY,  # noqa: F811
           **extra):
    return topologies.submit(topology, name, *[x for k, v in {
        "kafka.bootstrap.servers": kafka_broker.bootstrap, "kafka.topic": topic, "kafka.group": name,
        "kafka.zookeeper.root": cluster.root.rsplit("/", 1)[0] + "/kafka",
        "topology.state.provider": "redis", "topology.state.redis.url": redis_server.url, **extra,
    }.items() for x in ("-c", f"{k}={v}")])[0]


def wait_exact(provider, name, hws, values, cuts: CutWatcher | None = None):
    """Every record's position checkpointed, then two more checkpoints: the committed counts are the
    topic's counts exactly. Returns the record (its generation tells how often it rolled back)."""
    def every_record_checkpointed():
        assert checkpointed_offsets(provider, name) == hws
        return read_epoch(provider, name).txid

    txid = eventually(every_record_checkpointed, 180)
    epoch = two_more_commits(provider, name, txid)
    counts = read_committed(provider, name, "count", key_groups=128)
    # nothing lost or twice; if not, the cuts tell which checkpoint first went wrong
    expected = dict(Counter(values))
    assert counts == expected, (f"committed {sorted(counts.items())}\nexpected {sorted(expected.items())}\n"
                                + (cuts.describe() if cuts else ""))
    return epoch


def committed_total(provider, name) -> int:
    return sum(read_committed(provider, name, "count", key_groups=128).values())


def watch_cuts(redis_server, name) -> CutWatcher:
    """Every committed checkpoint of the word count is a consistent cut: its counts add up to its
    source positions (each record counts once, offsets start at 0)."""
    return CutWatcher(redis_server.url, name, checkpointed_offsets, committed_total)


def assert_every_cut_consistent(cuts: CutWatcher) -> None:
    assert cuts.cuts, "no committed checkpoint was seen"
    assert not cuts.inconsistent(), cuts.describe()


def some_committed(provider, name):
    counts = read_committed(provider, name, "count", key_groups=128)
    assert sum(counts.values()) > 0, "nothing committed yet"


def worker_of(cluster, name, component):
    worker = status(cluster, name)["components"][component]["executor_list"][0]["worker"]
    assert worker and worker["pid"], f"the {component} executor's worker has not reported yet"
    return worker["pid"]


def test_kill_minus_9_of_the_counting_worker_counts_every_record_exactly_once(cluster, redis_server,
                                                                              kafka_broker):  # noqa: F811
    topic = "eo-words"
    kafka_broker.create_topic(topic, PARTITIONS)
    values = [WORDS[(i * 5) % len(WORDS)] for i in range(3000)]
    kafka_broker.produce(topic, values[:1500], partitions=PARTITIONS)
    provider = RedisStateProvider(redis_server.url)
    with Topologies(cluster) as topologies:
        # a message timeout longer than the test: the kill must not be noticed by trees timing out, but
        # by the restarted tasks' hellos (gale.worker.state.liveness), and rolled back from at once
        name = submit(cluster, topologies, redis_server, kafka_broker, topic, "eo-kill",
                      **{"topology.message.timeout.secs": 600})
        with logs_kept_on_failure(cluster, name), watch_cuts(redis_server, name) as cuts:
            eventually(lambda: some_committed(provider, name), 120)

            pid = eventually(lambda: worker_of(cluster, name, "count"), 30)
            kafka_broker.produce(topic, values[1500:], partitions=PARTITIONS)  # records flowing at the kill
            os.kill(pid, signal.SIGKILL)
            hws = kafka_broker.high_watermarks(topic, PARTITIONS)
            assert sum(hws.values()) == len(values)

            epoch = wait_exact(provider, name, hws, values, cuts)
        assert_every_cut_consistent(cuts)
        # the kill rolled the topology back: a generation beyond the start-up one
        assert epoch.generation >= 2, epoch

        def restarted():
            pids = {e["worker"]["pid"] for e in status(cluster, name)["components"]["count"]["executor_list"]
                    if e["worker"]}
            assert pids and pid not in pids, pids

        eventually(restarted, 60)


def test_redis_killed_mid_run_rolls_back_and_every_record_counts_exactly_once(cluster, redis_server,
                                                                              kafka_broker):  # noqa: F811
    """kill -9 of Redis while records flow (checkpoints fail, nothing is committed in part), then Redis
    back (from its append-only file): the topology rolls back to the last checkpoint and the counts
    come out exact."""
    topic = "eo-redis"
    kafka_broker.create_topic(topic, PARTITIONS)
    values = [WORDS[(i * 3) % len(WORDS)] for i in range(3000)]
    kafka_broker.produce(topic, values[:1500], partitions=PARTITIONS)
    provider = RedisStateProvider(redis_server.url)
    with Topologies(cluster) as topologies:
        name = submit(cluster, topologies, redis_server, kafka_broker, topic, "eo-redis")
        with logs_kept_on_failure(cluster, name), watch_cuts(redis_server, name) as cuts:
            eventually(lambda: some_committed(provider, name), 120)
            kafka_broker.produce(topic, values[1500:], partitions=PARTITIONS)
            redis_server.kill()
            try:
                def checkpoints_failing():
                    cp = status(cluster, name)["components"]["$checkpointspout"]
                    assert cp["stats"]["extra"].get("checkpoint_failures", 0) >= 1, cp["stats"]

                eventually(checkpoints_failing, 60)
            finally:
                redis_server.start()
            wait_exact(provider, name, kafka_broker.high_watermarks(topic, PARTITIONS), values, cuts)
        assert_every_cut_consistent(cuts)


def test_kill_minus_9_of_the_windowing_worker_mid_window_fires_every_item_exactly_once(cluster, redis_server,
                                                                                     kafka_broker):  # noqa: F811
    """Kafka → persistent 1 s windows → a tally of how many fired windows held each item, exactly
    once; kill -9 of the worker holding the window while records flow: the window in progress is
    reloaded from the last checkpoint, the sources rewind to that checkpoint's offsets, and every
    item is in exactly one fired window (results equal the reference: a tally of 1 per item)."""
    topic = "eo-windows"
    kafka_broker.create_topic(topic, PARTITIONS)
    n = 3000
    kafka_broker.produce(topic, [str(i) for i in range(n // 2)], partitions=PARTITIONS)
    provider = RedisStateProvider(redis_server.url)
    with Topologies(cluster) as topologies:
        name = submit(cluster, topologies, redis_server, kafka_broker, topic, "eo-windows", WINDOWS)

        def some_tallied():
            assert read_committed(provider, name, "tally", tasks=1), "no window committed yet"

        eventually(some_tallied, 120)
        pid = eventually(lambda: worker_of(cluster, name, "window"), 30)
        kafka_broker.produce(topic, [str(i) for i in range(n // 2, n)], partitions=PARTITIONS)
        os.kill(pid, signal.SIGKILL)
        hws = kafka_broker.high_watermarks(topic, PARTITIONS)

        def every_item_in_one_window():
            assert checkpointed_offsets(provider, name) == hws
            tally = read_committed(provider, name, "tally", tasks=1)
            wrong = {i: c for i, c in tally.items() if c != 1}
            missing = set(range(n)) - set(tally)
            assert not wrong and not missing, (f"tallied more than once: {sorted(wrong.items())[:10]}; "
                                               f"{len(missing)} missing, e.g. {sorted(missing)[:10]}")
            return read_epoch(provider, name).txid

        txid = eventually(every_item_in_one_window, 180)
        epoch = two_more_commits(provider, name, txid)
        assert read_committed(provider, name, "tally", tasks=1) == {i: 1 for i in range(n)}
        assert epoch.generation >= 2, epoch  # the kill rolled the topology back

        def restarted():
            assert worker_of(cluster, name, "window") != pid

        eventually(restarted, 60)
