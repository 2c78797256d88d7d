"""Recovery of a stateful topology after ``kill -9`` of one of its workers: how soon checkpoints commit again.

Run: ``.venv/bin/python -m benchmarks.bench_recovery [--kills N] [--guarantees at-least-once,exactly-once]
[--rate R]``

Starts its own ZooKeeper, Redis (Debian's ``redis-server``), Kafka-protocol broker (Tansu) and a dev
cluster of 2 supervisors (processes, as in production) with Storm's default timeouts —
``topology.message.timeout.secs`` 30 — and the default checkpoint interval (1 s). The topology is
the exactly-once word count of the cluster tests (``tests/cluster_topologies/eo_kafka_wc.py``:
KafkaSpout (2 tasks) → words → a keyed ``StatefulBolt`` count, 2 workers, state in Redis), run under
each guarantee; a producer writes ``--rate`` records a second to its topic throughout.

``--kills`` times (default 10) per guarantee: wait for a checkpoint to commit, then a further
``i/kills`` of the interval (so the kills land in every phase of the cycle: committed, pausing,
preparing, committing), ``kill -9`` one of the two workers (alternately), and time

* ``kill → replacement``: until the supervisor's replacement worker *process* exists (its start
  time, from ``/proc``: earlier than the worker is ready, so the next figure is not flattered);
* ``replacement → commit``: from then until the first checkpoint committed after the kill (the
  checkpoint record in Redis names a committed txid beyond the last one before the kill).

Prints a line per kill (the record's phase at the kill, both times), then per guarantee
``recovery_{alo,eo}_replacement_to_commit_secs_{p50,max}`` and ``recovery_{alo,eo}_kill_to_commit_secs_{p50,max}``.
Before restarted tasks told the coordinator (``gale.worker.state.liveness``) a kill stopped every
commit until the lost trees timed out: 35–52 s with the default 30 s timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchmarks.bench_cluster import cli, wait
from gale.nimbus.client import NimbusClient
from gale.nimbus.devcluster import DevCluster
from gale.redisserver import RedisServer
from gale.worker.state.redis_provider import RedisStateProvider
from gale.zkserver import ZooKeeperServer

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "tests" / "cluster_topologies" / "eo_kafka_wc.py"
PARTITIONS = 4
INTERVAL_SECS = 1.0
SHORT = {"at-least-once": "alo", "exactly-once": "eo"}


def committed_of(record: dict | None) -> tuple[int, str]:
    """(the last committed txid, the phase) a checkpoint record (either guarantee's) says."""
    if not record:
        return 0, "NONE"
    txid, phase = int(record["txid"]), record["state"]
    if phase in ("PAUSING", "PREPARING"):
        return txid - 1, phase
    return txid, phase  # COMMITTED, ROLLING_BACK (its txid is the committed one), COMMITTING (will commit)


class Producer(threading.Thread):
    """Writes ``rate`` records a second to the topic until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int):
        super().__init__(daemon=True, name="producer")
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
        self.topic, self.rate = topic, rate
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        start = time.monotonic()
        while not self.stopping.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                self.producer.send(self.topic, value=f"w{self.sent % 13}".encode(), partition=self.sent % PARTITIONS)
                self.sent += 1
            self.stopping.wait(0.02)
        self.producer.flush()
        self.producer.close()


def uptime() -> float:
    """Seconds since boot (``/proc/uptime``): the clock process start times are kept in."""
    return float(Path("/proc/uptime").read_text().split()[0])


def worker_processes(topology_id: str) -> dict[int, float]:
    """pid → start time (seconds since boot, from ``/proc/<pid>/stat``; psutil's ``create_time`` adds
    the boot time, which the kernel gives in whole seconds) of the topology's worker processes."""
    out = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if "gale.worker.cli" in cmd and topology_id in cmd:
            try:
                fields = Path(f"/proc/{p.info['pid']}/stat").read_text().rpartition(")")[2].split()
            except FileNotFoundError:
                continue
            out[p.info["pid"]] = int(fields[19]) / ticks  # starttime, the 22nd field
    return out


def run_guarantee(cluster: DevCluster, broker, redis: RedisServer, guarantee: str, kills: int, rate: int) -> list:
    name = f"recovery-{SHORT[guarantee]}"
    topic = f"recovery-{SHORT[guarantee]}"
    broker.create_topic(topic, PARTITIONS)
    provider = RedisStateProvider(redis.url)
    producer = Producer(broker.bootstrap, topic, rate)
    producer.start()
    overrides = {
        "kafka.bootstrap.servers": broker.bootstrap, "kafka.topic": topic, "kafka.group": name,
        "kafka.zookeeper.root": "/kafka", "topology.state.provider": "redis", "topology.state.redis.url": redis.url,
        "topology.state.guarantee": guarantee, "topology.state.checkpoint.interval.ms": int(INTERVAL_SECS * 1000),
    }
    args = [x for k, v in overrides.items() for x in ("-c", f"{k}={v}")]
    topology_id = cli(cluster, "submit", str(TOPOLOGY), "--name", name, "--wait", *args).strip()

    def record() -> dict | None:
        raw = provider.get_meta(f"{name}/__state")
        return json.loads(raw) if raw else None

    results = []
    try:
        wait(lambda: committed_of(record())[0] >= 2, 120, 0.05)
        assert record()["guarantee"] == guarantee, record()
        for i in range(kills):
            before = committed_of(record())[0]
            wait(lambda: committed_of(record())[0] > before, 60, 0.01)  # a commit just happened
            time.sleep(INTERVAL_SECS * i / kills)  # land in another phase of the cycle each time
            procs = wait(lambda: (w := worker_processes(topology_id)) and len(w) == 2 and w, 60, 0.1)
            victim = sorted(procs)[i % 2]
            at_kill, phase = committed_of(record())
            os.kill(victim, signal.SIGKILL)
            killed = uptime()
            replacement = wait(lambda: [t for p, t in worker_processes(topology_id).items() if p not in procs], 120, 0.02)
            started = replacement[0]
            wait(lambda: committed_of(record())[0] > at_kill, 180, 0.01)
            committed = uptime()
            row = (phase, started - killed, committed - started, committed - killed)
            results.append(row)
            print(f"{guarantee} kill {i + 1}: at {phase}, kill → replacement {row[1]:.2f} s, "
                  f"replacement → commit {row[2]:.2f} s, kill → commit {row[3]:.2f} s", flush=True)
            # the other worker count is back before the next kill
            wait(lambda: len(worker_processes(topology_id)) == 2, 60, 0.1)
    finally:
        producer.stopping.set()
        producer.join(10)
        try:
            cli(cluster, "kill", name, "--wait", "0")
        except RuntimeError as exc:
            print(f"# kill {name}: {exc}", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10, help="kills per guarantee")
    parser.add_argument("--guarantees", default="at-least-once,exactly-once")
    parser.add_argument("--rate", type=int, default=500, help="records produced per second")
    args = parser.parse_args()
    guarantees = [g for g in args.guarantees.split(",") if g]
    for g in guarantees:
        if g not in SHORT:
            parser.error(f"--guarantees: at-least-once and/or exactly-once, not {g!r}")
    from tests.brokers import TansuBroker

    base = Path(tempfile.mkdtemp(prefix="gale-bench-recovery-"))
    zk = ZooKeeperServer(data_dir=base / "zk").start()
    redis = RedisServer().start()
    broker = TansuBroker(base / "tansu").start()
    cluster = DevCluster(base / "cluster", supervisors=2, slots=2, zookeeper=zk,
                         conf={"task.heartbeat.frequency.secs": 1})
    try:
        cluster.start()
        NimbusClient(cluster.client_conf())
        print(f"message timeout 30 s (Storm's default), checkpoint interval {INTERVAL_SECS:g} s, "
              f"{args.rate} records/s", flush=True)
        for g in guarantees:
            rows = run_guarantee(cluster, broker, redis, g, args.kills, args.rate)
            short = SHORT[g]
            to_commit = [r[2] for r in rows]
            total = [r[3] for r in rows]
            print(f"recovery_{short}_replacement_to_commit_secs_p50: {statistics.median(to_commit):.2f} s")
            print(f"recovery_{short}_replacement_to_commit_secs_max: {max(to_commit):.2f} s (target <= 5)")
            print(f"recovery_{short}_kill_to_commit_secs_p50: {statistics.median(total):.2f} s")
            print(f"recovery_{short}_kill_to_commit_secs_max: {max(total):.2f} s", flush=True)
    finally:
        cluster.cleanup()
        broker.stop()
        redis.stop()
        zk.cleanup()


if __name__ == "__main__":
    main()
