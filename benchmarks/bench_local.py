"""Local-mode data plane benchmark: word count throughput and acker memory.

Run: ``.venv/bin/python -m benchmarks.bench_local [--sentences N] [--repeat R]``

Prints ``name: value unit`` lines:

* ``local_wordcount_{acking,noacking}_spout_tuples_per_sec`` — sentences fully processed (acked)
  per second through the real runtime (LocalCluster, its executor thread, 1 spout, split ×10
  shuffle, count ×20 fields on word, one acker), best of ``--repeat`` runs;
* ``..._tuples_per_sec`` — tuples executed by bolts per second (sentences into split + words into
  count) — all on one executor thread, so this is also per core;
* ``..._emitted_tuples_per_sec`` — tuples emitted by all components per second;
* ``local_wordcount_acking_4_executor_threads_tuples_per_sec`` — the same with
  ``topology.worker.executor.threads`` = 4 (executors spread over 4 threads sharing the GIL);
* ``acker_bytes_per_pending_tuple`` — AckerTable arrays with 1,000,000 pending trees, divided by 1M,
  and ``acker_rss_bytes_per_pending_tuple`` — the process's RSS growth for the same;
* ``acker_dict_rss_bytes_per_pending_tuple`` — the same 1M trees in a plain dict (the reference
  algorithm), for comparison;
* ``acker_messages_per_sec`` — acker throughput on batches of 1000 messages.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import word_count  # noqa: E402

from gale.log import configure  # noqa: E402
from gale import LocalCluster  # noqa: E402
from gale.worker.runtime.acker import ACK, INIT, AckerTable, ReferenceAcker  # noqa: E402


def run_wordcount(sentences: int, acking: bool, threads: int = 1) -> dict[str, float]:
    topo = word_count.topology({"wordcount.sentences.per.task": sentences})
    conf = {} if acking else {"topology.acker.executors": 0}
    conf["topology.worker.executor.threads"] = threads
    with LocalCluster() as cluster:
        t0 = time.perf_counter()
        running = cluster.submit_topology("wc", conf, topo)
        executors = list(running.runtime.executors.values())
        spouts = [ex for ex in executors if ex.component == "sentences"]
        bolts = [ex for ex in executors if ex.component in ("split", "count")]
        while True:
            # cheap counters only: a full stats roll would steal the GIL from the executor thread
            acked = sum(sum(ex.stats.acked.values()) for ex in spouts)
            idle = not any(ex.has_work() for ex in bolts)
            if acked >= sentences and idle:
                break
            time.sleep(0.05)
        dt = time.perf_counter() - t0
        st = running.component_stats()
        spout, split, count = st["sentences"], st["split"], st["count"]
    executed = split["executed"] + count["executed"]
    emitted = spout["emitted"] + split["emitted"] + count["emitted"]
    return {"spout": spout["acked"] / dt, "executed": executed / dt, "emitted": emitted / dt, "secs": dt}


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def acker_memory(n: int = 1_000_000) -> tuple[float, float, float]:
    rng = random.Random(1)
    roots = [rng.getrandbits(64) | 2 for _ in range(n)]
    before = rss()
    table = AckerTable()
    for i in range(0, n, 10_000):
        table.apply([(INIT, r, 12345, 7) for r in roots[i : i + 10_000]])
    assert len(table) == n
    table_rss = (rss() - before) / n
    table_bytes = table.nbytes / n
    del table
    before = rss()
    ref = ReferenceAcker()
    for i in range(0, n, 10_000):
        ref.apply([(INIT, r, 12345, 7) for r in roots[i : i + 10_000]])
    dict_rss = (rss() - before) / n
    return table_bytes, table_rss, dict_rss


def acker_throughput(n: int = 500_000) -> float:
    rng = random.Random(2)
    table = AckerTable()
    msgs = []
    for _ in range(n // 3):
        r, e1, e2 = rng.getrandbits(64) | 2, rng.getrandbits(64) or 1, rng.getrandbits(64) or 1
        msgs += [(INIT, r, e1 ^ e2, 1), (ACK, r, e1, 0), (ACK, r, e2, 0)]
    t0 = time.perf_counter()
    for i in range(0, len(msgs), 1000):
        table.apply(msgs[i : i + 1000])
    return len(msgs) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    configure(fmt="console", level="WARNING")
    for acking in (True, False):
        name = "acking" if acking else "noacking"
        runs = [run_wordcount(args.sentences, acking) for _ in range(args.repeat)]
        best = max(runs, key=lambda r: r["executed"])
        print(f"local_wordcount_{name}_spout_tuples_per_sec: {best['spout']:.0f} tuples/s")
        print(f"local_wordcount_{name}_tuples_per_sec: {best['executed']:.0f} tuples/s")
        print(f"local_wordcount_{name}_emitted_tuples_per_sec: {best['emitted']:.0f} tuples/s")
        sys.stdout.flush()
    threaded = max((run_wordcount(args.sentences, True, threads=4) for _ in range(args.repeat)),
                   key=lambda r: r["executed"])
    print(f"local_wordcount_acking_4_executor_threads_tuples_per_sec: {threaded['executed']:.0f} tuples/s")
    table_bytes, table_rss, dict_rss = acker_memory()
    print(f"acker_bytes_per_pending_tuple: {table_bytes:.1f} bytes")
    print(f"acker_rss_bytes_per_pending_tuple: {table_rss:.1f} bytes")
    print(f"acker_dict_rss_bytes_per_pending_tuple: {dict_rss:.1f} bytes")
    print(f"acker_messages_per_sec: {acker_throughput():.0f} messages/s")


if __name__ == "__main__":
    main()
