"""Gale against its peers on one workload: sentences → split → keyed running count (issue 15).

Run: ``.venv/bin/python -m benchmarks.bench_peers [--sentences N] [--runs R] [--engines ...]``

The workload: N sentences of 10 words over a vocabulary of N + 8 words, built in memory before the
clock starts; split each into words; keep a running count per word and emit every update. One core
for every engine. Engines, measured in alternation (run 1 of each, then run 2 of each, ...) so a
change in the machine's load hits them alike:

* ``plain`` — a Python loop, no framework: split, count in a dict, append every update to a list;
* ``xor_loop`` — the same loop doing Storm's XOR acking by hand (a random root and edge ids per
  sentence and word, the ack values folded into a pending dict, the tree completed) with no queues:
  what reliability costs with no framework around it;
* ``bytewax`` — Bytewax (pinned :data:`BYTEWAX_VERSION`; installed by this script into its own
  virtual environment under ``--venv``), one worker, ``TestingSource`` → ``flat_map`` →
  ``key_on`` → ``stateful_map`` → a counting sink; no per-record acking, recovery off;
* ``gale_bytewax`` — the same Bytewax file (``benchmarks/bytewax_wordcount.py``, which the ``bytewax``
  engine runs too) on Gale: ``gale.bytewax.run_main`` in a fresh process, local mode, one task per
  step, acking on (one acker); the issue's target: ≥ 1.5× Bytewax;
* ``gale_acking`` / ``gale_noacking`` — Gale local mode (LocalCluster, one executor thread,
  parallelism 1 per component, one acker or none), the spout emitting the pre-built sentences with
  a message id, split anchored, count fields-grouped on the word, emitting every update anchored.

Prints ``name: value unit`` lines — each engine's sentences/s per run and the best (by wall clock,
and per CPU second of the engine's process, which a loaded machine disturbs less), the ratios of
Gale's best to Bytewax's best (the issue's targets: acking on ≥ 1.2×, acking off ≥ 2×), and the
acker's memory per pending tree with ``--acker-pending`` trees pending (target: ≤ 64 bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from gale import Bolt, Spout, TopologyBuilder
from gale.config import parse_overrides
from gale.log import configure

BYTEWAX_VERSION = "0.21.1"
ENGINES = ("plain", "xor_loop", "bytewax", "gale_acking", "gale_noacking", "gale_bytewax")
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gale-bench-peers" / "venv"


def sentences(n: int, vocab: int | None = None) -> list[str]:
    """N sentences of 10 words over a vocabulary of ``vocab`` words (N + 8 unless given; word i is
    ``w<i>``): sentence k is words k … k + 9, so each sentence brings a new word until all are seen."""
    vocab = vocab or n + 8
    return [" ".join(f"w{(k + j) % vocab}" for j in range(10)) for k in range(n)]


# ----------------------------------------------------------------------------- plain Python loops


def run_plain(data: list[str]) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    counts: dict[str, int] = {}
    out = []
    append = out.append
    for s in data:
        for w in s.split():
            c = counts.get(w, 0) + 1
            counts[w] = c
            append((w, c))
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(out) == 10 * len(data)
    return dt, cpu


def run_xor_loop(data: list[str]) -> tuple[float, float]:
    rand = random.Random(7).getrandbits
    c0, t0 = time.process_time(), time.perf_counter()
    counts: dict[str, int] = {}
    out = []
    append = out.append
    pending: dict[int, int] = {}
    completed = 0
    for s in data:
        root = rand(64) | 2
        edge = rand(64) or 1
        pending[root] = edge  # spout: init with the sentence's edge
        words = s.split()
        xor = 0
        edges = []
        for _ in words:  # split: one anchored edge per word
            e = rand(64) or 1
            edges.append(e)
            xor ^= e
        pending[root] ^= edge ^ xor  # split acks the sentence with the ids it anchored
        for w, e in zip(words, edges):
            c = counts.get(w, 0) + 1
            counts[w] = c
            out_edge = rand(64) or 1  # count's anchored emit (no consumer) ...
            append((w, c, out_edge))
            pending[root] ^= e  # ... then its ack of the word
        if pending[root] == 0:
            del pending[root]
            completed += 1
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert completed == len(data) and not pending
    return dt, cpu


# ----------------------------------------------------------------------------- Bytewax

#: the Bytewax word count (benchmarks/bytewax_wordcount.py), one file for both engines
FLOW_DIR = Path(__file__).resolve().parent
#: runs that file with the engine's ``run_main`` (``{run_main}``: the module to take it from) and prints
#: the seconds (wall, CPU) of the run alone: the data is built at import, before the clock starts
RUN_FLOW = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from {run_main} import run_main
    import bytewax_wordcount as m
    {warm}
    c0, t0 = time.process_time(), time.perf_counter()
    run_main(m.flow)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert m.seen[0] == 10 * m.n, m.seen[0]
    print(json.dumps({{"secs": dt, "cpu": cpu}}))
    """
)
BYTEWAX_SCRIPT = RUN_FLOW.format(run_main="bytewax.testing", warm="")
# Gale's modules for running a dataflow are imported before the clock, as Bytewax's engine is by then
GALE_FLOW_SCRIPT = RUN_FLOW.format(run_main="gale.bytewax", warm="import gale.worker.bytewax.run")


