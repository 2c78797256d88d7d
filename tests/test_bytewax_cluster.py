"""Unmodified Bytewax files on a real Gale cluster (ZooKeeper, nimbus, two supervisors, worker
processes): ``nimbus submit`` of a dataflow file with ``topology.workers=2``, so keyed items cross
workers (pickled inside sealed batches); a bounded input ends the dataflow on the cluster; and from
Kafka with recovery on, ``kill -9`` of the worker holding the counting step leaves the committed
counts exactly the topic's — nothing lost, nothing twice."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from gale.worker.state.exactly_once import committed_position, read_epoch, source_namespace
from gale.worker.state.inspect import read_committed
from gale.worker.state.redis_provider import RedisStateProvider
from tests.brokers import kafka_broker  # noqa: F401
from tests.cluster import Topologies, make_cluster, status
from tests.eo_cuts import logs_kept_on_failure
from tests.test_exactly_once_local import two_more_commits
from tests.waiting import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

FLOWS = Path(__file__).resolve().parent / "bytewax_flows"
PARTITIONS = 4
WORDS = [f"w{i}" for i in range(13)]
COUNT_STEP = "kafka_wc.count.stateful_flat_map.stateful.stateful_batch"
INPUT_STEP = "kafka_wc.words"


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    c = make_cluster(zk_server, tmp_path_factory.mktemp("bytewax"), supervisors=2, slots=2)
    c.start()
    yield c
    c.cleanup()


def flow_copy(tmp_path: Path, name: str, **settings) -> Path:
    """A copy of a dataflow file in its own directory (the code bundle) with its settings beside it."""
    d = tmp_path / "code"
    d.mkdir()
    shutil.copy(FLOWS / name, d / name)
    (d / "settings.json").write_text(json.dumps(settings))
    return d / name


def test_a_bounded_dataflow_on_two_workers_counts_exactly_and_ends(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    path = flow_copy(tmp_path, "bounded_wc.py", lines=600, out_dir=str(out))
    import importlib.util

    spec = importlib.util.spec_from_file_location("bounded_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = Counter(w for line in module.LINES for w in line.split())
    with Topologies(cluster) as topologies:
        name, _ = topologies.submit(path, "bw-bounded", "-c", "topology.workers=2")

        def ended():
            comps = status(cluster, name)["components"]
            for step in ("bounded_wc.lines", "bounded_wc.out"):
                assert comps[step]["stats"]["extra"].get("bytewax_ended_tasks", 0) == 2, comps[step]["stats"]

        eventually(ended, 120)
        workers = {e["worker"]["pid"] for e in status(cluster, name)["components"]["bounded_wc.out"]["executor_list"]}
        assert len(workers) == 2, workers  # the output step's two tasks in two worker processes
        got = Counter()
        for part in out.glob("part-*.txt"):
            for line in part.read_text().splitlines():
                word, count = line.split()
                assert word not in got, f"{word} counted by two tasks"
                got[word] = int(count)
        assert got == expected


def counts(provider, name) -> dict[str, int]:
    return {k: pickle.loads(v) for k, v in read_committed(provider, name, COUNT_STEP, key_groups=128).items()}


def checkpointed_offsets(provider, name) -> dict[int, int]:
    out = {}
    for i in range(2):
        position = committed_position(provider, [source_namespace(name, INPUT_STEP, i)], False) or {}
        out.update({int(k): pickle.loads(v) for k, v in position.items()})
    return out


def submit_counting(topologies, tmp_path, redis_server, kafka_broker, topic, base):  # noqa: F811
    """The Kafka word count on two workers with recovery (exactly once, state in Redis) and a message
    timeout longer than the test: a kill is noticed by the restarted tasks' hellos, not by timeouts."""
    path = flow_copy(tmp_path, "kafka_wc.py", bootstrap=kafka_broker.bootstrap, topic=topic, partitions=PARTITIONS)
    name, _ = topologies.submit(path, base, *[x for k, v in {
        "topology.workers": 2, "topology.bytewax.recovery": "true", "topology.state.provider": "redis",
        "topology.state.redis.url": redis_server.url, "topology.message.timeout.secs": 600,
    }.items() for x in ("-c", f"{k}={v}")])
    return name


def worker_of(cluster, name, step, not_among=()):
    worker = status(cluster, name)["components"][step]["executor_list"][0]["worker"]
    assert worker and worker["pid"] and worker["pid"] not in not_among, worker
    return worker["pid"]


