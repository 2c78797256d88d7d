"""Pure cores of managed state: the checkpoint coordinator in simulated time, a task's barrier and
deferred acks, KeyValueState's change tracking, key groups."""

from __future__ import annotations

import itertools

import pytest

from gale.stablehash import stable_hash
from gale.topology.keygroups import key_group, owned_groups, owner_index, owner_task
from gale.topology.state import KeyValueState, StateError, pack, unpack_value
from gale.worker.state.barrier import PROCESS, STALE, WAIT, CheckpointBarrier, HeldAcks
from gale.worker.state.coordinator import (
    COMMIT,
    COMMITTED,
    COMMITTING,
    INITSTATE,
    PREPARE,
    PREPARING,
    ROLLBACK,
    Committed,
    Coordinator,
    Emit,
    Save,
    TxState,
)

# ------------------------------------------------------------------------------ coordinator


def emits(actions):
    return [(a.txid, a.action) for a in actions if isinstance(a, Emit)]


def saves(actions):
    return [a.state for a in actions if isinstance(a, Save)]


def test_fresh_start_initstate_then_periodic_cycles():
    c = Coordinator(interval=1.0)
    out = c.start(TxState.from_record(None), now=0.0)
    assert emits(out) == [(0, INITSTATE)] and saves(out) == []
    assert c.tick(0.5) == []  # one step in flight at a time
    out = c.acked(0, INITSTATE, now=0.5)
    assert not c.recovering
    # the first PREPARE goes out at once (no checkpoint yet), saved before it is emitted
    assert out == [Save(TxState(1, PREPARING)), Emit(1, PREPARE)]
    out = c.acked(1, PREPARE, now=0.7)
    assert out == [Save(TxState(1, COMMITTING)), Emit(1, COMMIT)]
    out = c.acked(1, COMMIT, now=0.8)
    assert out[:2] == [Save(TxState(1, COMMITTED)), Committed(1, pytest.approx(0.3))]
    assert emits(out) == []
    assert c.tick(1.49) == []  # the interval counts from the last PREPARE (at 0.5)
    out = c.tick(1.5)
    assert out == [Save(TxState(2, PREPARING)), Emit(2, PREPARE)]


@pytest.mark.parametrize(
    "saved,steps",
    [
        # Storm's recovery rules, step by step until normal operation resumes
        (TxState(5, COMMITTED), [(5, INITSTATE, TxState(5, COMMITTED))]),
        (TxState(5, PREPARING), [(5, ROLLBACK, TxState(4, COMMITTED)), (4, INITSTATE, TxState(4, COMMITTED))]),
        (TxState(5, COMMITTING), [(5, COMMIT, TxState(5, COMMITTED)), (5, INITSTATE, TxState(5, COMMITTED))]),
    ],
)
def test_recovery_rules(saved, steps):
    c = Coordinator(interval=1.0)
    out = c.start(saved, now=10.0)
    recorded = saved
    for txid, action, after in steps:
        assert emits(out) == [(txid, action)]
        assert c.recovering
        out = c.acked(txid, action, now=10.0)
        if action != INITSTATE:  # a recovery step's ack records the state it leads to
            recorded = saves(out)[0]
        assert recorded == after
    assert not c.recovering
    # normal operation: the next checkpoint is the committed txid + 1
    assert emits(out) == [(recorded.txid + 1, PREPARE)]


@pytest.mark.parametrize("phase", [COMMITTED, PREPARING, COMMITTING])
@pytest.mark.parametrize("fail_at", range(4))
def test_a_failure_at_any_step_recovers_by_the_recorded_state(phase, fail_at):
    """Drive a run where the ``fail_at``-th emitted step fails; after it, the coordinator emits
    the recovery action of the state it recorded, and ends in normal operation."""
    c = Coordinator(interval=0.0, retry_secs=0.0)
    recorded = TxState(3, phase)
    out = c.start(recorded, 0.0)
    now = 0.0
    failed = False
    for step in range(12):
        (txid, action), = emits(out)
        for s in saves(out):
            recorded = s
        now += 1
        if step == fail_at and not failed:
            failed = True
            out = c.failed(txid, action, now)
            assert c.recovering
            # the step after a failure is the recovery action of the recorded state
            assert emits(out) == [(recorded.txid, recorded.next_action(True))]
        else:
            out = c.acked(txid, action, now)
    for s in saves(out):
        recorded = s
    assert failed and not c.recovering
    assert recorded == c.state


def test_stale_acks_and_fails_are_ignored():
    c = Coordinator(interval=1.0)
    c.start(TxState(2, COMMITTED), 0.0)
    assert c.acked(1, INITSTATE, 0.0) == [] and c.failed(2, PREPARE, 0.0) == []
    assert c.in_flight == (2, INITSTATE)


