"""Storm's ExclamationTopology: words → exclaim ×3 → exclaim ×2, each adding "!!!".

    nimbus local examples/exclamation.py --duration 5
    nimbus submit examples/exclamation.py --wait
"""

from __future__ import annotations

import random

from gale import BasicBolt, ReliableSpout, TopologyBuilder

WORDS = ["nathan", "mike", "jackson", "golda", "bertels"]


class TestWordSpout(ReliableSpout):
    """Emits random words, each tracked; ReliableSpout re-emits failed ones."""

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.rng = random.Random(context.task_id)

    def next_message(self):
        self.emit([self.rng.choice(WORDS)])


class ExclamationBolt(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["word"])

    def execute(self, tup):
        self.collector.emit([tup["word"] + "!!!"])


def topology(conf=None):
    builder = TopologyBuilder()
    builder.set_spout("word", TestWordSpout, 2)
    builder.set_bolt("exclaim1", ExclamationBolt, 3).shuffle_grouping("word")
    builder.set_bolt("exclaim2", ExclamationBolt, 2).shuffle_grouping("exclaim1")
    return builder.create_topology(name="exclamation", conf={"topology.max.spout.pending": 1000})
