"""The executor's layers in local mode: a layer or body that raises is reported on its component, the
tuples it held fail (and replay), and the worker goes on; checkpoint tuples never reach a body; the
composition of each executor is what the topology needs."""

from __future__ import annotations

from collections import Counter

import pytest

from gale import Bolt, TopologyBuilder
from gale.topology.definition import ACKER_COMPONENT
from gale.worker.assembly import Assembly
from gale.worker.local import LocalTopology, local_conf
from tests.state_topologies import NumberedSentences, StatefulCount, sentence
from tests.test_state_local import counts_in
from tests.waiting import eventually


class Split(Bolt):
    output_fields = ["word"]

    def execute(self, tup):
        for w in tup["sentence"].split():
            self.collector.emit([w], anchors=tup)
        self.collector.ack(tup)


def word_count(n: int):
    b = TopologyBuilder()
    b.set_spout("sentences", NumberedSentences, 1)
    b.set_bolt("split", Split, 1).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulCount, 1).fields_grouping("split", ["word"])
    return b.create_topology("layers", {"test.sentences": n, "topology.state.checkpoint.interval.ms": 50,
                                        "topology.message.timeout.secs": 5})


class Faulty(Assembly):
    """The real assembly, plus a fault in one executor's layers (``fault(executor)``)."""

    def __init__(self, component: str, fault):
        self.component = component
        self.fault = fault

    def make(self, runtime, executor_id, component):
        ex = super().make(runtime, executor_id, component)
        if component == self.component:
            ex.preparers.append(lambda: self.fault(ex))
        return ex


def run(topo, factory):
    return LocalTopology("layers", topo, local_conf(topo), factory=factory)


def expected(n: int) -> dict:
    return dict(Counter(w for i in range(n) for w in sentence(i).split()))


def test_a_body_that_raises_fails_what_it_held_and_the_worker_goes_on():
    """The split bolt's intake (behind its checkpoint layer) raises on its first run: the tuples of
    that run fail and replay, the error names the failing step, and the counts come out exact."""
    n = 200
    calls = {"n": 0}

    def break_first_run(ex):
        gate = ex.layers["checkpoint"]
        task = ex.tasks[0]
        inner = gate.inner[task]

        def flaky(task, queue, budget):
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("a bug in a body")
            return inner(task, queue, budget)

        flaky.__qualname__ = "flaky_intake"
        gate.inner[task] = flaky

    lt = run(word_count(n), Faulty("split", break_first_run))
    try:
        eventually(lambda: _eq(counts_in(lt), expected(n)), timeout=60)
        errors = lt.errors.get("split", [])
        assert any("a bug in a body" in e for e in errors), errors
        stats = lt.component_stats()
        assert stats["sentences"]["failed"] >= 1  # what the body held failed, and was replayed
        assert stats["split"]["extra"]["layer_errors"] >= 1
    finally:
        lt.kill()


def test_a_layer_whose_round_raises_is_reported_and_the_worker_goes_on():
    n = 100

    def broken_poll(ex):
        def poll(now):
            raise ValueError("a layer's bug")

        ex.polls.append(poll)

    lt = run(word_count(n), Faulty("count", broken_poll))
    try:
        eventually(lambda: _eq(counts_in(lt), expected(n)), timeout=60)
        assert any("a layer's bug" in e for e in lt.errors.get("count", []))
    finally:
        lt.kill()


SEEN: list = []


class Recording(Bolt):
    output_fields = ["word"]

    def execute(self, tup):
        SEEN.append(tup.stream)
        self.collector.emit([tup["word"]], anchors=tup)
        self.collector.ack(tup)


def test_checkpoints_never_reach_a_body_and_each_executor_has_the_layers_it_needs():
    SEEN.clear()
    b = TopologyBuilder()
    b.set_spout("sentences", NumberedSentences, 1)
    b.set_bolt("split", Split, 1).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulCount, 1).fields_grouping("split", ["word"])
    b.set_bolt("after", Recording, 1).shuffle_grouping("count")
    topo = b.create_topology("layers", {"test.sentences": 50, "topology.state.checkpoint.interval.ms": 50})
    lt = LocalTopology("layers", topo, local_conf(topo))
    try:
        eventually(lambda: _eq(counts_in(lt), expected(50)), timeout=60)
        layers = {ex.component: (ex.body_name, sorted(ex.layers)) for ex in lt.runtime.executors.values()}
    finally:
        lt.kill()
    assert set(SEEN) == {"default"}  # only data: $checkpoint tuples were acted on and forwarded by the layer
    assert layers["split"] == ("python", ["checkpoint", "incarnation"])
    assert layers["count"] == ("python", ["checkpoint", "held-acks", "incarnation", "state"])
    assert layers["after"] == ("python", ["checkpoint", "incarnation"])
    # at-least-once: the spout replays its pending trees when a bolt or acker executor restarts
    assert layers["sentences"] == ("python", ["restart_replay"])
    assert layers[ACKER_COMPONENT][1] == ["incarnation"]