def test_repeated_failures_back_off():
    c = Coordinator(interval=1.0, retry_secs=5.0)
    out = c.start(TxState(2, PREPARING), 0.0)
    out = c.failed(2, ROLLBACK, 1.0)
    assert emits(out) == [(2, ROLLBACK)]  # the first retry is immediate
    out = c.failed(2, ROLLBACK, 2.0)
    assert out == [] and c.tick(6.9) == []
    assert emits(c.tick(7.0)) == [(2, ROLLBACK)]
    c.acked(2, ROLLBACK, 7.5)
    assert c.failures == 0 and c.state == TxState(1, COMMITTED)


def test_nothing_before_start():
    c = Coordinator(interval=1.0)
    assert c.tick(100.0) == []


def test_every_action_in_every_state_next_state_table():
    table = {
        (PREPARING, False): (TxState(5, COMMITTING), PREPARE),
        (PREPARING, True): (TxState(4, COMMITTED), ROLLBACK),
        (COMMITTING, False): (TxState(5, COMMITTED), COMMIT),
        (COMMITTING, True): (TxState(5, COMMITTED), COMMIT),
        (COMMITTED, False): (TxState(6, PREPARING), PREPARE),
        (COMMITTED, True): (TxState(5, COMMITTED), INITSTATE),
    }
    for (phase, recovering), (nxt, action) in table.items():
        s = TxState(5, phase)
        assert s.next_state(recovering) == nxt and s.next_action(recovering) == action
        assert TxState.from_record(s.to_record()) == s
    with pytest.raises(ValueError, match="malformed"):
        TxState.from_record({"txid": 1, "state": "BOGUS"})


# ------------------------------------------------------------------------------ barrier, deferred acks


def test_barrier_acts_once_every_input_delivered():
    b = CheckpointBarrier(3)
    assert [b.arrive(1, PREPARE) for _ in range(3)] == [WAIT, WAIT, PROCESS]
    # interleaved checkpoints of different (txid, action) are counted apart
    assert b.arrive(1, COMMIT) == WAIT and b.arrive(2, PREPARE) == WAIT
    assert b.arrive(1, COMMIT) == WAIT and b.arrive(1, COMMIT) == PROCESS
    assert b.arrive(2, PREPARE) == WAIT and b.arrive(2, PREPARE) == PROCESS


def test_barrier_stale_and_rollback():
    b = CheckpointBarrier(1)
    assert b.arrive(5, PREPARE) == PROCESS
    assert b.arrive(4, COMMIT) == STALE
    assert b.arrive(5, ROLLBACK) == PROCESS
    assert b.last_txid == 4
    assert b.arrive(4, INITSTATE) == PROCESS  # after ROLLBACK(5), INITSTATE(4) is current


def test_barrier_forgets_incomplete_older_checkpoints():
    b = CheckpointBarrier(2)
    assert b.arrive(1, PREPARE) == WAIT  # the other input task died before sending it
    assert b.arrive(1, ROLLBACK) == WAIT and b.arrive(1, ROLLBACK) == PROCESS
    assert b.arrive(2, PREPARE) == WAIT and b.arrive(2, PREPARE) == PROCESS
    assert (1, PREPARE) not in b.counts


def test_barrier_needs_an_input():
    with pytest.raises(ValueError):
        CheckpointBarrier(0)


def test_held_acks_follow_prepare_commit_rollback():
    d = HeldAcks()
    d.acked(10, 0b0011)
    d.acked(11, 0b0100)
    d.acked(10, 0b0110)  # the same tree again: one entry, the XOR of both
    assert d.prepare() == []
    d.acked(12, 7)  # after PREPARE: belongs to the next checkpoint
    assert d.commit() == {10: 0b0101, 11: 0b0100}
    assert d.commit() == {}
    d.prepare()
    d.acked(13, 1)
    assert d.rollback() == [12, 13] and len(d) == 0


def test_held_acks_of_the_checkpoint_s_own_tree_are_given_back_at_its_prepare():
    """A tuple anchored to a checkpoint (a persistent window's output, held until that PREPARE) is in
    the PREPARE's tree: its ack cannot wait for the commit the PREPARE's completion leads to."""
    d = HeldAcks()
    d.acked(10, 5)
    d.acked(99, 3)  # 99: the root of the PREPARE tuple
    d.acked(99, 1)
    assert d.prepare(release=[99]) == [(99, 2)]
    assert d.commit() == {10: 5}
    assert d.prepare(release=[99]) == []  # nothing held for it: nothing given back


# ------------------------------------------------------------------------------ KeyValueState


def test_state_tracks_puts_and_deletes_since_last_take():
    s = KeyValueState()
    s.put("a", 1)
    s.put("b", [1, 2])
    s.put("a", 2)
    s.delete("b")
    s.delete("never-there")
    dirty, deleted = s.take_changes()
    assert {k: unpack_value(v) for k, v in dirty.items()} == {"a": 2}
    assert deleted == {"b"}
    assert s.take_changes() == ({}, set())
    s.delete("a")
    s.put("c", {"x": 1})
    dirty, deleted = s.take_changes()
    assert set(dirty) == {"c"} and deleted == {"a"}
    assert dict(s) == {"c": {"x": 1}} and len(s) == 1 and "c" in s and s.get("a", 0) == 0


