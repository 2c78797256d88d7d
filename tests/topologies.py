"""Small topologies used by the data-plane tests (module level, so workers can import them)."""

from __future__ import annotations

from gale import BasicBolt, Bolt, FailedException, Spout


class ListSpout(Spout):
    """Emits the given values (one field 'v') once each, with their index as message id."""

    def __init__(self, values=(), fields=("v",)):
        self.values = list(values)
        self.fields = list(fields)

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0
        self.acked, self.failed = [], []

    def next_tuple(self):
        if self.i < len(self.values):
            v = self.values[self.i]
            self.collector.emit(v if isinstance(v, list) else [v], msg_id=self.i)
            self.i += 1

    def ack(self, msg_id):
        self.acked.append(msg_id)

    def fail(self, msg_id):
        self.failed.append(msg_id)


class QuietSpout(Spout):
    """Emits nothing (stream ``v``)."""

    def next_tuple(self):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(["v"])


class Identity(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["v"])

    def execute(self, tup):
        self.collector.emit([tup[0]])


class FanOut(Bolt):
    """Emits ``n`` copies anchored to the input, then acks it."""

    def __init__(self, n=3):
        self.n = n

    def declare_output_fields(self, declarer):
        declarer.declare(["v"])

    def execute(self, tup):
        for i in range(self.n):
            self.collector.emit([f"{tup[0]}.{i}"], anchors=tup)
        self.collector.ack(tup)


class FailOn(Bolt):
    """Acks everything except values in ``bad``, which it fails."""

    def __init__(self, bad=()):
        self.bad = set(bad)

    def execute(self, tup):
        if tup[0] in self.bad:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


class RaiseOn(BasicBolt):
    """Raises on values in ``bad`` (a user bug): the input must fail and the error be reported."""

    def __init__(self, bad=()):
        self.bad = set(bad)

    def declare_output_fields(self, declarer):
        declarer.declare(["v"])

    def execute(self, tup):
        if tup[0] in self.bad:
            raise ValueError(f"cannot handle {tup[0]!r}")
        self.collector.emit([tup[0]])


class BasicFailOn(BasicBolt):
    def __init__(self, bad=()):
        self.bad = set(bad)

    def execute(self, tup):
        if tup[0] in self.bad:
            raise FailedException("nope")


class Sink(Bolt):
    """Acks everything (never emits)."""

    def execute(self, tup):
        self.collector.ack(tup)


class Never(Bolt):
    """Never acks (tuples time out)."""

    def execute(self, tup):
        pass


class Joiner(Bolt):
    """Buffers two inputs and emits one tuple anchored to both (a multi-anchored DAG)."""

    def declare_output_fields(self, declarer):
        declarer.declare(["v"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.held = []

    def execute(self, tup):
        self.held.append(tup)
        if len(self.held) == 2:
            a, b = self.held
            self.collector.emit([f"{a[0]}+{b[0]}"], anchors=[a, b])
            self.collector.ack(a)
            self.collector.ack(b)
            self.held = []


class Ticker(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["ticks"])

    def component_configuration(self):
        return {"topology.tick.tuple.freq.secs": 1}

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.ticks = 0

    def execute(self, tup):
        if tup.is_tick():
            self.ticks += 1
            self.collector.emit([self.ticks])
        else:
            self.collector.ack(tup)


class WrongArity(BasicBolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["a", "b"])

    def execute(self, tup):
        self.collector.emit([tup[0]])


class DirectEmitter(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["v"], direct=True)

    def execute(self, tup):
        tasks = self.context.component_tasks("direct_target")
        self.collector.emit_direct(tasks[-1], [tup[0]], anchors=tup)
        self.collector.ack(tup)


class TaskRecorder(Bolt):
    """Emits (value, own task id)."""

    def declare_output_fields(self, declarer):
        declarer.declare(["v", "task"])

    def execute(self, tup):
        self.collector.emit([tup[0], self.context.task_id], anchors=tup)
        self.collector.ack(tup)
