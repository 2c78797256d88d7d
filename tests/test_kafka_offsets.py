"""Committed-offset bookkeeping of the Kafka spout, without I/O (kafka_offsets); its lag (kafka_lag) and
partition refresh (kafka_partitions)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.worker.connectors.kafka_offsets import (
    DROP,
    EMIT_NEW,
    EMIT_RETRY,
    RETRY,
    SKIP,
    UNKNOWN,
    EARLIEST,
    LATEST,
    OffsetTracker,
    RetryPolicy,
    new_partitions,
    plan_starts,
)

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def feed(tracker: OffsetTracker, offsets, now=0.0):
    return [tracker.on_record(o, now) for o in offsets]


def test_committed_is_the_lowest_unacked_offset():
    t = OffsetTracker(10)
    assert t.committed() == 10
    assert feed(t, range(10, 15)) == [EMIT_NEW] * 5
    assert t.committed() == 10
    for o in (11, 12, 14):
        assert t.ack(o)
    assert t.committed() == 10  # 10 still in flight pins it
    t.ack(10)
    assert t.committed() == 13
    t.ack(13)
    assert t.committed() == 15 == t.emit_position


def test_failed_offset_pins_the_commit_until_it_is_replayed_and_acked():
    t = OffsetTracker(0, RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=10.0))
    feed(t, range(5))
    for o in (0, 1, 3, 4):
        t.ack(o)
    assert t.fail(2, now=100.0) == RETRY
    assert t.committed() == 2
    # not due yet: nothing to seek to
    assert t.seek_target(100.5) is None
    assert t.seek_target(101.0) == 2
    t.seek(2)
    # re-reading from 2: 2 is re-emitted, 3 and 4 (acked) are skipped, 5 is new
    assert feed(t, [2, 3, 4, 5], now=101.0) == [EMIT_RETRY, SKIP, SKIP, EMIT_NEW]
    assert t.retried == 1
    assert t.committed() == 2
    t.ack(2)
    assert t.committed() == 5
    t.ack(5)
    assert t.committed() == 6


def test_a_failure_not_yet_due_is_skipped_when_re_read_and_sought_again_later():
    t = OffsetTracker(0, RetryPolicy(initial_delay=5.0))
    feed(t, range(4))
    t.fail(1, now=0.0)
    t.fail(2, now=3.0)  # due at 8
    t.ack(0)
    t.ack(3)
    assert t.seek_target(5.0) == 1
    t.seek(1)
    assert feed(t, [1, 2, 3], now=5.0) == [EMIT_RETRY, SKIP, SKIP]
    assert t.seek_target(8.0) == 2
    t.seek(2)
    assert feed(t, [2, 3], now=8.0) == [EMIT_RETRY, SKIP]
    t.ack(1)
    t.ack(2)
    assert t.committed() == 4 and t.pending() == 0


def test_retry_limit_drops_and_counts():
    t = OffsetTracker(0, RetryPolicy(initial_delay=0.0, limit=2))
    feed(t, [0, 1])
    t.ack(1)
    for attempt in range(2):
        assert t.fail(0, now=attempt) == RETRY
        t.seek(0)
        assert t.on_record(0, now=attempt) == EMIT_RETRY
    assert t.fail(0, now=5) == DROP
    assert t.dropped == 1
    assert t.committed() == 2  # a dropped offset no longer pins the commit


def test_limit_zero_never_retries():
    t = OffsetTracker(0, RetryPolicy(limit=0))
    feed(t, [0])
    assert t.fail(0, now=0) == DROP
    assert t.committed() == 1


def test_unknown_acks_and_fails_are_ignored():
    t = OffsetTracker(5)
    assert not t.ack(3)
    assert t.fail(99, now=0) == UNKNOWN
    assert t.committed() == 5


def test_gaps_in_the_log_are_skipped_and_failed_offsets_in_a_gap_are_lost():
    t = OffsetTracker(0, RetryPolicy(initial_delay=0.0))
    assert feed(t, [0, 1, 5]) == [EMIT_NEW] * 3  # 2..4 do not exist (compaction)
    assert t.emit_position == 6
    t.ack(0)
    t.ack(5)
    t.fail(1, now=0)
    t.seek(t.seek_target(0))
    # the log lost offset 1 meanwhile (retention): the re-read starts at 5
    assert t.on_record(5, now=0) == SKIP
    assert t.lost == 1
    assert t.committed() == 6


def test_records_before_the_fetch_position_are_skipped():
    t = OffsetTracker(10)
    assert feed(t, [8, 9, 10]) == [SKIP, SKIP, EMIT_NEW]


def test_reset_moves_on_and_counts_lost_failures():
    t = OffsetTracker(0, RetryPolicy(initial_delay=0.0))
    feed(t, range(4))
    t.fail(0, now=0)
    t.fail(1, now=0)
    assert t.reset(100) == 2
    assert t.lost == 2
    assert t.committed() == 2  # 2 and 3 are still in flight
    t.ack(2)
    t.ack(3)
    assert t.committed() == 100
    assert t.on_record(100, now=0) == EMIT_NEW


def test_retry_policy_backoff():
    p = RetryPolicy(initial_delay=0.1, multiplier=2.0, max_delay=1.0)
    assert [p.delay(n) for n in (1, 2, 3, 4, 5)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert p.delay(10_000) == 1.0
    assert RetryPolicy(initial_delay=0.5, multiplier=1.0).delay(7) == 0.5
    assert RetryPolicy(limit=-1).allows(10**9)
    assert RetryPolicy(limit=3).allows(3) and not RetryPolicy(limit=3).allows(4)


# ------------------------------------------------------------------------------------ properties


ops = st.lists(
    st.one_of(
        st.tuples(st.just("fetch"), st.integers(0, 3)),  # next record, possibly after a gap
        st.tuples(st.just("ack"), st.integers(0, 10_000)),
        st.tuples(st.just("fail"), st.integers(0, 10_000)),
        st.tuples(st.just("tick"), st.floats(0, 2)),
        st.tuples(st.just("retry"), st.just(0)),
    ),
    max_size=200,
)


class Model:
    """A log with fixed contents and the spout's consumer reading it."""

    def __init__(self, start, limit):
        self.t = OffsetTracker(start, RetryPolicy(initial_delay=0.5, multiplier=2.0, max_delay=2.0, limit=limit))
        self.now = 0.0
        self.log_offsets = []  # offsets that exist, in order
        self.next_new = start
        self.emitted = set()
        self.acked = set()
        self.dropped = set()

    def record_at(self, pos):
        """The first existing offset >= pos (extending the log as needed)."""
        for o in self.log_offsets:
            if o >= pos:
                return o
        return None


