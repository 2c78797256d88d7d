"""The acker core: AckerTable (numpy) against the dict reference, and the XOR algebra."""

import random
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.worker.runtime.acker import (
    ACK, ACKED, FAIL, FAILED, INIT, RESET, RESET_TIMEOUT, ROTATIONS_KEPT, AckerTable, CompactTable, ReferenceAcker,
)

R = random.Random(7)


def rid():
    return R.getrandbits(64) | 2


def tree_messages(root, spout_task, n_edges):
    """A linear-ish tree: init XOR of the first edge; each ack removes one edge and adds the next."""
    edges = [R.getrandbits(64) or 1 for _ in range(n_edges)]
    msgs = [(INIT, root, edges[0], spout_task)]
    for i, e in enumerate(edges):
        child = edges[i + 1] if i + 1 < len(edges) else 0
        msgs.append((ACK, root, e ^ child, 0))
    return msgs


def test_complete_tree_acks_spout():
    t = AckerTable()
    root = rid()
    out = t.apply(tree_messages(root, 5, 4))
    assert out == [(5, ACKED, root)]
    assert len(t) == 0


def test_incomplete_tree_stays_pending():
    t = AckerTable()
    root = rid()
    out = t.apply(tree_messages(root, 5, 4)[:-1])
    assert out == []
    assert len(t) == 1
    assert t.pending(root)[1] == 5


def test_ack_before_init():
    t = AckerTable()
    root = rid()
    msgs = tree_messages(root, 9, 3)
    assert t.apply(msgs[1:]) == []  # acks first: spout task unknown, nothing reported
    assert t.pending(root) == (msgs[0][2], 0)
    assert t.apply(msgs[:1]) == [(9, ACKED, root)]


def test_fail_reports_at_once_and_wins_over_completion():
    t = AckerTable()
    root = rid()
    msgs = tree_messages(root, 3, 3)
    assert t.apply(msgs[:2] + [(FAIL, root, 0, 0)]) == [(3, FAILED, root)]
    assert len(t) == 0
    # in the compact table's vectorized batches a failure anywhere in the batch wins
    t2 = CompactTable()
    root2 = rid()
    assert t2.apply(tree_messages(root2, 3, 2) + [(FAIL, root2, 0, 0)]) == [(3, FAILED, root2)]


def test_fail_before_init_reported_when_init_arrives():
    t = AckerTable()
    root = rid()
    assert t.apply([(FAIL, root, 0, 0)]) == []
    assert t.apply([(INIT, root, 12345, 4)]) == [(4, FAILED, root)]


def test_reset_timeout_notifies_and_extends_life():
    t = AckerTable()
    root = rid()
    t.apply([(INIT, root, 777, 2)])
    t.rotate()
    t.rotate()
    assert t.apply([(RESET, root, 0, 0)]) == [(2, RESET_TIMEOUT, root)]
    t.rotate()
    t.rotate()
    assert t.pending(root) is not None  # survived: the reset moved it to the newest generation
    t.rotate()
    assert t.pending(root) is None


def test_rotation_drops_after_three_rotations():
    t = AckerTable()
    root = rid()
    t.apply([(INIT, root, 1, 1)])
    assert t.rotate() == 0 and t.rotate() == 0
    assert t.pending(root) is not None
    assert t.rotate() == 1
    assert t.pending(root) is None


@pytest.mark.parametrize("make", [lambda: AckerTable(young_max=64), lambda: CompactTable(capacity=16)],
                         ids=["generational", "compact"])
def test_many_trees_interleaved_in_small_batches_and_growth(make):
    t, ref = make(), ReferenceAcker()
    msgs = []
    roots = [rid() for _ in range(3000)]
    for i, r in enumerate(roots):
        m = tree_messages(r, 1 + i % 7, 1 + i % 5)
        if i % 10 == 0:
            m = m[:-1]  # leave every tenth incomplete
        msgs.extend(m)
    R.shuffle(msgs)
    out, ref_out = [], []
    for i in range(0, len(msgs), 53):
        out.extend(t.apply(msgs[i : i + 53]))
        ref_out.extend(ref.apply(msgs[i : i + 53]))
    assert sorted(out) == sorted(ref_out)
    assert len(out) == 2700
    assert len(t) == len(ref) == 300
    if isinstance(t, CompactTable):
        assert t.capacity >= 512  # grew from 16
    else:
        assert len(t.old) > 0  # the oldest trees moved to the compact table and still completed


