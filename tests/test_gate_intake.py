"""The checkpoint layer's data path (``Checkpointing.intake``) as pure logic: which queued tuples
reach the body, in what order, which are acked as stale and which failed when the body raises.
The layer is built without an executor (a stand-in holds the stale-tuple count): only its
per-task tables are filled in."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.topology.state import CHECKPOINT_STREAM
from gale.topology.tuple import Fields, new_tracked, new_tuple
from gale.worker.runtime.anchoring import generation_range
from gale.worker.state.gate import Checkpointing

TASK = 7
DATA = Fields(["n"], "split:default")
CHECKPOINT = Fields(["txid", "action"], f"$checkpointspout:{CHECKPOINT_STREAM}")
LO, HI = generation_range(3)
OLD_LO, _ = generation_range(2)


class Verdicts:
    """A task's forwarder: what the layer acked and failed, by the tuples' first value."""

    def __init__(self):
        self.acked: list = []
        self.failed: list = []

    def ack(self, tup):
        self.acked.append(tup.values[0])

    def fail(self, tup):
        self.failed.append(tup.values[0])


class Body:
    """A body's intake: takes up to ``room`` tuples from the front (all when None); raises after
    taking ``raise_after`` of one call's tuples."""

    def __init__(self, room=None, raise_after=None):
        self.room, self.raise_after = room, raise_after
        self.executed: list = []

    def __call__(self, task, queue, budget):
        n = min(len(queue), budget, self.room if self.room is not None else budget)
        for i in range(n):
            if self.raise_after is not None and i == self.raise_after:
                raise RuntimeError("a body's bug")
            self.executed.append(queue.popleft().values[0])
        if self.room is not None:
            self.room -= n
        return n


def layer(body, filter_data=True):
    executor = SimpleNamespace(stats=SimpleNamespace(extra={"state_stale_tuples": 0}))
    gate = Checkpointing(executor=executor, participants=[], exactly_once=filter_data, filter_data=filter_data)
    gate.inner[TASK] = body
    gate.forwarders[TASK] = Verdicts()
    gate.ready[TASK] = True
    gate.held[TASK] = []
    gate.range[TASK] = (LO, HI)
    return gate


def data(n, root=LO + 1):
    return new_tracked([n], DATA, 1, root, 5, 0)


def stale(n):
    return data(n, root=OLD_LO + 9)


def test_current_data_goes_to_the_body_in_order_and_stale_data_is_acked_without_executing():
    body = Body()
    gate = layer(body)
    queue = deque([stale(0), data(1), data(2), stale(3), data(4), stale(5), stale(6), data(7)])
    assert gate.intake(TASK, queue, 100) == 8
    assert body.executed == [1, 2, 4, 7]
    assert gate.forwarders[TASK].acked == [0, 3, 5, 6]
    assert gate.stale == 4 and gate.executor.stats.extra["state_stale_tuples"] == 4 and not queue


def test_a_tuple_of_several_trees_is_current_only_when_every_tree_is():
    body = Body()
    gate = layer(body)
    mixed = new_tuple([1], DATA, 1, {LO + 1: 3, OLD_LO + 1: 4})
    both = new_tuple([2], DATA, 1, {LO + 1: 3, LO + 2: 4})
    untracked = new_tuple([3], DATA, 1, None)
    assert gate.intake(TASK, deque([mixed, both, untracked]), 100) == 3
    assert body.executed == [2, 3] and gate.forwarders[TASK].acked == [1]


def test_the_budget_bounds_what_is_taken_and_the_rest_stays_queued_in_order():
    body = Body()
    gate = layer(body)
    queue = deque([data(i) for i in range(10)])
    assert gate.intake(TASK, queue, 4) == 4
    assert body.executed == [0, 1, 2, 3]
    assert [t.values[0] for t in queue] == [4, 5, 6, 7, 8, 9]


def test_a_full_body_leaves_the_rest_first_in_the_queue():
    body = Body(room=3)
    gate = layer(body)
    queue = deque([data(0), stale(1), data(2), data(3), data(4), data(5)])
    assert gate.intake(TASK, queue, 100) == 4  # one stale tuple acked and three taken
    assert body.executed == [0, 2, 3]
    assert [t.values[0] for t in queue] == [4, 5]
    assert gate.intake(TASK, queue, 100) == 0
    assert len(queue) == 2


def test_a_body_that_raises_fails_what_it_was_handed_and_did_not_take_and_nothing_after_it():
    body = Body(raise_after=2)
    gate = layer(body)
    queue = deque([data(0), data(1), data(2), data(3), stale(4), data(5)])
    with pytest.raises(RuntimeError, match="a body's bug"):
        gate.intake(TASK, queue, 100)
    assert body.executed == [0, 1]
    assert gate.forwarders[TASK].failed == [2, 3]  # handed (the run before the stale tuple), not taken
    assert [t.values[0] for t in queue] == [4, 5]


def test_data_before_the_state_is_loaded_is_held_in_order():
    body = Body()
    gate = layer(body)
    gate.ready[TASK] = False
    queue = deque([data(0), data(1)])
    assert gate.intake(TASK, queue, 100) == 2
    assert body.executed == [] and [t.values[0] for t in gate.held[TASK]] == [0, 1]


def test_a_parked_checkpoint_stops_the_data_behind_it():
    body = Body()
    gate = layer(body)
    gate.parked[TASK] = (new_tracked([1, "COMMIT"], CHECKPOINT, 0, LO, 1, 0), 3)
    queue = deque([data(0)])
    assert gate.intake(TASK, queue, 100) == 0
    assert body.executed == [] and len(queue) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=40), st.integers(1, 50),
       st.one_of(st.none(), st.integers(0, 40)), st.booleans())
def test_every_queued_tuple_is_executed_acked_or_left_in_order(kinds, budget, room, filter_data):
    """Whatever the mix, the budget and the body's room: each tuple taken from the queue is either
    executed (current data, in queue order) or acked as stale, and the rest stay queued in order."""
    body = Body(room=room)
    gate = layer(body, filter_data=filter_data)
    tuples = [stale(i) if old else data(i) for i, (old, _) in enumerate(kinds)]
    queue = deque(tuples)
    done = gate.intake(TASK, queue, budget)
    acked = gate.forwarders[TASK].acked
    left = [t.values[0] for t in queue]
    assert done == len(body.executed) + len(acked) <= budget
    assert sorted(body.executed + acked) == list(range(done)) and left == list(range(done, len(tuples)))
    assert body.executed == sorted(body.executed)
    if filter_data:
        assert all(not kinds[i][0] for i in body.executed) and all(kinds[i][0] for i in acked)
    else:
        assert acked == []
