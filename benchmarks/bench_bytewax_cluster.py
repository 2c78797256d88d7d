"""The Bytewax word count dataflow (``benchmarks/bytewax_wordcount.py``, unmodified) on a Gale cluster.

Run: ``.venv/bin/python -m benchmarks.bench_bytewax_cluster [--sentences N] [--rounds R] [--workers 1,2]``

Starts its own ZooKeeper, a nimbus and 2 supervisors of one slot each (processes, as in production),
and submits the file (``nimbus submit``, acking on) with ``topology.workers`` 1 and 2 in turn,
``--rounds`` times each. Every step has that many tasks; with 2 the keyed items cross between the
two worker processes (pickled). The input is bounded: a run lasts from the input's first batch
(its spout's ``emitted`` statistic above 0) to every output task having seen the end of the input
(``bytewax_ended_tasks``), both read from nimbus's topology view every 0.2 s — the workers' start is
not counted. Prints ``bytewax_cluster_sentences_per_sec[workers=W]`` per run and the best of each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gale.nimbus.client import NimbusClient
from gale.nimbus.devcluster import DevCluster
from gale.zkserver import ZooKeeperServer

ROOT = Path(__file__).resolve().parent.parent
FLOW = Path(__file__).resolve().parent / "bytewax_wordcount.py"
INPUT, OUTPUT = "peers.in", "peers.out"


def submit(cluster: DevCluster, code: Path, name: str, workers: int) -> None:
    env = dict(os.environ, GALE_CONFIG=str(cluster.client_config_path()))
    proc = subprocess.run([sys.executable, "-m", "gale.nimbus.cli", "submit", str(code), "--name", name, "--wait",
                           "-c", f"topology.workers={workers}"], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"nimbus submit: {proc.stderr.strip()}")


def kill(cluster: DevCluster, client: NimbusClient, name: str) -> None:
    """Kill the topology and wait until nimbus no longer lists it (its slot free for the next run)."""
    env = dict(os.environ, GALE_CONFIG=str(cluster.client_config_path()))
    subprocess.run([sys.executable, "-m", "gale.nimbus.cli", "kill", name, "--wait", "0"], capture_output=True,
                   env=env, cwd=ROOT, timeout=120)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and name in [t["name"] for t in client.topologies()]:
        time.sleep(0.5)  # the benchmark's own polling


def run(cluster: DevCluster, code: Path, sentences: int, workers: int, i: int) -> float:
    name = f"bwbench-{workers}-{i}"
    submit(cluster, code, name, workers)
    client = NimbusClient(cluster.client_conf())
    start = end = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        comps = client.topology(name)["components"]
        now = time.monotonic()
        if start is None and comps[INPUT]["stats"].get("emitted", 0) > 0:
            start = now
        if comps[OUTPUT]["stats"].get("extra", {}).get("bytewax_ended_tasks", 0) >= workers:
            end = now
            break
        time.sleep(0.2)
    kill(cluster, client, name)
    if start is None or end is None:
        raise RuntimeError(f"{name} did not end within 600 s")
    return sentences / max(end - start, 1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",") if w]
    base = Path(tempfile.mkdtemp(prefix="gale-bench-bytewax-"))
    code = base / "code"
    code.mkdir()
    # the dataflow reads its size from the environment, which the workers do not share: a copy of the
    # file with the size written in
    text = FLOW.read_text().replace('int(os.environ.get("BENCH_SENTENCES", "100000"))', str(args.sentences))
    (code / FLOW.name).write_text(text)
    conf = {"task.heartbeat.frequency.secs": 1}
    zk = ZooKeeperServer(data_dir=base / "zk").start()
    cluster = DevCluster(base / "cluster", supervisors=2, slots=1, zookeeper=zk, conf=conf)
    best: dict[int, float] = {}
    try:
        cluster.start()
        for i in range(args.rounds):
            for workers in counts:
                rate = run(cluster, code / FLOW.name, args.sentences, workers, i)
                best[workers] = max(best.get(workers, 0.0), rate)
                print(f"bytewax_cluster_run{i + 1}_sentences_per_sec[workers={workers}]: {rate:.0f} sentences/s",
                      flush=True)
        for workers in counts:
            print(f"bytewax_cluster_sentences_per_sec[workers={workers}]: {best[workers]:.0f} sentences/s")
    finally:
        cluster.cleanup()
        zk.cleanup()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
