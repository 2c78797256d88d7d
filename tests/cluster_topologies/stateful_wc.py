"""Word count with managed state over the durable, replayable source of ``durable_wc``.

Config keys: those of ``durable_wc`` (``test.input``, ``test.state.dir``, ``test.workers``) and the
state keys (``topology.state.provider``, ``topology.state.redis.url``). The counts live only in the
state provider: a test reads them from there (``gale.worker.state.inspect.read_committed``).
"""

from __future__ import annotations

from durable_wc import DurableSpout, SplitSentence

from gale import StatefulBolt, TopologyBuilder


class StatefulCount(StatefulBolt):
    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        w = tup["word"]
        self.counts.put(w, self.counts.get(w, 0) + 1)
        self.collector.ack(tup)


def topology(conf=None):
    conf = conf or {}
    b = TopologyBuilder()
    b.set_spout("source", DurableSpout, 2)
    b.set_bolt("split", SplitSentence, 2).shuffle_grouping("source")
    b.set_bolt("count", StatefulCount, int(conf.get("test.count.parallelism", 2)),
               tasks=int(conf.get("test.count.tasks", 2))).fields_grouping("split", ["word"])
    # a sentence is acked once the checkpoint holding its counts commits, so at most max.spout.pending
    # sentences per spout task go through a checkpoint interval: 200 ms, as the other stateful test
    # topologies, keeps the inputs of a few thousand sentences to seconds (Storm's 1 s: 400 a second)
    return b.create_topology(conf={"topology.workers": int(conf.get("test.workers", 2)),
                                   "topology.max.spout.pending": 200,
                                   "topology.state.checkpoint.interval.ms": 200})
