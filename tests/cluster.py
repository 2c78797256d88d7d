"""Helpers for tests against a real local cluster (nimbus, supervisors, worker processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from gale.nimbus.devcluster import DevCluster

ROOT = Path(__file__).resolve().parent.parent
DURABLE_WC = Path(__file__).resolve().parent / "cluster_topologies" / "durable_wc.py"
CORPUS = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]

#: fast timeouts so fault tests take seconds, not minutes
FAST = {
    "nimbus.monitor.freq.secs": 1,
    "nimbus.task.timeout.secs": 8,
    "nimbus.task.launch.secs": 30,
    "supervisor.worker.timeout.secs": 8,
    "supervisor.worker.start.timeout.secs": 30,
    "supervisor.worker.shutdown.sleep.secs": 1,
    "supervisor.monitor.frequency.secs": 1,
    "supervisor.heartbeat.frequency.secs": 1,
    "task.heartbeat.frequency.secs": 1,
    "task.refresh.poll.secs": 2,
    "storm.zookeeper.session.timeout": 6000,
    "topology.message.timeout.secs": 10,
}


def make_cluster(zk_server, tmp_path, **kwargs) -> DevCluster:
    conf = dict(FAST)
    conf.update(kwargs.pop("conf", {}))
    root = f"/c-{uuid.uuid4().hex[:10]}/storm"
    return DevCluster(tmp_path / "cluster", zookeeper=zk_server, root=root, conf=conf, **kwargs)


def cli(cluster: DevCluster, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, GALE_CONFIG=str(cluster.client_config_path()))
    proc = subprocess.run([sys.executable, "-m", "gale.nimbus.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"nimbus {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


class DurableInput:
    """The durable word-count workload: input file + state dir, with result readers."""

    def __init__(self, base: Path, n: int):
        self.n = n
        self.dir = base
        self.dir.mkdir(parents=True, exist_ok=True)
        self.input = self.dir / "input.tsv"
        self.state = self.dir / "state"
        self.input.write_text("".join(f"{i}\t{CORPUS[i % len(CORPUS)]}\n" for i in range(n)))

    def overrides(self, **extra) -> list[str]:
        pairs = {"test.input": str(self.input), "test.state.dir": str(self.state), **extra}
        out = []
        for k, v in pairs.items():
            out += ["-c", f"{k}={v}"]
        return out

    def acked(self) -> set[int]:
        ids: set[int] = set()
        for p in self.state.glob("acked-*.log"):
            ids |= {int(x) for x in p.read_text().split()}
        return ids

    def sink_counts(self) -> Counter:
        c: Counter = Counter()
        for p in self.state.glob("sink-*.log"):
            c.update(int(x) for x in p.read_text().split())
        return c

    def word_counts(self) -> Counter:
        c: Counter = Counter()
        for p in self.state.glob("counts-*.json"):
            try:
                c.update(json.loads(p.read_text()))
            except (ValueError, FileNotFoundError):
                pass
        return c

    def expected_words(self) -> Counter:
        return Counter(w for i in range(self.n) for w in CORPUS[i % len(CORPUS)].split())

    def wait_all_acked(self, timeout: float) -> None:
        wait_for(lambda: len(self.acked()) >= self.n, timeout,
                 lambda: f"{len(self.acked())}/{self.n} acked")


def wait_for(predicate, timeout: float, describe=lambda: "", interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"condition not met within {timeout}s: {describe()}")


def dump_logs(cluster: DevCluster) -> str:
    parts = []
    for d in cluster.nimbus_procs + cluster.supervisor_procs:
        parts.append(f"--- {d.name}\n{d.log_tail(30)}")
    for p in sorted(cluster.base.glob("supervisor-*/logs/workers-artifacts/*/*/worker.*")):
        try:
            parts.append(f"--- {p}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-20:]))
        except OSError:
            pass
    return "\n".join(parts)