def converged(provider, name, hws, values):
    """Every record's position checkpointed, then two more checkpoints: the committed counts, the
    records lost and over-counted, and the record (its generation says how often it rolled back)."""
    def every_record_checkpointed():
        assert checkpointed_offsets(provider, name) == hws
        return read_epoch(provider, name).txid

    epoch = two_more_commits(provider, name, eventually(every_record_checkpointed, 240))
    committed, expected = counts(provider, name), Counter(values)
    lost = sum(max(0, n - committed.get(k, 0)) for k, n in expected.items())
    over = sum(max(0, n - expected.get(k, 0)) for k, n in committed.items())
    return committed, lost, over, epoch


@pytest.mark.parametrize("killed", [COUNT_STEP, INPUT_STEP], ids=["counting-worker", "input-worker"])
def test_kill_minus_9_of_a_worker_counts_every_kafka_record_exactly_once(
        cluster, tmp_path, redis_server, kafka_broker, killed):  # noqa: F811
    """kill -9 of the worker holding the counting step's first task, or the input's, while records
    flow: the dataflow rolls back to its last checkpoint (state and Kafka offsets), and the committed
    counts equal the topic's."""
    topic = f"bw-eo-{'count' if killed == COUNT_STEP else 'input'}"
    kafka_broker.create_topic(topic, PARTITIONS)
    values = [WORDS[(i * 5) % len(WORDS)] for i in range(3000)]
    kafka_broker.produce(topic, values[:1500], partitions=PARTITIONS)
    provider = RedisStateProvider(redis_server.url)
    with Topologies(cluster) as topologies:
        name = submit_counting(topologies, tmp_path, redis_server, kafka_broker, topic, "bw-eo")
        with logs_kept_on_failure(cluster, name):
            def some_committed():
                assert sum(counts(provider, name).values()) > 0, "nothing committed yet"

            eventually(some_committed, 120)
            pid = eventually(lambda: worker_of(cluster, name, killed), 30)
            kafka_broker.produce(topic, values[1500:], partitions=PARTITIONS)  # records flowing at the kill
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            hws = kafka_broker.high_watermarks(topic, PARTITIONS)
            assert sum(hws.values()) == len(values)
            committed, lost, over, epoch = converged(provider, name, hws, values)
            # the figures of docs/reliability.md ("Bytewax dataflows under kill -9"), shown with -s
            print(f"\nbytewax_eo_kill[{killed}]: records={len(values)} lost={lost} over_counted={over} "
                  f"generation={epoch.generation} converged_after_kill={time.monotonic() - killed_at:.1f}s")
            assert committed == dict(Counter(values))  # lost 0, over-counted 0
            assert epoch.generation >= 2, epoch  # the kill rolled the dataflow back


@pytest.mark.slow
def test_kill_minus_9_every_few_seconds_while_records_flow_counts_exactly_once(
        cluster, tmp_path, redis_server, kafka_broker):  # noqa: F811
    """A soak in the chaos suite's style (``--run-slow``, about 3 minutes): 8 rounds of 600 records,
    and in rounds 2–7 a ``kill -9`` of a worker of the dataflow — the counting step's or the input's,
    in turn, each once the previous one's replacement runs — with 6 s of records flowing between
    rounds; then lost and over-counted, both 0 (the figures of docs/reliability.md)."""
    topic = "bw-eo-soak"
    kafka_broker.create_topic(topic, PARTITIONS)
    provider = RedisStateProvider(redis_server.url)
    values: list[str] = []
    with Topologies(cluster) as topologies:
        name = submit_counting(topologies, tmp_path, redis_server, kafka_broker, topic, "bw-soak")
        with logs_kept_on_failure(cluster, name):
            kills = []
            started = time.monotonic()
            for round_ in range(8):
                batch = [WORDS[(len(values) + i * 7) % len(WORDS)] for i in range(600)]
                kafka_broker.produce(topic, batch, partitions=PARTITIONS)
                values.extend(batch)
                if round_ in (1, 2, 3, 4, 5, 6):
                    step = COUNT_STEP if round_ % 2 else INPUT_STEP
                    pid = eventually(lambda: worker_of(cluster, name, step, [k[1] for k in kills]), 60)
                    os.kill(pid, signal.SIGKILL)
                    kills.append((step, pid, round(time.monotonic() - started, 1)))
                deadline = time.monotonic() + 6
                while time.monotonic() < deadline:
                    time.sleep(0.2)  # workload pacing: records keep flowing between kills
            hws = kafka_broker.high_watermarks(topic, PARTITIONS)
            assert sum(hws.values()) == len(values)
            committed, lost, over, epoch = converged(provider, name, hws, values)
            print(f"\nbytewax_eo_soak: records={len(values)} kills={len(kills)} {kills} lost={lost} "
                  f"over_counted={over} generation={epoch.generation} "
                  f"converged_after_last_kill={time.monotonic() - started - kills[-1][2]:.1f}s")
            assert committed == dict(Counter(values))
            assert epoch.generation >= 2, epoch  # the kills rolled the dataflow back
