"""The per-tuple fast paths of issue 15 against the paths they replace.

1. The ack buffer: a bolt executor's acks are folded per root during a batch and sent after it as
   one message per tree (``anchoring.combine_ack`` / ``buffered_messages``). The same random tuple
   trees (``test_anchoring_model.script``) go through the real collectors once acking message by
   message and once with an ack buffer flushed at random points, with identically seeded random
   ids and acker timeout rotations at the same points (the runtime flushes after every batch, so a
   rotation never falls between an ack and its flush): the acker (the reference and the two-
   generation table) must report the same completions, failures and timeouts, and keep the same
   pending trees.
2. Routes with constant targets (``Grouper.constant``): whenever a route skips ``choose``, choose
   would have returned exactly that list; and the bolt collector's short path for one local target
   (``StreamRoute.single_queue``) makes exactly the tuples (values, message ids, ``ack_val`` s,
   lineage) and acker messages of the general path, for random tuple trees, acking on and off.
3. The garbage collector threshold a worker raises.
"""

from __future__ import annotations

import gc
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.topology.definition import GroupingDef
from gale.topology.tuple import Fields
from gale.worker.runtime import anchoring
from gale.worker.runtime.acker import ACK, FAIL, AckerTable, ReferenceAcker
from gale.worker.runtime.route import StreamRoute
from gale.worker.runtime.grouping import make_grouper
from gale.worker.runtime.runtime import raise_gc_threshold
from gale.worker.runtime.collector import BoltOutputCollector, SpoutOutputCollector
from tests.test_anchoring_model import SPOUT_TASK, StubExecutor, StubRuntime, Targets, run_collectors, script

# ------------------------------------------------------------------------------ the ack buffer


def test_combine_ack_folds_values_per_root_and_buffered_messages_send_one_per_root():
    buf: dict[int, int] = {}
    anchoring.combine_ack(buf, {4: 0b1100, 5: 0b0001}, 0b0101)
    anchoring.combine_ack(buf, {4: 0b0011}, 0)
    anchoring.combine_ack(buf, None, 7)  # untracked: nothing
    assert buf == {4: 0b1100 ^ 0b0101 ^ 0b0011, 5: 0b0001 ^ 0b0101}
    assert anchoring.buffered_messages(buf) == [(ACK, 4, 0b1010, 0), (ACK, 5, 0b0100, 0)]
    # the same as the per-tuple messages, XORed per root
    per_tuple = anchoring.ack_messages({4: 0b1100, 5: 0b0001}, 0b0101) + anchoring.ack_messages({4: 0b0011}, 0)
    folded: dict[int, int] = {}
    for _, root, val, _ in per_tuple:
        folded[root] = folded.get(root, 0) ^ val
    assert folded == buf


class FlushingExecutor(StubExecutor):
    """A stub executor with an ack buffer (as the runtime's executors have)."""

    def __init__(self, runtime, component):
        super().__init__(runtime, component)
        self.ack_buf: dict[int, int] = {}


def drive(ops, seed: int, buffered: bool, flush_seed: int, n_ackers: int) -> list:
    """Run ``ops`` through the collectors; return the acker messages in order, with ``"rotate"``
    markers where the acker's timeout rotation falls. Flush points and rotations come from
    ``flush_seed``, the same with and without a buffer; a rotation only follows a flush (the
    runtime sends an executor's buffer after each of its batches, before any timer fires)."""
    flush_rng = random.Random(flush_seed)

    def after_op(rt, executors):
        flush = flush_rng.random() < 0.3
        rotate = flush and flush_rng.random() < 0.2
        if flush and buffered:
            for ex in executors:
                if ex.ack_buf:
                    rt.acker_msgs.extend((None, msg) for msg in anchoring.buffered_messages(ex.ack_buf))
                    ex.ack_buf.clear()
        if rotate:
            rt.acker_msgs.append((None, "rotate"))

    executors_seen: list = []

    def record(rt, executors):
        if not executors_seen:
            executors_seen.extend(executors)
        after_op(rt, executors)

    _, msgs, _ = run_collectors(ops, random.Random(seed).getrandbits, False, n_ackers, ack_buffer=buffered,
                                after_op=record)
    for ex in executors_seen:  # the end of the last batch: what is still buffered is sent
        if getattr(ex, "ack_buf", None):
            msgs.extend(anchoring.buffered_messages(ex.ack_buf))
    return msgs


def outcome_of(acker, messages):
    results = []
    batch: list = []
    for msg in messages:
        if msg == "rotate":
            results.extend(acker.apply(batch))
            batch = []
            acker.rotate()
            results.append("rotated")
        else:
            batch.append(msg)
    results.extend(acker.apply(batch))
    return results


def pending_of(acker) -> dict:
    if isinstance(acker, ReferenceAcker):
        return {root: (e[0], e[1], e[2]) for root, e in acker.entries.items()}
    young = {root: (e.val, e.task, e.failed) for root, e in acker.young.items()}
    return young, len(acker)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 120), st.integers(0, 2**32), st.sampled_from([1, 3]))
