"""Word count, Storm's classic topology: sentences → split ×10 (shuffle) → count ×20 (fields on word).

Run it in one process::

    nimbus local examples/word_count.py --duration 10

or on a cluster::

    nimbus submit examples/word_count.py --name wordcount --wait

The sentence spout tracks every sentence with a message id and replays the ones that fail or
time out, so the counts are at-least-once exact over its fixed corpus.
"""

from __future__ import annotations

import random
from collections import Counter

from gale import BasicBolt, Bolt, ReliableSpout, TopologyBuilder

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class RandomSentenceSpout(ReliableSpout):
    """Emits sentences from a fixed corpus; ``limit`` sentences per task (0 = forever).

    Every sentence is tracked; ReliableSpout replays failed ones before new ones.
    """

    def __init__(self, limit: int = 0, seed: int | None = None):
        self.limit = limit
        self.seed = seed

    def declare_output_fields(self, declarer):
        declarer.declare(["sentence"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.rng = random.Random(self.seed if self.seed is None else self.seed + context.task_id)
        self.sent = 0

    def next_message(self):
        if self.limit and self.sent >= self.limit:
            return
        self.sent += 1
        self.emit([SENTENCES[self.rng.randrange(len(SENTENCES))]])

    # exactly-once state (topology.state.guarantee: exactly-once) needs a source that can go back
    def position(self):
        return [self.sent, self.rng.getstate()]

    def rewind(self, position):
        self.forget_pending()
        if position is None:
            self.rng = random.Random(self.seed if self.seed is None else self.seed + self.context.task_id)
            self.sent = 0
        else:
            version, internal, gauss = position[1]
            self.sent = position[0]
            self.rng.setstate((version, tuple(internal), gauss))


class SplitSentence(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["word"])

    def execute(self, tup):
        for word in tup[0].split():
            self.collector.emit([word])


class WordCount(Bolt):
    """Counts words; emits (word, count) anchored to the input, then acks it."""

    def declare_output_fields(self, declarer):
        declarer.declare(["word", "count"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts: Counter[str] = Counter()

    def execute(self, tup):
        word = tup[0]
        self.counts[word] += 1
        self.collector.emit([word, self.counts[word]], anchors=tup)
        self.collector.ack(tup)


def topology(conf=None):
    conf = conf or {}
    limit = int(conf.get("wordcount.sentences.per.task", 0))
    builder = TopologyBuilder()
    builder.set_spout("sentences", RandomSentenceSpout, int(conf.get("wordcount.spout.parallelism", 1)),
                      kwargs={"limit": limit})
    builder.set_bolt("split", SplitSentence, 10).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount, 20).fields_grouping("split", ["word"])
    return builder.create_topology(name="wordcount", conf={"topology.max.spout.pending": 2000})