def test_young_generation_stays_bounded():
    t = AckerTable(young_max=1000)
    for i in range(0, 20_000, 500):
        t.apply([(INIT, rid(), 99, 1) for _ in range(500)])
        assert len(t.young) <= 1000 + 500
    assert len(t) == 20_000 and len(t.old) >= 19_000


def test_memory_per_pending_entry_is_small():
    """A million pending trees live in the compact table: 22 bytes a slot, well under 64 an entry."""
    t = CompactTable()
    n = 1_000_000
    batch = []
    for _ in range(n):
        batch.append((INIT, rid(), 99, 1))
        if len(batch) == 10_000:
            t.apply(batch)
            batch = []
    assert len(t) == n
    assert t.nbytes / n <= 64


def test_the_young_dicts_estimate_is_within_a_fifth_of_what_its_entries_take():
    """``nbytes`` counts YOUNG_ENTRY_BYTES a young entry: against tracemalloc's measure of the young
    dict's growth at about its default size, roots included (the messages are gone before the
    measure), in the build under test."""
    n = 8000
    t = AckerTable(young_max=n + 10)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        t.apply([(INIT, rid(), rid(), 3) for _ in range(n)])
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(t.young) == n and len(t.old) == 0
    assert 0.8 <= t.nbytes / grown <= 1.2, (t.nbytes / n, grown / n)


