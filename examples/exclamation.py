"""Storm's ExclamationTopology: words → exclaim ×3 → exclaim ×2, each adding "!!!".

    nimbus local examples/exclamation.py --duration 5
    nimbus submit examples/exclamation.py --wait
"""

from __future__ import annotations

import random

from gale import BasicBolt, Spout, TopologyBuilder

WORDS = ["nathan", "mike", "jackson", "golda", "bertels"]


class TestWordSpout(Spout):
    """Emits random words, each tracked with a message id; failed words are re-emitted."""

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.rng = random.Random(context.task_id)
        self.next_id = 0
        self.pending: dict[int, str] = {}
        self.replay: list[int] = []

    def next_tuple(self):
        if self.replay:
            msg_id = self.replay.pop()
        else:
            msg_id, self.next_id = self.next_id, self.next_id + 1
            self.pending[msg_id] = self.rng.choice(WORDS)
        self.collector.emit([self.pending[msg_id]], msg_id=msg_id)

    def ack(self, msg_id):
        self.pending.pop(msg_id, None)

    def fail(self, msg_id):
        if msg_id in self.pending:
            self.replay.append(msg_id)


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