@settings(max_examples=300, deadline=None)
@given(start=st.integers(0, 50), limit=st.sampled_from([-1, 0, 2]), script=ops)
def test_committed_never_passes_an_unacked_offset(start, limit, script):
    m = Model(start, limit)
    t = m.t
    log_end = start  # next offset the producer would write
    previous = t.committed()
    for op, arg in script:
        if op == "fetch":
            # the consumer returns the next existing record at or after fetch_position
            while m.record_at(t.fetch_position) is None:
                log_end += arg  # a gap of `arg` missing offsets, then a record
                m.log_offsets.append(log_end)
                log_end += 1
            o = m.record_at(t.fetch_position)
            verdict = t.on_record(o, m.now)
            if verdict in (EMIT_NEW, EMIT_RETRY):
                m.emitted.add(o)
                assert verdict == EMIT_NEW or o not in m.acked
        elif op == "ack" and t.inflight:
            o = sorted(t.inflight)[arg % len(t.inflight)]
            assert t.ack(o)
            m.acked.add(o)
        elif op == "fail" and t.inflight:
            o = sorted(t.inflight)[arg % len(t.inflight)]
            if t.fail(o, m.now) == DROP:
                m.dropped.add(o)
        elif op == "tick":
            m.now += arg
        elif op == "retry":
            target = t.seek_target(m.now)
            if target is not None:
                t.seek(target)
        c = t.committed()
        # never beyond an in-flight or failed offset
        assert all(c <= o for o in t.inflight)
        assert all(c <= o for o in t.failed)
        # everything emitted below the committed offset is done (acked or dropped)
        assert all(o in m.acked or o in m.dropped for o in m.emitted if o < c)
        assert c <= t.emit_position
        # without out-of-range resets the resume point only moves forward
        assert c >= previous
        previous = c
    # finish: ack everything in flight and replay every failure until it is acked
    for _ in range(1000):
        if not t.pending():
            break
        for o in sorted(t.inflight):
            t.ack(o)
            m.acked.add(o)
        m.now += 10
        target = t.seek_target(m.now)
        if target is not None:
            t.seek(target)
        # read on up to the end of what was emitted (the consumer may already sit before a due offset)
        while t.fetch_position < t.emit_position:
            o = m.record_at(t.fetch_position)
            if o is None or o >= t.emit_position:
                break
            t.on_record(o, m.now)
    assert t.pending() == 0
    assert t.committed() == t.emit_position
    # every offset that exists below the end was emitted and is done
    assert {o for o in m.log_offsets if o < t.emit_position} <= m.emitted
    assert m.emitted <= m.acked | m.dropped


# ---------------------------------------------------------------------------- where a new assignment starts


A0, A1, A2, A3 = ("t", 0), ("t", 1), ("t", 2), ("t", 3)


def test_retained_partitions_keep_their_trackers_and_new_ones_start_where_committed():
    owned = frozenset({A0, A1, A2, A3})
    plan = plan_starts(owned, retained=frozenset({A0}), current=[A0, ("t", 9)],
                       stored={A1: 40, A2: None, A3: 5}, log_start={A1: 10, A2: 7, A3: 8}, policy=EARLIEST)
    assert plan.keep == {A0}
    assert plan.starts == {A1: 40, A2: 7, A3: 8}   # committed; never committed -> log start; below it -> log start
    assert plan.validate == {A1: 40}               # only a stored offset may lie past the high watermark
    assert plan.probe == frozenset() and plan.below_log_start == {A3: (5, 8)}