def bytewax_python(venv: Path) -> Path:
    """The interpreter of a virtual environment with Bytewax :data:`BYTEWAX_VERSION`, made if missing."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import importlib.metadata as m; print(m.version('bytewax'))"]
    if python.exists():
        found = subprocess.run(probe, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == BYTEWAX_VERSION:
            return python
    print(f"# installing bytewax=={BYTEWAX_VERSION} into {venv}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"bytewax=={BYTEWAX_VERSION}"], check=True)
    return python


def run_flow(n: int, python: Path | str, script: str, what: str) -> tuple[float, float]:
    """The word count dataflow file in a fresh process of ``python`` with ``script``'s engine."""
    env = {**os.environ, "BENCH_SENTENCES": str(n)}
    out = subprocess.run([str(python), "-c", script, str(FLOW_DIR)], capture_output=True, text=True, check=False,
                         env=env)
    if out.returncode != 0:
        raise RuntimeError(f"the {what} run failed:\n{out.stderr[-3000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return float(got["secs"]), float(got["cpu"])


def run_bytewax(n: int, python: Path) -> tuple[float, float]:
    return run_flow(n, python, BYTEWAX_SCRIPT, "Bytewax")


def run_gale_bytewax(n: int) -> tuple[float, float]:
    """The same Bytewax file on Gale (``gale.bytewax.run_main``: local mode, one task per step, acking
    on — one acker), in a fresh process of this interpreter."""
    return run_flow(n, sys.executable, GALE_FLOW_SCRIPT, "Gale (Bytewax dataflow)")


# ----------------------------------------------------------------------------- Gale


class SentenceSpout(Spout):
    """Emits the pre-built sentences once each, tracked by message id."""

    output_fields = ["sentence"]

    def __init__(self, data: list[str]):
        self.data = data

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self):
        if self.i < len(self.data):
            self.collector.emit([self.data[self.i]], msg_id=self.i)
            self.i += 1


class Split(Bolt):
    output_fields = ["word"]

    def execute(self, tup):
        emit = self.collector.emit
        for w in tup[0].split():
            emit([w], anchors=tup)
        self.collector.ack(tup)