@pytest.mark.parametrize("guarantee,layers", [
    ("at-least-once", ["checkpoint", "held-acks", "held-outputs", "incarnation", "state"]),
    ("exactly-once", ["checkpoint", "held-outputs", "incarnation", "state"]),
])
def test_a_persistent_window_s_layers(guarantee, layers):
    from tests.state_topologies import PersistentTens, RewindableItems

    b = TopologyBuilder()
    b.set_spout("sentences", RewindableItems, 1)
    b.set_bolt("window", PersistentTens, 1).shuffle_grouping("sentences")
    topo = b.create_topology("layers", {"test.items": 5, "topology.state.guarantee": guarantee})
    lt = LocalTopology("layers", topo, local_conf(topo), start=False)
    try:
        (ex,) = [ex for ex in lt.runtime.executors.values() if ex.component == "window"]
        assert ex.body_name == "window" and sorted(ex.layers) == layers
        sources = [ex for ex in lt.runtime.executors.values() if ex.component == "sentences"]
        assert sorted(sources[0].layers) == (["exactly-once-source"] if guarantee == "exactly-once"
                                             else ["restart_replay"])
    finally:
        lt.runtime.close_resources()


def _eq(a, b):
    assert a == b, (len(a), len(b))


def test_no_message_in_a_task_s_queue_crashes_its_executor_thread():
    """What reaches a queue however it got there — a verdict in a bolt's queue, junk in a spout's,
    an INIT naming a bolt as its tree's spout at the acker — is reported and dropped; the thread and
    the topology go on, every sentence acked."""
    from tests.topologies import ListSpout, Sink

    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[[f"s{i}" for i in range(50)]])
    b.set_bolt("sink", Sink, 1).shuffle_grouping("src")
    topo = b.create_topology("junk", {"topology.acker.executors": 1})
    lt = LocalTopology("junk", topo, local_conf(topo))
    try:
        rt = lt.runtime
        (sink_task,) = rt.layout.component_tasks("sink")
        (src_task,) = rt.layout.component_tasks("src")
        (acker_task,) = rt.layout.component_tasks("__acker")
        rt.deliver(sink_task, (1, 12345))  # a verdict where a tuple belongs
        rt.deliver(src_task, ("junk",))  # not a verdict
        rt.deliver(acker_task, (0, 77, 5, sink_task))  # INIT naming the sink as the tree's spout
        rt.deliver(acker_task, (1, 77, 5, 0))  # ... and the ACK that completes it
        (spout,) = [s for ex in rt.executors.values() if ex.component == "src" for s in ex.spouts.values()]
        eventually(lambda: _eq(sorted(spout.acked), list(range(50))), timeout=30)

        def reported():
            assert any("src" in e or "_ack_results" in e for e in lt.errors.get("src", [])), lt.errors
            assert lt.errors.get("sink"), lt.errors
            assert any("names task" in e and "no spout task" in e for e in lt.errors.get("__acker", [])), lt.errors

        eventually(reported, timeout=30)
        assert all(t.is_alive() for t in rt.threads)
    finally:
        lt.kill()


def test_held_acks_can_be_counted_from_another_thread_while_they_are_released():
    """The stats read an executor's pending (``AckHolding.pending``) on their own thread while the
    executor thread releases committed acks: the count must never break on the release's changes
    (it raised "deque mutated during iteration" from the test's diagnosis, and could in a worker)."""
    import sys
    import threading
    from types import SimpleNamespace

    from gale.worker.state.managed import AckHolding

    runtime = SimpleNamespace(send_acker=lambda task, message: None, acker_task=lambda root: 0)
    holding = AckHolding(SimpleNamespace(runtime=runtime))
    holding.held = {1: [], 2: []}
    stop = threading.Event()
    errors: list[BaseException] = []

    def count() -> None:
        try:
            while not stop.is_set():
                holding.pending()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: every iteration is exposed
    reader = threading.Thread(target=count)
    reader.start()
    try:
        for _ in range(3000):
            for _ in range(20):
                holding.releasing.append([iter([(1, 1), (2, 2)]), 2])
            while holding.releasing:
                holding.poll(0.0)
    finally:
        stop.set()
        reader.join()
        sys.setswitchinterval(before)
    assert not errors, errors
    assert holding.pending() == 0