def test_latest_probes_the_high_watermark_for_partitions_without_a_usable_offset():
    owned = frozenset({A1, A2, A3})
    plan = plan_starts(owned, frozenset(), current=[], stored={A1: 40, A3: 5}, log_start={A1: 0, A2: 0, A3: 8},
                       policy=LATEST)
    assert plan.starts == plan.validate == {A1: 40}
    assert plan.probe == {A2, A3} and plan.below_log_start == {A3: (5, 8)}


def test_a_partition_owned_before_but_not_retained_starts_afresh():
    # owned in the previous generation, lost and won back during the rebalance: its in-flight state is stale
    assert new_partitions(frozenset({A0, A1}), frozenset({A1}), [A0, A1]) == [A0]
    plan = plan_starts(frozenset({A0, A1}), frozenset({A1}), [A0, A1], {A0: 3}, {A0: 0}, EARLIEST)
    assert plan.keep == {A1} and plan.starts == {A0: 3}


def test_an_unknown_reset_policy_is_named():
    with pytest.raises(ValueError, match="'middle'.*earliest, latest"):
        plan_starts(frozenset(), frozenset(), [], {}, {}, "middle")


@given(st.dictionaries(st.integers(0, 7), st.one_of(st.none(), st.integers(0, 100))),
       st.sets(st.integers(0, 7)), st.sets(st.integers(0, 7)), st.sampled_from([EARLIEST, LATEST]))
def test_every_owned_partition_is_kept_started_or_probed_exactly_once(stored, current, retained, policy):
    owned = frozenset(("t", p) for p in stored)
    cur, ret = [("t", p) for p in current], frozenset(("t", p) for p in retained)
    log_start = {tp: 50 for tp in new_partitions(owned, ret, cur)}
    plan = plan_starts(owned, ret, cur, {("t", p): o for p, o in stored.items()}, log_start, policy)
    parts = [*plan.keep, *plan.starts, *plan.probe]
    assert sorted(parts) == sorted(owned)
    assert all(o >= 50 for tp, o in plan.starts.items())  # nothing starts below the log start
    assert set(plan.validate) <= set(plan.starts)


def test_the_partitions_whose_consumer_state_is_forgotten_include_those_no_tracker_holds():
    """After a rewind (or a lost session) the spout holds no trackers, but its consumer still holds
    the partitions it read before, with their high watermarks. Taking one of them back with a
    checkpointed offset beyond that old high watermark (another task read on meanwhile) made the
    offset look past the end, and 'earliest' read the partition again: counted twice in an
    exactly-once run (seen in the chaos suite). Every held partition the assignment does not keep is
    forgotten — including those it owns again."""
    from kafka import TopicPartition

    from gale.worker.connectors.kafka_offsets import stale_partitions

    held = {TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 3)}
    assert stale_partitions(held, keep=frozenset()) == [("t", 0), ("t", 1), ("u", 3)]
    assert stale_partitions(held, keep=frozenset({("t", 1)})) == [("t", 0), ("u", 3)]
    assert stale_partitions(set(), keep=frozenset({("t", 1)})) == []


def test_lag_is_the_high_watermark_minus_the_committed_offset_of_each_owned_partition():
    from gale.worker.connectors.kafka_lag import partition_lag

    pinned = OffsetTracker(10)
    feed(pinned, range(10, 13))
    pinned.ack(11)  # 10 in flight pins the committed offset
    caught_up = OffsetTracker(7)
    unfetched = OffsetTracker(0)
    marks = {("t", 0): 20, ("t", 1): 5, ("t", 2): None}  # t-1's watermark is stale: never below 0
    lag = partition_lag({("t", 0): pinned, ("t", 1): caught_up, ("t", 2): unfetched}, lambda t, p: marks[(t, p)])
    assert lag == {"t/0": 10.0, "t/1": 0.0}


def test_refreshed_partitions_take_what_the_metadata_lists_and_keep_the_rest():
    from gale.worker.connectors.kafka_partitions import refreshed_partitions

    class Metadata:
        def partitions_for_topic(self, topic):
            return {"grew": {2, 0, 1}, "same": {0}, "unlisted": None}[topic]

    class Log:
        def __init__(self):
            self.changes = []

        def info(self, event, **fields):
            self.changes.append((event, fields))

    current = {"grew": [0], "same": [0], "unlisted": [0, 1]}
    log = Log()
    out = refreshed_partitions(Metadata(), ["grew", "same", "unlisted"], current, log)
    assert out == {"grew": [0, 1, 2], "same": [0], "unlisted": [0, 1]}
    assert current == {"grew": [0], "same": [0], "unlisted": [0, 1]}  # a new dict: the member thread reads the old
    assert log.changes == [("kafka-partitions-changed", {"topic": "grew", "before": 1, "after": 3})]