class Count(Bolt):
    output_fields = ["word", "count"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: dict[str, int] = {}

    def execute(self, tup):
        w = tup[0]
        c = self.counts.get(w, 0) + 1
        self.counts[w] = c
        self.collector.emit([w, c], anchors=tup)
        self.collector.ack(tup)


def gale_topology(data: list[str]):
    """The word count over ``data`` as a Gale topology (built, and so checked: the spout's argument,
    the whole data set, is JSON as a cluster would ship it)."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout, 1, args=(data,))
    builder.set_bolt("split", Split, 1).shuffle_grouping("sentences")
    builder.set_bolt("count", Count, 1).fields_grouping("split", ["word"])
    return builder.create_topology()


def run_gale(data: list[str], acking: bool, extra_conf: dict | None = None) -> tuple[float, float]:
    from gale import LocalCluster

    conf = {"topology.worker.executor.threads": 1, "topology.max.spout.pending": 5000,
            "topology.acker.executors": 1 if acking else 0, **(extra_conf or {})}
    # built before the clock, as Bytewax's dataflow is (at import): the check of the spout's
    # argument (37 ms for 100,000 sentences) is no part of a run
    topology = gale_topology(data)
    with LocalCluster() as cluster:
        c0, t0 = time.process_time(), time.perf_counter()
        running = cluster.submit_topology("peers", conf, topology)
        executors = list(running.runtime.executors.values())
        spouts = [ex for ex in executors if ex.component == "sentences"]
        counts = [ex for ex in executors if ex.component == "count"]
        while True:
            # cheap counters only: a full stats roll would steal the GIL from the executor thread
            acked = sum(sum(ex.stats.acked.values()) for ex in spouts)
            executed = sum(sum(ex.stats.executed.values()) for ex in counts)
            if acked >= len(data) and executed >= 10 * len(data):
                break
            time.sleep(0.01)  # the benchmark's own polling, not synchronisation of a test
        return time.perf_counter() - t0, time.process_time() - c0


# ----------------------------------------------------------------------------- acker memory


def acker_bytes_per_pending_tree(n: int, rotate: bool) -> float:
    """Bytes the acker's pending structure (:class:`AckerTable`: the young dict and the compact
    numpy table) holds per pending tree with ``n`` trees pending (traced by ``tracemalloc``, numpy
    arrays included), fed INIT messages in batches of 1,000 as the acker executor applies them;
    with ``rotate``, after one timeout rotation moved the young trees to the compact table."""
    import gc
    import tracemalloc

    from gale.worker.runtime.acker import INIT, AckerTable

    rng = random.Random(5)
    messages = [(INIT, rng.getrandbits(64) | 2, rng.getrandbits(64) or 1, 7) for _ in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        table = AckerTable()
        for i in range(0, n, 1000):
            table.apply(messages[i:i + 1000])
        if rotate:
            table.rotate()
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(table) == n
    return used / n


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="Bytewax's virtual environment")
    parser.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a topology config override for the Gale runs (repeatable)")
    parser.add_argument("--acker-pending", type=int, default=100_000,
                        help="pending trees for the acker memory figure (0: skip it)")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engines {unknown}; known: {', '.join(ENGINES)}")
    configure(fmt="console", level="WARNING")
    data = sentences(args.sentences)
    extra = parse_overrides(args.conf)
    runners: dict[str, Callable[[], tuple[float, float]]] = {
        "plain": lambda: run_plain(data),
        "xor_loop": lambda: run_xor_loop(data),
        "gale_acking": lambda: run_gale(data, True, extra),
        "gale_noacking": lambda: run_gale(data, False, extra),
        "gale_bytewax": lambda: run_gale_bytewax(args.sentences),
    }
    if "bytewax" in engines:
        python = bytewax_python(args.venv)
        runners["bytewax"] = lambda: run_bytewax(args.sentences, python)
    rates: dict[str, list[float]] = {e: [] for e in engines}
    cpu_rates: dict[str, list[float]] = {e: [] for e in engines}
    for run in range(1, args.runs + 1):
        for engine in engines:
            wall, cpu = runners[engine]()
            rates[engine].append(args.sentences / wall)
            cpu_rates[engine].append(args.sentences / cpu)
            print(f"peers_{engine}_run{run}_sentences_per_sec: {args.sentences / wall:.0f} sentences/s "
                  f"({args.sentences / cpu:.0f} per CPU second)", flush=True)
    best = {e: max(r) for e, r in rates.items()}
    best_cpu = {e: max(r) for e, r in cpu_rates.items()}
    for engine in engines:
        print(f"peers_{engine}_sentences_per_sec: {best[engine]:.0f} sentences/s")
        print(f"peers_{engine}_sentences_per_cpu_sec: {best_cpu[engine]:.0f} sentences/s")
    # wall-clock ratios are the targets; CPU-time ratios are steadier on a shared machine
    # (each engine runs its data path on one thread, so CPU time ≈ wall time on an idle machine)
    if "bytewax" in best:
        for engine in ("gale_acking", "gale_noacking", "gale_bytewax", "xor_loop", "plain"):
            if engine in best:
                print(f"peers_{engine}_vs_bytewax: {best[engine] / best['bytewax']:.2f} x")
                print(f"peers_{engine}_vs_bytewax_cpu: {best_cpu[engine] / best_cpu['bytewax']:.2f} x")
    if args.acker_pending:
        # the target: at most 64 bytes per pending tree
        n = args.acker_pending
        print(f"peers_acker_bytes_per_pending_tree: {acker_bytes_per_pending_tree(n, False):.1f} bytes ({n} pending)")
        print(f"peers_acker_bytes_per_pending_tree_rotated: {acker_bytes_per_pending_tree(n, True):.1f} bytes "
              f"({n} pending, after a timeout rotation)")


if __name__ == "__main__":
    main()