def test_an_ack_buffer_gives_the_acker_the_same_completions_failures_and_timeouts(seed, steps, flush_seed, n_ackers):
    ops = script(seed, steps)
    plain = drive(ops, seed, False, flush_seed, n_ackers)
    batched = drive(ops, seed, True, flush_seed, n_ackers)
    # never more messages, and no fewer inits and fails
    assert len([m for m in batched if m != "rotate"]) <= len([m for m in plain if m != "rotate"])
    assert [m for m in batched if m != "rotate" and m[0] != ACK] == [m for m in plain if m != "rotate" and m[0] != ACK]

    def results(messages):
        # per segment between rotations, the set of reports (the order within a batch may differ)
        segments, current = [], []
        for r in outcome_of(ReferenceAcker(), messages):
            if r == "rotated":
                segments.append(sorted(current))
                current = []
            else:
                current.append(r)
        segments.append(sorted(current))
        return segments

    assert results(batched) == results(plain)
    ref_plain, ref_batched = ReferenceAcker(), ReferenceAcker()
    outcome_of(ref_plain, plain)
    outcome_of(ref_batched, batched)
    assert pending_of(ref_batched) == pending_of(ref_plain)
    # the two-generation table the runtime uses reports the same as the reference
    table = AckerTable(young_max=4)
    assert sorted(r for r in outcome_of(table, batched) if r != "rotated") == sorted(
        r for r in outcome_of(ReferenceAcker(), plain) if r != "rotated")
    assert all(task == SPOUT_TASK for task, _, _ in (r for r in outcome_of(ReferenceAcker(), batched) if r != "rotated"))


def test_a_fail_sends_the_trees_buffered_acks_first():
    rt = StubRuntime(False, 1)

    class G:
        direct = False

        def choose(self, values):
            return [100, 101]

        def constant(self):
            return None

    routes = {"default": StreamRoute("default", Fields(["v"], "c:default"), [G()], False)}
    spout = SpoutOutputCollector(FlushingExecutor(rt, "spout"), SPOUT_TASK, routes, rand=random.Random(3).getrandbits)
    bolt_ex = FlushingExecutor(rt, "bolt")
    bolt = BoltOutputCollector(bolt_ex, 8, routes, rand=random.Random(4).getrandbits)
    spout.emit(["s"], msg_id=1)
    a, b = (t for _, t in rt.sent)  # task 100 local, 101 remote: both recorded
    (root,) = a.message_id
    bolt.ack(a)
    assert bolt_ex.ack_buf == {root: a.message_id[root]}
    before = len(rt.acker_msgs)
    bolt.fail(b)
    assert [m for _, m in rt.acker_msgs[before:]] == [(ACK, root, a.message_id[root], 0), (FAIL, root, 0, 0)]
    assert bolt_ex.ack_buf == {}


# ------------------------------------------------------------------------------ constant routes


@pytest.mark.parametrize("kind", ["shuffle", "local_or_shuffle", "fields", "all", "global", "none"])
@pytest.mark.parametrize("n_tasks", [1, 3])
def test_a_constant_route_is_what_choose_returns_for_every_value(kind, n_tasks):
    fields = Fields(["k", "v"], "c:default")
    tasks = list(range(10, 10 + n_tasks))
    grouping = GroupingDef(type=kind, fields=["k"] if kind == "fields" else [])
    grouper = make_grouper(grouping, tasks, fields, frozenset(tasks), random.Random(1), builtin_hash=True)
    route = StreamRoute("default", fields, [grouper], False)
    rng = random.Random(2)
    chosen = [grouper.choose([rng.choice(["a", "b", 3, (1, 2)]), i]) for i in range(50)]
    if route.const is not None:
        assert all(c == route.const for c in chosen)
    if n_tasks == 1 or kind in ("all", "global"):
        assert route.const is not None, "a grouping that cannot vary should skip choose"
    else:
        assert route.const is None and len({tuple(c) for c in chosen}) > 1


def test_a_route_binds_local_queues_only_when_every_constant_target_is_local():
    fields = Fields(["k"], "c:default")
    queues = {10: [], 11: []}
    one = make_grouper(GroupingDef(type="global"), [10, 11], fields)
    every = make_grouper(GroupingDef(type="all"), [10, 11, 12], fields)
    local = StreamRoute("default", fields, [one], False, queues.get)
    assert local.const == [10] and local.single_queue is queues[10] and local.const_queues == [queues[10]]
    partly_remote = StreamRoute("default", fields, [every], False, queues.get)
    assert partly_remote.const == [10, 11, 12] and partly_remote.const_queues is None
    assert partly_remote.single_queue is None
    nobody = StreamRoute("default", fields, [], False, queues.get)
    assert nobody.const == [] and nobody.single_queue is None


