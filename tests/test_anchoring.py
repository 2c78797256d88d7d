"""Storm's anchoring arithmetic through the real collectors, checked by the real acker.

A property test builds random tuple DAGs (multi-anchored emits, fan-out, acks in random order,
sometimes one failure) and checks: the spout is acked exactly when every tuple was acked, and
failed when any tuple failed. The collectors run against a minimal in-process runtime stub (pure
unit test of the algebra; the end-to-end tests use the real runtime).
"""

import random
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from gale.clock import SimulatedClock
from gale.topology.tuple import Fields, Tuple
from gale.worker.runtime.acker import ACKED, FAILED, AckerTable
from gale.worker.runtime.collector import BoltOutputCollector, SpoutOutputCollector
from gale.worker.runtime.grouping import Grouper
from gale.worker.runtime.rotating import RotatingMap
from gale.worker.runtime.route import StreamRoute
from gale.worker.runtime.stats import ExecutorStatsCollector


class FixedTargets(Grouper):
    def __init__(self):
        self.next = [100]

    def choose(self, values):
        return self.next


class StubRuntime:
    acking = True
    capture = None
    acker_tasks = [1]
    local_acker_indices = [0]

    def __init__(self):
        self.tuples = deque()
        self.acker_msgs = []
        self.acker_task = lambda root: 1

    def queue_of(self, task):
        return None  # nothing is local: every tuple goes through send_tuple

    def send_tuple(self, task, tup):
        self.tuples.append((task, tup))

    send_remote = send_tuple

    def send_acker(self, task, msg):
        self.acker_msgs.append(msg)

    def send_result(self, task, res):
        pass

    def single_acker_queue(self):
        return None


class StubExecutor:
    def __init__(self, runtime, component):
        self.runtime = runtime
        self.component = component
        self.stats = ExecutorStatsCollector(component, "bolt")
        self.pending = RotatingMap(2)
        self.clock = SimulatedClock()


def make(runtime, component, cls, grouper):
    ex = StubExecutor(runtime, component)
    route = StreamRoute("default", Fields(["v"], f"{component}:default"), [grouper], False)
    return cls(ex, 7, {"default": route}), ex


def run_dag(plan_seed: int, n_targets: int, steps: int, fail_one: bool):
    rng = random.Random(plan_seed)
    rt = StubRuntime()
    g = FixedTargets()
    spout, sp_ex = make(rt, "spout", SpoutOutputCollector, g)
    bolt, _ = make(rt, "bolt", BoltOutputCollector, g)
    g.next = list(range(100, 100 + n_targets))
    spout.emit(["root"], msg_id="m1")
    alive = [t for _, t in rt.tuples]
    rt.tuples.clear()
    all_tuples = list(alive)
    # random processing: pick a live tuple; emit 0-2 children anchored to it and maybe others; ack it
    for _ in range(steps):
        if not alive:
            break
        tup = alive.pop(rng.randrange(len(alive)))
        for _ in range(rng.randrange(3)):
            anchors = [tup] + rng.sample(alive, k=min(len(alive), rng.randrange(2)))
            g.next = [200]
            bolt.emit(["child"], anchors=anchors if len(anchors) > 1 else tup)
            children = [t for _, t in rt.tuples]
            rt.tuples.clear()
            alive.extend(children)
            all_tuples.extend(children)
        bolt.ack(tup)
    failed = False
    if fail_one and alive:
        bolt.fail(alive.pop(rng.randrange(len(alive))))
        failed = True
    rng.shuffle(rt.acker_msgs)
    table = AckerTable()
    out = table.apply(rt.acker_msgs)
    return out, alive, failed, sp_ex


@settings(max_examples=250, deadline=None)
@given(st.integers(0, 10**9), st.integers(1, 4), st.integers(1, 40), st.booleans())
def test_spout_acked_iff_every_tuple_acked(seed, n_targets, steps, fail_one):
    out, alive, failed, sp_ex = run_dag(seed, n_targets, steps, fail_one)
    outcomes = [o for _, o, _ in out]
    if failed:
        assert outcomes == [FAILED]
    elif alive:
        assert outcomes == []  # some tuple is still unacked: the tree is not complete
    else:
        assert outcomes == [ACKED]
    assert len(sp_ex.pending) == 1


def test_unanchored_and_untracked_emits_send_nothing_to_the_acker():
    rt = StubRuntime()
    g = FixedTargets()
    spout, _ = make(rt, "spout", SpoutOutputCollector, g)
    bolt, _ = make(rt, "bolt", BoltOutputCollector, g)
    spout.emit(["x"])  # no message id: untracked
    (_, tup), = rt.tuples
    assert tup.message_id is None
    bolt.emit(["y"])  # unanchored
    bolt.ack(tup)
    assert rt.acker_msgs == []


def test_multi_anchor_tuple_carries_every_root():
    rt = StubRuntime()
    g = FixedTargets()
    spout, _ = make(rt, "spout", SpoutOutputCollector, g)
    bolt, _ = make(rt, "bolt", BoltOutputCollector, g)
    spout.emit(["a"], msg_id=1)
    spout.emit(["b"], msg_id=2)
    (_, a), (_, b) = rt.tuples
    rt.tuples.clear()
    bolt.emit(["joined"], anchors=[a, b])
    (_, joined), = rt.tuples
    assert set(joined.message_id) == set(a.message_id) | set(b.message_id)


def test_double_ack_is_ignored():
    rt = StubRuntime()
    g = FixedTargets()
    spout, _ = make(rt, "spout", SpoutOutputCollector, g)
    bolt, _ = make(rt, "bolt", BoltOutputCollector, g)
    spout.emit(["a"], msg_id=1)
    (_, a), = rt.tuples
    bolt.ack(a)
    bolt.ack(a)
    bolt.fail(a)
    assert len(rt.acker_msgs) == 2  # the init and one ack
    assert AckerTable().apply(rt.acker_msgs) == [(7, ACKED, next(iter(a.message_id)))]
