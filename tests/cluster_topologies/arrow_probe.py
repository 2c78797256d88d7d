"""Arrow batch tuples between workers: every table a sink executes is a line on disk.

Config keys: ``test.state.dir`` (required), ``test.tables`` (default 20). The spout ``tables`` emits
``test.tables`` pyarrow Tables of 1,000 rows (``id`` int64 from ``k * 1000``, ``word`` strings) on a
batch stream, each reliable; each ``sink`` task appends ``<1 when the spout is in this sink's worker,
else 0> <first id> <rows> <sum of ids> <distinct words> <value type>`` to ``sink-<task>.log``. The
shuffle is not load-aware, so about half of the tables cross to the other worker.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from gale import Spout, TopologyBuilder
from gale.spark import ARROW_BATCH
from locality_probe import LineSink

ROWS = 1000
WORDS = ["alpha", "beta", "gamma", "delta", "épsilon"]


def table(k: int) -> pa.Table:
    return pa.table({"id": pa.array(range(k * ROWS, (k + 1) * ROWS), type=pa.int64()),
                     "word": [WORDS[i % len(WORDS)] for i in range(ROWS)]})


class TableSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare([ARROW_BATCH])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.next = 0
        self.total = int(conf.get("test.tables", 20))

    def next_tuple(self):
        if self.next < self.total:
            self.collector.emit([table(self.next)], msg_id=self.next)
            self.next += 1

    def fail(self, msg_id):
        self.collector.emit([table(msg_id)], msg_id=msg_id)


class TableSink(LineSink):
    def execute(self, tup):
        t = tup[0]
        self.out.write(f"{int(tup.source_task in self.here)} {t.column('id')[0].as_py()} {t.num_rows} "
                       f"{pc.sum(t.column('id')).as_py()} {len(pc.unique(t.column('word')))} {type(t).__name__}\n")


def topology(conf):
    b = TopologyBuilder()
    b.set_spout("tables", TableSpout, 1)
    b.set_bolt("sink", TableSink, 4).shuffle_grouping("tables")
    return b.create_topology(name="arrowprobe", conf={"topology.workers": 2,
                                                      "topology.disable.loadaware.messaging": True})
