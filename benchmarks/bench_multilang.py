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
* ``load_average_1m`` — the machine's load when the runs ended (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
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


def run(serializer: str, tuples: int) -> float:
    b = TopologyBuilder()
    b.set_spout("spout", FastSpout)
    b.set_bolt("pystorm", ShellBolt, 1, kwargs={
        "command": [sys.executable, "pystorm_components.py", "PassBolt", serializer], "cwd": str(FIXTURES),
        "outputs": ["sentence"]}).shuffle_grouping("spout")
    b.set_bolt("sink", AckSink).shuffle_grouping("pystorm")
    conf = {"bench.tuples": tuples, "topology.max.spout.pending": 5000, "topology.multilang.serializer": serializer}
    return _measure(b.create_topology("bench", conf=conf), "spout", tuples)


def run_spout(tuples: int) -> float:
    out = tempfile.mkdtemp()
    b = TopologyBuilder()
    b.set_spout("spout", ShellSpout, kwargs={"command": [sys.executable, "pystorm_components.py", "NumberSpout"],
                                             "cwd": str(FIXTURES), "outputs": ["sentence"]})
    b.set_bolt("sink", AckSink).shuffle_grouping("spout")
    return _measure(b.create_topology("bench", conf={"test.n": tuples, "test.out": out}), "spout", tuples)


def _measure(topology, spout: str, tuples: int) -> float:
    with LocalCluster() as cluster:
        running = cluster.submit_topology("bench", {}, topology)
        spouts = [ex for ex in running.runtime.executors.values() if ex.component == spout]
        t0 = None
        while True:
            acked = sum(sum(ex.stats.acked.values()) for ex in spouts)
            if t0 is None and acked:
                t0, first = time.perf_counter(), acked  # from the first ack: the subprocess is up
            if acked >= tuples:
                break
            time.sleep(0.01)
        return (acked - first) / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tuples", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    configure(fmt="console", level="WARNING")
    for serializer in ("json", "msgpack"):
        best = max(run(serializer, args.tuples) for _ in range(args.repeat))
        print(f"multilang_pystorm_bolt_{serializer}_tuples_per_sec: {best:.0f} tuples/s", flush=True)
    best = max(run_spout(args.tuples // 5) for _ in range(args.repeat))
    print(f"multilang_pystorm_spout_json_tuples_per_sec: {best:.0f} tuples/s", flush=True)
    print(f"load_average_1m: {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