def test_put_snapshots_the_value():
    s = KeyValueState()
    v = [1]
    s.put("k", v)
    v.append(2)
    dirty, _ = s.take_changes()
    assert unpack_value(dirty["k"]) == [1]


def test_put_of_a_value_that_cannot_be_serialized_names_key_and_type():
    s = KeyValueState()
    with pytest.raises(StateError, match=r"key 'w' has type set, which cannot be serialized"):
        s.put("w", {1, 2})
    with pytest.raises(StateError, match="test_state_cores._Thing"):
        s.put("w", _Thing())
    with pytest.raises(StateError, match=r"state key \[1\] of type list"):
        s.put([1], 1)
    assert len(s) == 0 and s.take_changes() == ({}, set())


class _Thing:
    pass


@pytest.mark.parametrize("value", [0, -(1 << 63), (1 << 64) - 1, 1.5, float("inf"), True, None, "ascii", "é-ünïcode",
                                   "\ud800x", b"raw", (1, "a"), 1 << 70])
def test_every_put_value_reaches_the_checkpoint_packed_and_unpacks_to_itself_or_fails_at_the_put(value):
    """Scalars that certainly pack are packed when the checkpoint takes the changes, the rest at the
    put: either way a checkpoint sees bytes, and a value that cannot be stored fails at the put."""
    s = KeyValueState()
    try:
        expected = unpack_value(pack(value))
    except (TypeError, ValueError, OverflowError):
        with pytest.raises(StateError, match="cannot be serialized"):
            s.put("k", value)
        assert s.take_changes() == ({}, set())
        return
    s.put("k", value)
    s.put("k", value)
    changed, _ = s.changes()
    dirty, _ = s.take_changes()
    assert changed == dirty and set(dirty) == {"k"} and isinstance(dirty["k"], bytes)
    assert unpack_value(dirty["k"]) == expected
    assert s.get("k") == value


def test_put_of_a_key_this_task_does_not_own_is_refused():
    s = KeyValueState(owns=lambda k: None if k == "mine" else f"key {k!r} belongs elsewhere")
    s.put("mine", 1)
    with pytest.raises(StateError, match="'theirs' belongs elsewhere"):
        s.put("theirs", 1)


def test_reset_replaces_content_without_changes():
    s = KeyValueState()
    s.put("a", 1)
    s.reset({"b": 2})
    assert dict(s) == {"b": 2} and s.take_changes() == ({}, set())


# ------------------------------------------------------------------------------ key groups


@pytest.mark.parametrize("groups,tasks", [(128, 1), (128, 3), (128, 7), (10, 10), (8, 3), (128, 128), (4, 6)])
def test_owned_ranges_partition_the_key_groups(groups, tasks):
    seen = []
    for i in range(tasks):
        r = owned_groups(i, groups, tasks)
        assert all(owner_index(kg, groups, tasks) == i for kg in r)
        seen.extend(r)
    assert seen == list(range(groups))


def test_owner_task_routes_keys_and_tuples_alike():
    tasks = [4, 5, 6]
    for word in ("a", "the", "storm", "ÿ", 17, ("x", 1)):
        kg = key_group(word, 128)
        assert kg == stable_hash(word) % 128
        assert owner_task(word, 128, tasks) == tasks[kg * 3 // 128]
    # a tuple key hashes like the list of grouping values the fields grouping hashes
    assert key_group(("x", 1), 128) == stable_hash(["x", 1]) % 128


def test_rescaling_moves_whole_key_groups():
    words = [f"w{i}" for i in range(2000)]
    for before, after in itertools.product((1, 2, 3, 5), repeat=2):
        for w in words:
            kg = key_group(w, 128)
            assert kg in owned_groups(owner_index(kg, 128, before), 128, before)
            assert kg in owned_groups(owner_index(kg, 128, after), 128, after)


@pytest.mark.parametrize("step", [PREPARE, COMMIT])
def test_a_save_that_fails_recovers_from_the_state_recorded_before_it(step):
    """COMMITTING is the global commit point: if it could not be recorded, no COMMIT may go out."""
    c = Coordinator(interval=0.0, retry_secs=0.0)
    c.start(TxState(1, COMMITTED), 0.0)
    out = c.acked(1, INITSTATE, 0.0)
    assert out == [Save(TxState(2, PREPARING)), Emit(2, PREPARE)]
    if step == PREPARE:  # PREPARING(2) could not be written: COMMITTED(1) is the record
        out = c.save_failed(1.0)
        assert emits(out) == [(1, INITSTATE)]
    else:
        out = c.acked(2, PREPARE, 1.0)
        assert out == [Save(TxState(2, COMMITTING)), Emit(2, COMMIT)]
        out = c.save_failed(1.0)  # COMMITTING(2) not written: PREPARING(2) → roll back
        assert emits(out) == [(2, ROLLBACK)]
    assert c.recovering and c.recorded == c.state