def single_target_script(seed: int, steps: int):
    """Random ops where every emit has one target: ("spout", tracked), ("emit", how, anchors),
    ("ack", i), ("fail", i) on tuple indices."""
    rng = random.Random(seed)
    alive: list[int] = []
    n = 0
    ops: list = []
    for _ in range(steps):
        r = rng.random()
        if r < 0.15 or not alive:
            ops.append(("spout", rng.random() < 0.9))
        elif r < 0.6:
            how = rng.choice(["single", "single", "auto", "list", "unanchored"])
            first = rng.choice(alive)
            anchors = {"single": [first], "auto": [first], "unanchored": [],
                       "list": [first] + [rng.choice(alive) for _ in range(rng.randrange(3))]}[how]
            ops.append(("emit", how, anchors))
        else:
            i = alive.pop(rng.randrange(len(alive)))
            ops.append(("fail" if rng.random() < 0.05 else "ack", i))
            continue
        alive.append(n)
        n += 1
    return ops


def run_single_target(ops, seed: int, short_path: bool, acking: bool):
    rt = StubRuntime(True, 1)
    rt.acking = acking
    fields = Fields(["v"], "c:default")
    if short_path:  # task 200 is "local" in the stub: the route binds its queue
        route = StreamRoute("default", fields, [make_grouper(GroupingDef(type="global"), [200], fields)], False,
                            rt.queue_of)
        assert route.single_queue is not None
    else:
        grouper = Targets()
        grouper.next = [200]
        route = StreamRoute("default", fields, [grouper], False)
        assert route.single_queue is None
    routes = {"default": route}
    rand = random.Random(seed).getrandbits
    spout = SpoutOutputCollector(StubExecutor(rt, "spout"), SPOUT_TASK, routes, rand=rand)
    bolt = BoltOutputCollector(StubExecutor(rt, "bolt"), 8, routes, rand=rand)
    tuples: list = []
    for i, op in enumerate(ops):
        before = len(rt.sent)
        if op[0] == "spout":
            spout.emit([f"s{i}"], msg_id=i if (op[1] and acking) else None)
        elif op[0] == "emit":
            parents = [tuples[j] for j in op[2]]
            if op[1] == "single":
                assert bolt.emit([f"b{i}"], anchors=parents[0]) == [200]
            elif op[1] == "auto":
                bolt.auto_anchor = parents[0]
                bolt.emit([f"b{i}"])
                bolt.auto_anchor = None
            elif op[1] == "list":
                bolt.emit([f"b{i}"], anchors=parents)
            else:
                bolt.emit([f"b{i}"])
        elif op[0] == "ack":
            bolt.ack(tuples[op[1]])
        else:
            bolt.fail(tuples[op[1]])
        tuples.extend(t for _, t in rt.sent[before:])
    made = [(t.values, t.fields, t.task, t.message_id, t.ack_val, t.lineage, t._emits, t._st) for t in tuples]
    return made, rt.acker_msgs, route.emitted, route.transferred


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 100), st.booleans())
def test_the_one_local_target_short_path_makes_what_the_general_path_makes(seed, steps, acking):
    ops = single_target_script(seed, steps)
    short = run_single_target(ops, seed, True, acking)
    general = run_single_target(ops, seed, False, acking)
    assert short == general
    assert len(short[0]) == sum(1 for op in ops if op[0] in ("spout", "emit"))


# ------------------------------------------------------------------------------ the GC threshold


def test_the_gc_threshold_is_raised_never_lowered_and_left_alone_when_unset():
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        raise_gc_threshold(None)
        assert gc.get_threshold() == (700, 10, 10)
        raise_gc_threshold(5000)
        assert gc.get_threshold() == (5000, 10, 10)
        raise_gc_threshold(1000)
        assert gc.get_threshold() == (5000, 10, 10)
        gc.set_threshold(0, 10, 10)  # collection switched off by the user: stays off
        raise_gc_threshold(5000)
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*saved)


def test_a_worker_sets_the_switch_interval_it_is_given_and_leaves_it_when_unset():
    import sys

    from gale.worker.daemon import set_switch_interval

    saved = sys.getswitchinterval()
    try:
        set_switch_interval(0.5)
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        set_switch_interval(None)
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        set_switch_interval(5)
        assert sys.getswitchinterval() == pytest.approx(0.005)
    finally:
        sys.setswitchinterval(saved)


def test_the_switch_interval_is_checked_as_a_value():
    from gale import config as gconfig
    from gale.errors import ConfigError

    gconfig.validate({"topology.worker.gil.switch.interval.ms": None}, allow_user_keys=True)
    gconfig.validate({"topology.worker.gil.switch.interval.ms": 2}, allow_user_keys=True)
    for bad in (0, -1, "fast", 5000):
        with pytest.raises(ConfigError, match="topology.worker.gil.switch.interval.ms"):
            gconfig.validate({"topology.worker.gil.switch.interval.ms": bad}, allow_user_keys=True)
