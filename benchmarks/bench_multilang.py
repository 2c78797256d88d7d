"""Multi-lang benchmark: tuples per second through ONE unmodified pystorm bolt task.

Run: ``.venv/bin/python -m benchmarks.bench_multilang [--tuples N] [--repeat R]``

Local mode (LocalCluster): a native spout emits N tracked tuples (``topology.max.spout.pending``
5000) → one ``ShellBolt`` task running pystorm's ``Bolt`` (tests/fixtures/multilang
``PassBolt``: emit the input, anchored, auto-ack — each tuple is a tuple message in, an emit and an
ack out) → a native sink that acks. Prints, per serializer (JSON, msgpack), the best of
``--repeat`` runs:

* ``multilang_pystorm_bolt_{json,msgpack}_tuples_per_sec`` — tuples through the shell bolt task
  (fully acked spout tuples per second: every tuple crossed the subprocess both ways);
* ``multilang_pystorm_spout_json_tuples_per_sec`` — a pystorm ``Spout`` task (request/reply: one
  ``next`` at a time, as Storm asks) into a native sink, acked tuples per second;
* ``..._worker_cpu_us_per_tuple`` / ``..._subprocess_cpu_us_per_tuple`` — CPU time per tuple of
  the worker process (spout, shell executor, sink, acker) and of the pystorm subprocess: figures
  that hold on a loaded machine, where tuples/s mostly measure how much CPU the run was given;
* ``load_average_1m`` — the machine's load when the runs ended (the machine is shared).
"""

from __future__ import annotations

import argparse
import os

import psutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gale import Bolt, LocalCluster, ShellBolt, ShellSpout, Spout, TopologyBuilder  # noqa: E402
from gale.log import configure  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "multilang"


class FastSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(["sentence"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.n, self.i = conf["bench.tuples"], 0

    def next_tuple(self):
        if self.i < self.n:
            self.collector.emit([f"the cow jumped over the moon {self.i}"], msg_id=self.i)
            self.i += 1


class AckSink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def run(serializer: str, tuples: int) -> tuple[float, float, float]:
    b = TopologyBuilder()
    b.set_spout("spout", FastSpout)
    b.set_bolt("pystorm", ShellBolt, 1, kwargs={
        "command": [sys.executable, "pystorm_components.py", "PassBolt", serializer], "cwd": str(FIXTURES),
        "outputs": ["sentence"]}).shuffle_grouping("spout")
    b.set_bolt("sink", AckSink).shuffle_grouping("pystorm")
    conf = {"bench.tuples": tuples, "topology.max.spout.pending": 5000, "topology.multilang.serializer": serializer}
    return _measure(b.create_topology("bench", conf=conf), "spout", tuples)


def run_spout(tuples: int) -> tuple[float, float, float]:
    out = tempfile.mkdtemp()
    b = TopologyBuilder()
    b.set_spout("spout", ShellSpout, kwargs={"command": [sys.executable, "pystorm_components.py", "NumberSpout"],
                                             "cwd": str(FIXTURES), "outputs": ["sentence"]})
    b.set_bolt("sink", AckSink).shuffle_grouping("spout")
    return _measure(b.create_topology("bench", conf={"test.n": tuples, "test.out": out}), "spout", tuples)


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def _measure(topology, spout: str, tuples: int) -> tuple[float, float, float]:
    """(tuples/s, worker CPU µs per tuple, subprocess CPU µs per tuple), from the first ack on."""
    me = psutil.Process()
    with LocalCluster() as cluster:
        running = cluster.submit_topology("bench", {}, topology)
        spouts = [ex for ex in running.runtime.executors.values() if ex.component == spout]
        t0 = None
        while True:
            acked = sum(sum(ex.stats.acked.values()) for ex in spouts)
            if t0 is None and acked:  # from the first ack: the subprocess is up
                t0, first, kids = time.perf_counter(), acked, me.children()
                cpu0, kids0 = _cpu(me), sum(_cpu(k) for k in kids)
            if acked >= tuples:
                break
            time.sleep(0.01)
        done = acked - first
        rate = done / (time.perf_counter() - t0)
        worker_us = (_cpu(me) - cpu0) / done * 1e6
        child_us = (sum(_cpu(k) for k in kids) - kids0) / done * 1e6
        return rate, worker_us, child_us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tuples", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    configure(fmt="console", level="WARNING")
    def report(name: str, runs: list[tuple[float, float, float]]) -> None:
        rate, worker_us, child_us = max(runs)
        print(f"{name}_tuples_per_sec: {rate:.0f} tuples/s", flush=True)
        print(f"{name}_worker_cpu_us_per_tuple: {worker_us:.1f} us", flush=True)
        print(f"{name}_subprocess_cpu_us_per_tuple: {child_us:.1f} us", flush=True)

    for serializer in ("json", "msgpack"):
        report(f"multilang_pystorm_bolt_{serializer}", [run(serializer, args.tuples) for _ in range(args.repeat)])
    report("multilang_pystorm_spout_json", [run_spout(args.tuples // 5) for _ in range(args.repeat)])
    print(f"load_average_1m: {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
