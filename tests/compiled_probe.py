"""Runs one word count in local mode and prints what it did, for ``tests/test_compiled.py`` to
compare between the compiled build and the Python source (``GALE_PURE_PYTHON=1``).

Printed (one JSON object): the build in use, the lineage ids of the words the count bolt received,
each word's final count, the spout's acked message ids, and the split's and count's executed and
acked figures. Lineage ids are derived from message ids, components, streams and emit ordinals
only (not from which split task ran), so both builds must print the same ones.
"""

from __future__ import annotations

import json
import sys
import threading

from benchmarks import bench_peers
from gale import Bolt, LocalCluster, Spout, TopologyBuilder
from gale.compiled import hot_path

SEEN: list[list] = []
ACKED: list[int] = []
#: set by the spout's ack of the last message (the spout runs on the executor thread)
ALL_ACKED = threading.Event()


class Sentences(Spout):
    output_fields = ["sentence"]

    def __init__(self, n: int):
        self.n = n

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self):
        if self.i < self.n:
            self.collector.emit([" ".join(f"w{(self.i * 7 + j) % 50}" for j in range(6))], msg_id=self.i)
            self.i += 1

    def ack(self, msg_id):
        ACKED.append(msg_id)
        if len(ACKED) == self.n:
            ALL_ACKED.set()


class Split(Bolt):
    output_fields = ["word"]

    def execute(self, tup):
        for w in tup["sentence"].split():
            self.collector.emit([w], anchors=[tup])  # a list of anchors: the general emit path
        self.collector.ack(tup)


class Count(bench_peers.Count):
    """The benchmark's running count (one anchor: the short emit path), noting each word's lineage."""

    def execute(self, tup):
        super().execute(tup)
        SEEN.append([tup[0], self.counts[tup[0]], tup.lineage])


def main(n: int) -> None:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences, 1, args=(n,))
    builder.set_bolt("split", Split, 2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count, 2).fields_grouping("split", ["word"])
    conf = {"topology.acker.executors": 1, "topology.max.spout.pending": 50}
    with LocalCluster() as cluster:
        running = cluster.submit_topology("probe", conf, builder.create_topology())
        if not ALL_ACKED.wait(60):
            sys.exit(f"only {len(ACKED)} of {n} messages acked in 60 s")
        stats = running.component_stats()
    print(json.dumps({
        "hot_path": hot_path(),
        "lineages": sorted(lineage for _w, _c, lineage in SEEN),
        "counts": {w: max(c for w2, c, _l in SEEN if w2 == w) for w in sorted({w for w, _c, _l in SEEN})},
        "acked": sorted(ACKED),
        "executed": {c: stats[c]["executed"] for c in ("split", "count")},
        "acked_by": {c: stats[c]["acked"] for c in ("split", "count")},
    }))


if __name__ == "__main__":
    main(int(sys.argv[1]))
