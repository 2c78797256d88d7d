"""A topology whose directory holds modules named ``common``, ``worker``, ``nimbus`` and
``supervisor`` (the names of Gale's source folders) plus ``gale_helpers``, and uses them; each
processed word is recorded (with where those modules came from) under ``shadow.out``.

    nimbus local tests/shadow_topology/shadow.py -c shadow.out=/tmp/shadow --duration 3
"""

from __future__ import annotations

import gale_helpers
import worker

from gale import BasicBolt, ReliableSpout, TopologyBuilder

WORDS = ["alpha", "beta", "gamma", "delta"]


class Words(ReliableSpout):
    def declare_output_fields(self, declarer):
        declarer.declare(["word"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.todo = list(WORDS)

    def next_message(self):
        if self.todo:
            self.emit([self.todo.pop(0)])


class Mark(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["word", "marked"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.out = conf["shadow.out"]

    def execute(self, tup):
        marked = gale_helpers.transform(tup["word"])
        gale_helpers.record(self.out, self.context.task_id, {
            "word": tup["word"], "marked": marked, "shout": worker.shout(tup["word"]), "origins": gale_helpers.origins(),
        })
        self.collector.emit([tup["word"], marked])


def topology(conf=None):
    b = TopologyBuilder()
    b.set_spout("words", Words, 1)
    b.set_bolt("mark", Mark, 2).shuffle_grouping("words")
    return b.create_topology(name="shadow", conf={"topology.workers": 1})
