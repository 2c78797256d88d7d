"""Bolts that misbehave in every way a user's code can: the cluster must report each clearly,
fail the affected tuples (so they replay) and keep every daemon and worker running."""

from __future__ import annotations

from gale import Bolt, Spout, TopologyBuilder


class Numbers(Spout):
    """Emits ``test.count`` tracked tuples, replaying failures (a little slowly)."""

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.todo = list(range(int(conf.get("test.count", 20))))
        self.failed = []

    def next_tuple(self):
        if self.todo:
            n = self.todo.pop()
            self.collector.emit([n], msg_id=n)

    def fail(self, msg_id):
        self.todo.insert(0, msg_id)


class AlwaysRaise(Bolt):
    def execute(self, tup):
        raise RuntimeError(f"bad input {tup[0]}: this bolt always raises")


class EmitUnserializable(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["v"])

    def execute(self, tup):
        self.collector.emit([{tup[0], "a set is not msgpack-serializable"}], anchors=tup)
        self.collector.ack(tup)


class EmitHuge(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["v"])

    def execute(self, tup):
        self.collector.emit(["x" * (40 * 1024 * 1024)], anchors=tup)
        self.collector.ack(tup)


class Sink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def topology(conf=None):
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers, 1)
    b.set_bolt("raise", AlwaysRaise, 1).shuffle_grouping("numbers")
    b.set_bolt("unserializable", EmitUnserializable, 1).shuffle_grouping("numbers")
    b.set_bolt("huge", EmitHuge, 1).shuffle_grouping("numbers")
    # 4 sink tasks over 2 workers: some emits cross workers and must be serialized (a load-aware
    # shuffle would keep them all in the emitting worker)
    b.set_bolt("sink", Sink, 4).shuffle_grouping("unserializable").shuffle_grouping("huge")
    return b.create_topology(conf={"topology.workers": 2, "topology.max.spout.pending": 5,
                                   "topology.message.timeout.secs": 10,
                                   "topology.disable.loadaware.messaging": True})