msg_strategy = st.lists(
    st.tuples(
        st.sampled_from([INIT, ACK, ACK, ACK, FAIL, RESET]),
        st.integers(min_value=2, max_value=9),  # few roots: lots of collisions and repeats
        st.integers(min_value=0, max_value=(1 << 64) - 1),
        st.integers(min_value=1, max_value=4),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(msg_strategy, st.integers(min_value=1, max_value=8))
def test_table_matches_reference_one_message_at_a_time(messages, _):
    msgs = [(k, r, v if k <= ACK else 0, s if k == INIT else 0) for k, r, v, s in messages]
    t, ref = AckerTable(capacity=4), ReferenceAcker()
    got, want = [], []
    for m in msgs:
        got.extend(t.apply([m]))
        want.extend(ref.apply([m]))
    assert got == want
    assert len(t) == len(ref)


def test_young_trees_migrate_on_rotation_and_still_complete():
    t = AckerTable()
    root = rid()
    msgs = tree_messages(root, 5, 3)
    t.apply(msgs[:2])
    assert root in t.young
    t.rotate()
    assert root not in t.young and t.old.pending(root) is not None
    other = rid()  # new trees keep using the young dict while old ones wait in the compact table
    assert t.apply(tree_messages(other, 6, 2)) == [(6, ACKED, other)]
    assert t.apply(msgs[2:]) == [(5, ACKED, root)]
    assert len(t) == 0


def test_ack_before_init_while_compact_table_is_busy():
    t = AckerTable()
    t.apply([(INIT, rid(), 1, 1)])
    t.rotate()  # the compact table is not empty now
    root = rid()
    msgs = tree_messages(root, 3, 3)
    assert t.apply(msgs[1:]) == []  # acks first: not in either generation, created young
    assert root in t.young
    assert t.apply(msgs[:1]) == [(3, ACKED, root)]


@st.composite
def realistic_trees(draw):
    """Trees with unique roots (as real ones are): init, acks that may arrive first, maybe a fail
    or a reset; all messages shuffled together.

    A tree's edge ids are independent as random 64-bit ids are in practice: each has a marker bit
    of its own in the low byte, which no other id of the tree has, and random bits above it. So no
    part of a tree's messages XORs to 0 before all of them have arrived — with ids such as 1, 2 and 3
    it could, and then applying a batch at once (the compact table) and one message at a time (the
    reference) rightly disagree about a tree that completes in the middle of a batch."""
    n = draw(st.integers(min_value=1, max_value=12))
    msgs = []
    for i in range(n):
        root = 1000 + i
        markers = draw(st.lists(st.integers(min_value=0, max_value=7), min_size=1, max_size=4, unique=True))
        edges = [(1 << b) | (draw(st.integers(min_value=0, max_value=(1 << 56) - 1)) << 8) for b in markers]
        tree = [(INIT, root, edges[0], draw(st.integers(1, 3)))]
        for j, e in enumerate(edges):
            child = edges[j + 1] if j + 1 < len(edges) else 0
            tree.append((ACK, root, e ^ child, 0))
        if draw(st.integers(0, 5)) == 0:
            tree[-1] = (FAIL, root, 0, 0)  # the last tuple fails instead of being acked
        if draw(st.booleans()):
            tree = tree[: draw(st.integers(1, len(tree)))]  # incomplete
        if draw(st.integers(0, 5)) == 0:
            tree.insert(draw(st.integers(0, len(tree))), (RESET, root, 0, 0))
        msgs.extend(tree)
    return draw(st.permutations(msgs))


@settings(max_examples=300, deadline=None)
@given(realistic_trees(), st.integers(min_value=1, max_value=7), st.integers(min_value=1, max_value=6),
       st.integers(min_value=1, max_value=4))
def test_generational_table_matches_reference_with_rotations(msgs, batch, rotate_every, young_max):
    t, ref = AckerTable(young_max=young_max), ReferenceAcker()
    got, want = [], []
    for i in range(0, len(msgs), batch):
        chunk = msgs[i : i + batch]
        for m in chunk:
            want.extend(ref.apply([m]))
        got.extend(t.apply(chunk))
        if (i // batch) % rotate_every == rotate_every - 1:
            t.rotate()
            ref.rotate()
    # acked/failed outcomes agree exactly; RESET notifications only while the spout is known
    assert sorted(o for o in got if o[1] != RESET_TIMEOUT) == sorted(o for o in want if o[1] != RESET_TIMEOUT)
    # what is left (incomplete trees, stray messages after a tree ended) expires in both
    for _ in range(3):
        t.rotate()
        ref.rotate()
    assert len(t) == len(ref) == 0


def test_an_ack_before_init_that_moved_to_the_compact_table_still_meets_its_init():
    """New trees' INITs skip the compact table's lookup, except for roots known to be waiting
    there for their INIT (acks came first, then a rotation moved the entry)."""
    t = AckerTable()
    root = rid()
    msgs = tree_messages(root, 4, 3)
    assert t.apply(msgs[1:]) == []  # acks first
    t.rotate()
    assert root not in t.young and t.old.pending(root) is not None
    assert t._orphans == {root}
    assert t.apply(tree_messages(other := rid(), 6, 2)) == [(6, ACKED, other)]  # a new tree: young
    assert t.apply(msgs[:1]) == [(4, ACKED, root)]  # the INIT found the entry in the compact table
    assert len(t) == 0 and not t._orphans


def test_orphans_that_expire_are_forgotten():
    t = AckerTable()
    root = rid()
    t.apply(tree_messages(root, 4, 3)[1:])
    t.rotate()
    assert t._orphans == {root}
    for _ in range(ROTATIONS_KEPT):
        t.rotate()
    assert len(t) == 0 and not t._orphans


def test_the_young_dict_counts_values_outside_64_bits_and_floats_and_takes_integer_types():
    """A kind that is no integer, or an ack value or spout task that is not an unsigned 64-bit integer, is dropped and counted as
    the young dict takes the message (a float too: the compiled build's C conversion would truncate
    it); an integer type by ``__index__`` (numpy's) is taken. Both builds run this."""
    t = AckerTable()
    assert t.apply([(INIT, 5, np.uint64(7), np.int32(1)), (ACK, 5, 7, 0)]) == [(1, ACKED, 5)]
    bad = [(INIT, 6, 3.0, 1), (ACK, 7, -1, 0), (ACK, 8, 2**64, 0), (INIT, 10, 1, 2**65), (ACK, 11, "1", 0),
           ("1", 13, 1, 0), (1.0, 14, 1, 0)]  # a kind that is no integer
    assert t.apply(bad) == []
    assert t.invalid == len(bad) and len(t) == 0
    assert t.apply([(FAIL, 12, -1, 0), (INIT, 12, 4, 2)]) == [(2, FAILED, 12)]  # a FAIL's value is not read
