"""gale.ReliableSpout: the pending map, replay on failure, the retry limit and its hook.

The bookkeeping alone against a recording collector (pure logic), then through the real runtime:
local topologies in simulated time (explicit failures and timeouts; every step deterministic) and
one LocalCluster run on executor threads.
"""

from __future__ import annotations

from collections import Counter

import pytest

from gale import BasicBolt, Bolt, FailedException, LocalCluster, ReliableSpout, TopologyBuilder
from gale.clock import SimulatedClock
from gale.config import KEYS
from gale.topology.collector import SpoutOutputCollector
from gale.topology.components import TopologyContext
from gale.worker.local import LocalTopology, local_conf
from tests.waiting import eventually

# ------------------------------------------------------------------------------ components


class Numbers(ReliableSpout):
    """Emits 0..n-1 on the default stream, one per call."""

    def __init__(self, n: int = 5):
        self.n = n

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.sent = 0
        self.acked_ids: list = []

    def next_message(self):
        if self.sent < self.n:
            self.emit([self.sent])
            self.sent += 1

    def on_acked(self, msg_id, values):
        self.acked_ids.append(msg_id)


class TwoRetries(Numbers):
    max_retries = 2


class DeadLetters(Numbers):
    max_retries = 1

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.dead: list = []

    def on_retries_exhausted(self, msg_id, values):
        self.dead.append((msg_id, list(values)))


class FailFirst(BasicBolt):
    """Fails the first ``times`` deliveries of every value; counts deliveries per value."""

    def __init__(self, times: int = 2):
        self.times = times

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: Counter = Counter()

    def execute(self, tup):
        self.seen[tup["n"]] += 1
        if self.seen[tup["n"]] <= self.times:
            raise FailedException(f"not yet: {tup['n']}")
        self.collector.emit([tup["n"]])


