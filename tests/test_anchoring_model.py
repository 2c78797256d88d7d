"""The anchoring arithmetic: the pure reference (``gale.worker.runtime.anchoring``) against the
reference acker, and the collectors' inlined fast paths against the pure reference.

1. Random tuple trees (fan-out, multi-anchoring across trees, duplicate and untracked anchors, acks
   and fails in random order) through :class:`AnchoringModel` into :class:`ReferenceAcker`: a spout
   tuple is acked iff every tuple of its tree was acked, failed iff one of them failed, pending
   otherwise.
2. The same random script through the real collectors (every emit path: the single-anchor hot path,
   several roots, a list of anchors, ``emit_direct``, a BasicBolt's automatic anchor, local queues
   and remote sends, the direct acker queue and ``send_acker``, steered root ids) and through the
   model, with identically seeded random sources: every tuple's message id and ``ack_val`` and every
   acker message must be identical, so the fast path is the reference arithmetic.

The collectors run on a recording stub of the runtime (this is a unit test of the algebra; the
end-to-end tests run the real runtime).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.clock import SimulatedClock
from gale.topology.tuple import Fields, Tuple
from gale.worker.runtime import anchoring
from gale.worker.runtime.acker import ACK, ACKED, FAIL, FAILED, INIT, RESET, ReferenceAcker
from gale.worker.runtime.anchoring import AnchoringModel, ModelTuple
from gale.worker.runtime.collector import BoltOutputCollector, SpoutOutputCollector
from gale.worker.runtime.grouping import DirectGrouper, Grouper
from gale.worker.runtime.rotating import RotatingMap
from gale.worker.runtime.route import StreamRoute
from gale.worker.runtime.stats import ExecutorStatsCollector

SPOUT_TASK = 7
DIRECT_TASK = 300


# ------------------------------------------------------------------------------ the pure functions


def test_spout_emit_gives_each_copy_its_edge_and_the_acker_their_xor():
    ids, init_val = anchoring.spout_emit(10, [0b0011, 0b0101, 0b1000])
    assert ids == [{10: 0b0011}, {10: 0b0101}, {10: 0b1000}]
    assert init_val == 0b1110
    assert anchoring.init_message(10, init_val, 7) == (INIT, 10, 0b1110, 7)


def test_bolt_emit_xors_each_anchor_edge_into_every_root_of_that_anchor():
    # anchors {r1} and {r1, r2}: r1 gets both edges, r2 only the second
    assert anchoring.bolt_emit([{1: 11}, {1: 12, 2: 13}], [0b01, 0b10]) == {1: 0b11, 2: 0b10}
    assert anchoring.bolt_emit([], []) is None
    assert anchoring.add_child(0b0110, 0b0011) == 0b0101
    with pytest.raises(ValueError, match="2 anchors need as many edges, got 1"):
        anchoring.bolt_emit([{1: 1}, {2: 2}], [5])


def test_ack_fail_and_reset_messages_per_root():
    assert anchoring.ack_messages({4: 0b1100, 5: 0b0001}, 0b0101) == [(ACK, 4, 0b1001, 0), (ACK, 5, 0b0100, 0)]
    assert anchoring.fail_messages({4: 1, 5: 2}) == [(FAIL, 4, 0, 0), (FAIL, 5, 0, 0)]
    assert anchoring.reset_messages({4: 1}) == [(RESET, 4, 0, 0)]
    assert anchoring.ack_messages(None, 3) == anchoring.fail_messages({}) == []
    assert anchoring.tracked([None, {}, {1: 2}]) == [{1: 2}]


def test_root_ids_avoid_the_reserved_values_and_steering_picks_the_acker():
    assert anchoring.new_root_id(lambda bits: 0) == 2
    assert anchoring.new_edge_id(lambda bits: 0) == 1
    for root in [2, 3, 4, 5, 17, 2**64 - 1]:
        for n in (1, 2, 3, 5):
            for k in range(n):
                steered = anchoring.steer_root(root, n, k)
                assert steered % n == k and steered >= 2


# ------------------------------------------------------------------------------ random scripts


def script(seed: int, steps: int):
    """A random sequence of operations on tuple *indices* (the same for the model and the
    collectors): ("spout", n_targets, tracked), ("emit", how, anchor indices, n_targets),
    ("ack", index), ("fail", index). Only tuples neither acked nor failed are anchored or acked."""
    rng = random.Random(seed)
    alive: list[int] = []
    n = 0
    ops = []
    for _ in range(steps):
        r = rng.random()
        if r < 0.15 or not alive:
            k = rng.randrange(1, 4)
            ops.append(("spout", k, rng.random() < 0.9))
            alive.extend(range(n, n + k))
            n += k
        elif r < 0.6:
            first = rng.choice(alive)
            others = [rng.choice(alive) for _ in range(rng.randrange(3))]  # may repeat, may include first
            how = rng.choice(["single", "list", "direct", "auto", "unanchored"])
            anchors = [first] if how in ("single", "auto") else [first] + others
            if how == "unanchored":
                anchors = []
            k = 1 if how == "direct" else rng.randrange(0, 4)
            ops.append(("emit", how, anchors, k))
            alive.extend(range(n, n + k))
            n += k
        else:
            i = alive.pop(rng.randrange(len(alive)))
            ops.append(("fail" if rng.random() < 0.05 else "ack", i))
    return ops


def run_model(ops, rand, steer=None):
    model = AnchoringModel(rand, steer)
    tuples: list[ModelTuple] = []
    roots: list[int] = []
    for op in ops:
        if op[0] == "spout":
            _, k, tracked = op
            if tracked:
                root, copies = model.spout_emit(k, SPOUT_TASK)
                roots.append(root)
            else:
                copies = [ModelTuple(None) for _ in range(k)]
            tuples.extend(copies)
        elif op[0] == "emit":
            _, how, anchors, k = op
            tuples.extend(model.bolt_emit([tuples[i] for i in anchors], k))
        elif op[0] == "ack":
            model.ack(tuples[op[1]])
        else:
            model.fail(tuples[op[1]])
    return model, tuples, roots


class Recorder:
    """A queue (or acker queue) whose appends go to one shared, ordered log."""

    def __init__(self, log, key):
        self.log, self.key = log, key

    def append(self, item):
        self.log.append((self.key, item))


class StubRuntime:
    capture = None
    acking = True

    def __init__(self, direct_acker_queue: bool, n_ackers: int):
        self.acker_tasks = list(range(1, n_ackers + 1))
        self.local_acker_indices = [0]
        self.sent: list = []  # (target, tuple) in emit order, local queues and remote sends alike
        self.acker_msgs: list = []
        self._acker_queue = Recorder(self.acker_msgs, None) if direct_acker_queue else None
        self.acker_task = lambda root: self.acker_tasks[root % n_ackers]

    def queue_of(self, task):
        return Recorder(self.sent, task) if task % 2 == 0 else None  # even tasks are "local"

    def send_tuple(self, task, tup):
        self.sent.append((task, tup))

    send_remote = send_tuple

    def send_acker(self, task, msg):
        assert task == self.acker_task(msg[1])
        self.acker_msgs.append((None, msg))

    def single_acker_queue(self):
        return self._acker_queue


class StubExecutor:
    def __init__(self, runtime, component):
        self.runtime = runtime
        self.component = component
        self.stats = ExecutorStatsCollector(component, "bolt")
        self.pending = RotatingMap(2)
        self.clock = SimulatedClock()

    def ack_now(self, task, msg_id, stream):  # pragma: no cover - acking is on here
        raise AssertionError("acking is enabled")


class Targets(Grouper):
    def __init__(self):
        self.next: list[int] = []

    def choose(self, values):
        return list(self.next)


def run_collectors(ops, rand, direct_acker_queue: bool, n_ackers: int, ack_buffer: bool = False, after_op=None):
    """Run ``ops`` through the collectors. With ``ack_buffer`` the bolt executor has an ack buffer
    (``ack_buf``, as the runtime's executors do); ``after_op(runtime, executors)`` runs after each op."""
    rt = StubRuntime(direct_acker_queue, n_ackers)
    grouper = Targets()
    routes = {
        "default": StreamRoute("default", Fields(["v"], "c:default"), [grouper], False),
        "direct": StreamRoute("direct", Fields(["v"], "c:direct"), [DirectGrouper([DIRECT_TASK])], True),
    }
    executors = [StubExecutor(rt, "spout"), StubExecutor(rt, "bolt")]
    if ack_buffer:
        for ex in executors:
            ex.ack_buf = {}
    spout = SpoutOutputCollector(executors[0], SPOUT_TASK, routes, rand=rand)
    bolt = BoltOutputCollector(executors[1], 8, routes, rand=rand)
    tuples: list[Tuple] = []
    msg = 0
    for op in ops:
        before = len(rt.sent)
        if op[0] == "spout":
            _, k, tracked = op
            grouper.next = list(range(100, 100 + k))
            spout.emit(["s"], msg_id=msg if tracked else None)
            msg += 1
        elif op[0] == "emit":
            _, how, anchors, k = op
            grouper.next = list(range(200, 200 + k))
            parents = [tuples[i] for i in anchors]
            if how == "single":
                bolt.emit(["b"], anchors=parents[0])
            elif how == "list":
                bolt.emit(["b"], anchors=parents)
            elif how == "direct":
                bolt.emit_direct(DIRECT_TASK, ["b"], anchors=parents, stream="direct")
            elif how == "auto":
                bolt.auto_anchor = parents[0]
                bolt.emit(["b"])
                bolt.auto_anchor = None
            else:
                bolt.emit(["b"])
        elif op[0] == "ack":
            bolt.ack(tuples[op[1]])
        else:
            bolt.fail(tuples[op[1]])
        tuples.extend(t for _, t in rt.sent[before:])
        if after_op is not None:
            after_op(rt, executors)
    return tuples, [m for _, m in rt.acker_msgs], spout


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 80), st.booleans(), st.sampled_from([1, 3]))
def test_collectors_compute_exactly_the_reference_arithmetic(seed, steps, direct_acker_queue, n_ackers):
    ops = script(seed, steps)
    fast, fast_msgs, spout = run_collectors(ops, random.Random(seed).getrandbits, direct_acker_queue, n_ackers)
    steer = spout._steer
    assert steer == ((n_ackers, 0) if n_ackers > 1 else None)
    ref, ref_tuples, _ = run_model(ops, random.Random(seed).getrandbits, steer)
    assert len(fast) == len(ref_tuples)
    assert [t.message_id for t in fast] == [t.message_id for t in ref_tuples]
    assert [t.ack_val for t in fast] == [t.ack_val for t in ref_tuples]
    assert fast_msgs == ref.messages


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 120), st.integers(0, 2**32))
def test_reference_arithmetic_acks_a_spout_tuple_iff_its_whole_tree_was_acked(seed, steps, order_seed):
    ops = script(seed, steps)
    model, tuples, roots = run_model(ops, random.Random(seed).getrandbits)
    acked = {i for op in ops if op[0] == "ack" for i in [op[1]]}
    failed = {i for op in ops if op[0] == "fail" for i in [op[1]]}
    messages = list(model.messages)
    random.Random(order_seed).shuffle(messages)  # acker messages arrive in any order
    results = ReferenceAcker().apply(messages)
    assert all(task == SPOUT_TASK for task, _, _ in results)
    outcomes = {root: outcome for _, outcome, root in results}
    assert len(outcomes) == len(results), "a tree was reported twice"
    for root in roots:
        tree = [i for i, t in enumerate(tuples) if t.message_id and root in t.message_id]
        if any(i in failed for i in tree):
            assert outcomes.get(root) == FAILED
        elif all(i in acked for i in tree):
            assert outcomes.get(root) == ACKED
        else:
            assert root not in outcomes, "a tree with an unacked tuple was reported complete"
    assert set(outcomes) <= set(roots)


def test_a_tree_completes_only_after_children_anchored_to_two_roots_are_acked():
    model = AnchoringModel(random.Random(1).getrandbits)
    r1, (a,) = model.spout_emit(1, SPOUT_TASK)
    r2, (b,) = model.spout_emit(1, SPOUT_TASK)
    (joined,) = model.bolt_emit([a, b, a], 1)  # a twice: both of its edges cancel in r1
    assert set(joined.message_id) == {r1, r2}
    model.ack(a)
    model.ack(b)
    acker = ReferenceAcker()
    assert acker.apply(model.messages) == []
    model.messages.clear()
    model.ack(joined)
    model.ack(joined)  # a second ack is ignored
    assert sorted(acker.apply(model.messages)) == sorted([(SPOUT_TASK, ACKED, r1), (SPOUT_TASK, ACKED, r2)])
