"""Kafka spout benchmark: throughput, ZooKeeper commit writes, rebalance time.

Run: ``.venv/bin/python -m benchmarks.bench_kafka [--records N] [--partitions P]``

Starts its own ZooKeeper (``gale.zkserver``) and Tansu broker (memory storage) on free loopback
ports and stops them at the end. Prints ``name: value unit`` lines:

* ``kafka_spout_records_per_sec_per_task`` — KafkaSpout → no-op acking bolt in local mode (acker
  on), records acked per second per spout task, for 1 and 2 spout tasks (one worker: the tasks
  share the GIL), and for 1 task without CRC checks (kafka-python checks CRC32C in pure Python
  unless the ``crc32c`` package is installed);
* ``kafka_zk_commit_writes_per_sec`` — offset writes to ZooKeeper per second while consuming
  continuously (default ``kafka.commit.interval.ms`` = 2000: at most partitions / 2 s);
* ``kafka_rebalance_secs_after_member_leaves`` — a member closes; until the survivor emits from
  every partition;
* ``kafka_rebalance_secs_after_member_killed`` — a member's process is killed with SIGKILL; until
  the survivor owns every partition (dominated by the ZooKeeper session timeout, which is printed).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from gale import Bolt, TopologyBuilder
from gale.config import defaults
from gale.log import configure
from gale.zkserver import ZooKeeperServer
from gale.connectors import KafkaSpout
from gale import LocalCluster

SESSION_TIMEOUT_MS = 6000


class NoOp(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def topology(tasks: int):
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout, tasks, kwargs={"fields": ["value"]})
    b.set_bolt("noop", NoOp, 2).shuffle_grouping("kafka")
    return b.create_topology(name="bench-kafka", conf={"topology.max.spout.pending": 2000})


def spouts(running):
    out = []
    for ex_id, ex in running.runtime.executors.items():
        if running.layout.executor_to_component[ex_id] == "kafka":
            out.extend(ex.spouts.values())
    return out


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.002)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def start_broker(workdir: Path):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.brokers import TansuBroker

    return TansuBroker(workdir).start()


def produce(broker, topic: str, n: int, partitions: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20, batch_size=256 * 1024)
    value = b"the cow jumped over the moon and the dish ran away with the spoon"
    for i in range(n):
        producer.send(topic, value=value, partition=i % partitions)
    producer.flush()
    producer.close()


def throughput(cluster_conf, broker, kconf, n: int, partitions: int, tasks: int) -> tuple[float, float, int]:
    topic = f"bench-{tasks}-{time.monotonic_ns()}"
    broker.create_topic(topic, partitions)
    produce(broker, topic, n, partitions)
    conf = {**kconf, "kafka.topic": topic, "kafka.group": topic}
    with LocalCluster(cluster_conf) as cluster:
        running = cluster.submit_topology(topic, conf, topology(tasks))
        members = spouts(running)
        wait_for(lambda: all(not s.member.paused and s._generation == s.member.assignment.generation for s in members)
                 and sum(len(s.member.owned) for s in members) == partitions, 60, "assignment")
        start = time.monotonic()
        end = wait_for(lambda: running.component_stats()["kafka"]["acked"] >= n, 600, f"{n} acks")
        elapsed = end - start
        writes = running.component_stats()["kafka"]["extra"]["kafka_commit_writes"]
    return n / elapsed / tasks, elapsed, int(writes)


def commit_rate(cluster_conf, broker, kconf, partitions: int, seconds: float) -> float:
    """Writes/s while records keep arriving (every commit interval changes every partition's offset)."""
    from kafka import KafkaProducer

    topic = f"commits-{time.monotonic_ns()}"
    broker.create_topic(topic, partitions)
    conf = {**kconf, "kafka.topic": topic, "kafka.group": topic, "kafka.commit.interval.ms": 2000}
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    with LocalCluster(cluster_conf) as cluster:
        running = cluster.submit_topology(topic, conf, topology(1))
        (spout,) = spouts(running)
        wait_for(lambda: not spout.member.paused and len(spout.member.owned) == partitions, 60, "assignment")
        before = spout.member.commit_writes
        start = time.monotonic()
        i = 0
        while time.monotonic() - start < seconds:
            producer.send(topic, value=b"x", partition=i % partitions)
            i += 1
            if i % 200 == 0:
                producer.flush()
                time.sleep(0.01)
        writes = spout.member.commit_writes - before
        elapsed = time.monotonic() - start
    producer.close()
    return writes / elapsed


def rebalance_after_leave(cluster_conf, broker, kconf, partitions: int) -> float:
    topic = f"leave-{time.monotonic_ns()}"
    broker.create_topic(topic, partitions)
    conf = {**kconf, "kafka.topic": topic, "kafka.group": topic}
    with LocalCluster(cluster_conf) as cluster:
        a = cluster.submit_topology("a", conf, topology(1))
        b = cluster.submit_topology("b", conf, topology(1))
        (sa,), (sb,) = spouts(a), spouts(b)
        wait_for(lambda: len(sa.member.owned) + len(sb.member.owned) == partitions and not sb.member.paused, 60, "split")
        start = time.monotonic()
        cluster.kill_topology("a")
        end = wait_for(lambda: len(sb.member.owned) == partitions and not sb.member.paused
                       and sb._generation == sb.member.assignment.generation, 60, "takeover")
    return end - start


VICTIM = textwrap.dedent("""
    import sys, time
    from gale.log import configure
    configure(fmt="console", level="ERROR")
    from gale.config_keys import Config
    from gale.zk import start_client
    from gale.worker.connectors.kafka_group import ConsumerGroupPaths, consumer_id_string
    from gale.worker.connectors.kafka_member import GroupMember
    zk, group, topic, partitions, timeout = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    config = Config.resolve({"storm.zookeeper.servers": [zk], "storm.zookeeper.session.timeout": timeout},
                            allow_user_keys=False)
    client = start_client(config)
    m = GroupMember(client, ConsumerGroupPaths("/", group), consumer_id_string(group, "victim", 1), [topic],
                    lambda: (m.assignment.generation, {}), partitions=lambda t: list(range(partitions)), backoff=0.2)
    m.start()
    while m.paused or not m.owned:
        time.sleep(0.01)
    print("owned", len(m.owned), flush=True)
    time.sleep(3600)
""")


def rebalance_after_kill(cluster_conf, broker, kconf, zk_address: str, partitions: int) -> float:
    topic = f"kill-{time.monotonic_ns()}"
    broker.create_topic(topic, partitions)
    conf = {**kconf, "kafka.topic": topic, "kafka.group": topic}
    root = Path(__file__).resolve().parent.parent
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, zk_address, topic, topic, str(partitions),
                               str(SESSION_TIMEOUT_MS)], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              start_new_session=True, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert victim.stdout.readline().startswith(b"owned")
        with LocalCluster(cluster_conf) as cluster:
            survivor = cluster.submit_topology("survivor", conf, topology(1))
            (s,) = spouts(survivor)
            wait_for(lambda: 0 < len(s.member.owned) < partitions and not s.member.paused, 60, "split with the victim")
            start = time.monotonic()
            os.killpg(victim.pid, signal.SIGKILL)
            end = wait_for(lambda: len(s.member.owned) == partitions and not s.member.paused
                           and s._generation == s.member.assignment.generation, 120, "takeover after kill")
        return end - start
    finally:
        if victim.poll() is None:
            os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--commit-seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    configure(fmt="console", level="ERROR")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # kafka-python's own event-loop chatter
    workdir = Path(tempfile.mkdtemp(prefix="gale-bench-kafka-"))
    zk = ZooKeeperServer(tick_time_ms=500)
    zk.start()
    broker = None
    try:
        broker = start_broker(workdir)
        cluster_conf = defaults()
        cluster_conf.update({"storm.zookeeper.servers": [zk.host], "storm.zookeeper.port": zk.port,
                             "storm.zookeeper.session.timeout": SESSION_TIMEOUT_MS,
                             "storm.local.dir": str(workdir / "local")})
        kconf = {"kafka.bootstrap.servers": broker.bootstrap, "kafka.rebalance.backoff.ms": 200}
        for tasks in (1, 2):
            rate, elapsed, writes = throughput(cluster_conf, broker, kconf, args.records, args.partitions, tasks)
            print(f"kafka_spout_records_per_sec_per_task[tasks={tasks}]: {rate:.0f} records/s")
            print(f"kafka_spout_run_secs[tasks={tasks},records={args.records}]: {elapsed:.2f} s")
        # kafka-python verifies CRC32C in pure Python unless the crc32c package is installed
        no_crc = {**kconf, "kafka.consumer.config": {"check_crcs": False}}
        rate, _, _ = throughput(cluster_conf, broker, no_crc, args.records, args.partitions, 1)
        print(f"kafka_spout_records_per_sec_per_task[tasks=1,check_crcs=false]: {rate:.0f} records/s")
        writes = commit_rate(cluster_conf, broker, kconf, args.partitions, args.commit_seconds)
        print(f"kafka_zk_commit_writes_per_sec[partitions={args.partitions},interval_ms=2000]: {writes:.2f} writes/s")
        leave = rebalance_after_leave(cluster_conf, broker, kconf, args.partitions)
        print(f"kafka_rebalance_secs_after_member_leaves: {leave:.3f} s")
        killed = rebalance_after_kill(cluster_conf, broker, kconf, zk.address, args.partitions)
        print(f"kafka_zk_session_timeout: {SESSION_TIMEOUT_MS / 1000:.1f} s")
        print(f"kafka_rebalance_secs_after_member_killed: {killed:.3f} s")
    finally:
        if broker is not None:
            broker.stop()
        zk.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