class Hold(Bolt):
    """Never acks the first delivery of a value (its tree times out); acks later ones."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen: Counter = Counter()

    def execute(self, tup):
        self.seen[tup["n"]] += 1
        if self.seen[tup["n"]] > 1:
            self.collector.ack(tup)


# ------------------------------------------------------------------------------ bookkeeping alone


class RecordingCollector(SpoutOutputCollector):
    """Records what the spout does through the collector protocol (no runtime)."""

    def __init__(self):
        self.emitted: list = []
        self.errors: list = []
        self.metrics: Counter = Counter()

    def emit(self, values, msg_id=None, stream="default"):
        self.emitted.append((list(values), msg_id, stream))
        return [1]

    def emit_direct(self, task, values, msg_id=None, stream="default"):  # pragma: no cover - unused
        raise AssertionError("not used")

    def report_error(self, error):
        self.errors.append(str(error))

    def declare_metrics(self, names):
        for name in names:
            self.metrics.setdefault(name, 0)

    def incr_metric(self, name, n=1):
        self.metrics[name] += n


def _open(spout, conf=None):
    collector = RecordingCollector()
    context = TopologyContext("t-1", "t", "src", 1, {1: "src"}, {"src": {"default": ["n"]}})
    spout.open(dict(conf or {}), context, collector)
    return collector


def test_emits_are_tracked_and_acks_release_them():
    spout = Numbers(3)
    c = _open(spout)
    for _ in range(4):
        spout.next_tuple()
    assert c.emitted == [([0], 0, "default"), ([1], 1, "default"), ([2], 2, "default")]
    assert sorted(spout.pending) == [0, 1, 2]
    spout.ack(1)
    spout.ack(1)  # a second ack (or one for an unknown id) changes nothing
    spout.ack("unknown")
    assert sorted(spout.pending) == [0, 2] and spout.acked == 1 and spout.acked_ids == [1]
    assert c.metrics == {"spout_replays": 0, "spout_retries_exhausted": 0}


def test_failed_messages_replay_first_in_order_before_new_ones():
    spout = Numbers(10)
    c = _open(spout)
    for _ in range(3):
        spout.next_tuple()
    spout.fail(2)
    spout.fail(0)
    spout.fail("unknown")  # not pending: ignored
    c.emitted.clear()
    for _ in range(3):
        spout.next_tuple()
    assert c.emitted == [([2], 2, "default"), ([0], 0, "default"), ([3], 3, "default")]
    assert spout.failed == 2 and spout.replayed == 2 and c.metrics["spout_replays"] == 2
    spout.ack(2)
    spout.ack(0)
    assert sorted(spout.pending) == [1, 3]


def test_a_message_acked_while_waiting_for_replay_is_not_replayed():
    spout = Numbers(1)
    c = _open(spout)
    spout.next_tuple()
    spout.fail(0)
    spout.ack(0)  # e.g. the tree of an earlier emit completed late: nothing left to replay
    c.emitted.clear()
    spout.next_tuple()
    assert c.emitted == [] and spout.replayed == 0 and not spout.pending


def test_retry_limit_reports_drops_and_counts_never_silently():
    spout = TwoRetries(1)
    c = _open(spout)
    spout.next_tuple()
    for _ in range(2):
        spout.fail(0)
        spout.next_tuple()  # replays 1 and 2
    assert [m for _, m, _ in c.emitted] == [0, 0, 0] and not c.errors
    spout.fail(0)  # third failure: over max_retries=2
    assert not spout.pending and spout.exhausted == 1
    assert c.metrics["spout_retries_exhausted"] == 1
    (error,) = c.errors
    assert "message 0 failed 3 times (max_retries=2); dropped: [0]" in error
    spout.next_tuple()
    assert len(c.emitted) == 3  # not replayed again (and Numbers(1) has nothing new)


def test_failure_counts_start_over_for_a_reused_message_id():
    class Keyed(TwoRetries):
        def next_message(self):
            self.emit(["v"], msg_id="k")

    spout = Keyed()
    c = _open(spout)
    spout.next_tuple()
    spout.fail("k")
    spout.next_tuple()  # the replay
    spout.ack("k")
    spout.next_tuple()  # "k" is free again: a new message with that id
    for _ in range(2):
        spout.fail("k")
        spout.next_tuple()
    assert spout.exhausted == 0 and "k" in spout.pending and not c.errors
    spout.fail("k")
    assert spout.exhausted == 1 and not spout.pending


def test_retries_exhausted_hook_replaces_the_default():
    spout = DeadLetters(2)
    c = _open(spout)
    spout.next_tuple()
    spout.fail(0)
    spout.next_tuple()  # the replay
    spout.fail(0)
    assert spout.dead == [(0, [0])] and not c.errors and c.metrics["spout_retries_exhausted"] == 1


def test_limit_from_topology_config_and_zero_means_never_replay():
    assert KEYS["topology.spout.max.retries"].default is None
    spout = Numbers(1)
    c = _open(spout, {"topology.spout.max.retries": 0})
    spout.next_tuple()
    spout.fail(0)
    assert spout.exhausted == 1 and len(c.errors) == 1
    spout = TwoRetries(1)  # the class attribute wins over the config key
    _open(spout, {"topology.spout.max.retries": 0})
    assert spout.retry_limit == 2


def test_given_message_ids_must_be_unique_while_pending():
    class Keyed(Numbers):
        def next_message(self):
            self.emit(["x"], msg_id="key-1")

    spout = Keyed()
    _open(spout)
    spout.next_tuple()
    with pytest.raises(ValueError, match="message id 'key-1' is already pending"):
        spout.next_tuple()


def test_counter_ids_skip_ids_the_spout_chose_itself():
    spout = Numbers(0)
    c = _open(spout)
    assert spout.emit(["a"], msg_id=1) == 1
    assert [spout.emit(["b"]), spout.emit(["c"])] == [0, 2]
    assert [m for _, m, _ in c.emitted] == [1, 0, 2]


def test_bad_retry_limit_is_refused_with_its_value():
    class Bad(Numbers):
        max_retries = -1

    with pytest.raises(ValueError, match=r"Bad.max_retries must be an integer >= 0 or None, got -1"):
        _open(Bad())


# ------------------------------------------------------------------------------ through the runtime


def _simulated(spout_cls, bolt_cls, spout_kwargs=None, bolt_kwargs=None, conf=None):
    b = TopologyBuilder()
    b.set_spout("src", spout_cls, 1, kwargs=spout_kwargs or {})
    b.set_bolt("work", bolt_cls, 1, kwargs=bolt_kwargs or {}).shuffle_grouping("src")
    topology = b.create_topology()
    clock = SimulatedClock()
    lt = LocalTopology("sim", topology, local_conf(topology, conf), clock=clock, spawn=False)
    return lt, clock


def _component(lt, name):
    for ex_id, ex in lt.runtime.executors.items():
        if lt.layout.executor_to_component[ex_id] == name:
            return next(iter((getattr(ex, "spouts", None) or ex.bolts).values()))


def test_failures_are_replayed_until_every_message_is_acked():
    lt, _ = _simulated(Numbers, FailFirst, {"n": 20}, {"times": 2})
    lt.runtime.run_until_idle()
    spout, bolt = _component(lt, "src"), _component(lt, "work")
    assert sorted(spout.acked_ids) == list(range(20)) and not spout.pending
    assert bolt.seen == {n: 3 for n in range(20)}  # two failures, then the ack
    st = lt.component_stats()["src"]
    assert st["acked"] == 20 and st["failed"] == 40
    assert st["extra"]["spout_replays"] == 40 and st["extra"]["spout_retries_exhausted"] == 0
    lt.runtime.stop()


def test_over_the_limit_messages_are_reported_and_counted():
    lt, _ = _simulated(Numbers, FailFirst, {"n": 4}, {"times": 100}, {"topology.spout.max.retries": 1})
    lt.runtime.run_until_idle()
    spout, bolt = _component(lt, "src"), _component(lt, "work")
    assert bolt.seen == {n: 2 for n in range(4)} and not spout.pending and spout.exhausted == 4
    st = lt.component_stats()["src"]
    assert st["extra"]["spout_retries_exhausted"] == 4 and st["acked"] == 0
    assert len(lt.errors["src"]) == 4
    assert "message 3 failed 2 times (max_retries=1); dropped: [3]" in lt.errors["src"][-1]
    lt.runtime.stop()


def test_timed_out_messages_are_replayed():
    lt, clock = _simulated(Numbers, Hold, {"n": 3}, {}, {"topology.message.timeout.secs": 10})
    rt = lt.runtime
    rt.run_until_idle()
    spout = _component(lt, "src")
    assert spout.acked == 0 and sorted(spout.pending) == [0, 1, 2]
    clock.advance(20.5)  # past two rotations of the pending map: the trees time out
    rt.fire_timers(clock.monotonic())
    rt.run_until_idle()
    assert sorted(spout.acked_ids) == [0, 1, 2] and spout.replayed == 3 and not spout.pending
    assert lt.component_stats()["src"]["extra"]["timed_out"] == 3
    rt.stop()


def test_replays_to_completion_on_executor_threads_in_a_local_cluster():
    with LocalCluster() as cluster:
        running = cluster.submit_topology("rs", {}, _topology_with_failures())

        def all_acked():
            st = running.component_stats()
            assert st["src"]["acked"] == 300, st["src"]
            return st

        st = eventually(all_acked, timeout=60)
        spout, bolt = _component(running, "src"), _component(running, "work")
    assert sorted(spout.acked_ids) == list(range(300)) and not spout.pending
    assert bolt.seen == {n: 2 for n in range(300)}
    assert st["src"]["extra"]["spout_replays"] == 300


def _topology_with_failures():
    b = TopologyBuilder()
    b.set_spout("src", Numbers, 1, kwargs={"n": 300})
    b.set_bolt("work", FailFirst, 1, kwargs={"times": 1}).shuffle_grouping("src")
    return b.create_topology()
