"""Acks packed for an acker task in another worker (``ACK_PACKS``): a flush of a worker's ack buffer
queues one bin per acker task elsewhere, 16 bytes an ack, and the receiver delivers exactly the
``(ACK, root, val, 0)`` messages the buffer held — in both builds, by the compiled reader and by
msgpack's. The equality of the two readers on junk and cut payloads is tested with every other
kind in ``tests/test_wire_fast.py``."""

from __future__ import annotations

from collections import deque

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.worker.outbox import Outbox
from gale.worker.runtime.acker import ACK, ACKED
from gale.worker.runtime.delivery import Delivery
from gale.worker.sender import ACK_PACK_LIMIT, TupleSender
from gale.worker.wire_kinds import ACK_PACK_BYTES, ACK_PACKS, ACKERS, MALFORMED, UNKNOWN_TASK
from tests.wire_support import DEST, U64, decode, decoder, drain_all, pack, transfer

u64 = st.integers(0, U64)


def packed(acks) -> bytes:
    return b"".join(r.to_bytes(8, "little") + v.to_bytes(8, "little") for r, v in acks)


def delivered(payload: bytes, fast: bool):
    dec = decoder()
    dec.fast = fast
    sink, seen, invalid = decode(payload, dec)
    return sink.items, seen, invalid


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(u64, u64, max_size=60), st.dictionaries(u64, u64, max_size=20))
def test_a_flush_packs_the_remote_acks_per_acker_task_and_they_arrive_as_the_buffer_held_them(buf, later):
    """Acker task 7 is elsewhere, task 5 here: the even roots' acks go on 5's queue as messages,
    the odd ones into one pack for 7 — one element per flush, one ack per root on arrival."""
    t = transfer()
    local = deque()
    delivery = Delivery({5: local}, t, [5, 7])
    expected, expected_local = [], []
    for b in (buf, later):
        delivery.flush_acks(dict(b))
        expected += [(7, (ACK, r, v, 0)) for r, v in b.items() if r % 2]
        expected_local += [(ACK, r, v, 0) for r, v in b.items() if not r % 2]
    assert list(local) == expected_local
    box = t.outboxes[DEST]
    assert box.queued() == sum(1 for b in (buf, later) if any(r % 2 for r in b))  # a pack a flush
    batches = drain_all(box)
    assert sum(n for _, n in batches) == len(expected)  # drain counts the acks
    for fast in (True, False):
        got = []
        for payload, n in batches:
            items, seen, invalid = delivered(payload, fast)
            assert seen == n and invalid == {}
            got += items
        assert got == expected


def test_a_pack_is_a_msgpack_bin_of_little_endian_roots_and_values_in_both_builds():
    box = Outbox()
    sender = TupleSender(msgpack.Packer(use_bin_type=True).pack, 1 << 20, lambda task: box)
    for n in (1, 15, 16, 4095):  # bin8 up to 255 bytes, bin16 past it
        acks = [(U64 - i, i) for i in range(n)]
        pack = sender.new_pack()
        for r, v in acks:
            assert sender.pack_ack(pack, 7, r, v) == 0
        sender.send_pack(7, pack)
        assert list(box.int_groups[(ACK_PACKS, 7)]) == [msgpack.packb(packed(acks))]
        assert box.clear() == n  # dropped: counted by its acks


def test_a_flush_past_the_pack_limit_goes_in_several_packs_in_order():
    t = transfer()
    delivery = Delivery({}, t, [7])
    n = ACK_PACK_LIMIT // ACK_PACK_BYTES + 3
    buf = {2 * i + 1: i for i in range(n)}
    delivery.flush_acks(dict(buf))
    box = t.outboxes[DEST]
    assert box.queued() == 2
    (payload, count), = drain_all(box)
    items, seen, invalid = delivered(payload, True)
    assert count == seen == n and invalid == {}
    assert items == [(7, (ACK, r, v, 0)) for r, v in buf.items()]


def test_an_ack_outside_64_bits_goes_as_an_acker_message_and_is_refused_as_one():
    """A root or value no acker table takes (a negative int, say) cannot be packed: it goes as the
    four-integer message it stands for, and the receiver counts it out of range as before."""
    t = transfer()
    sender = t.tuple_sender
    pack = sender.new_pack()
    sender.pack_ack(pack, 7, -1, 5)
    sender.pack_ack(pack, 7, 3, 4)
    sender.send_pack(7, pack)
    box = t.outboxes[DEST]
    assert [len(g) for g in (box.int_groups[(ACKERS, 7)], box.int_groups[(ACK_PACKS, 7)])] == [1, 1]
    (payload, n), = drain_all(box)
    items, seen, invalid = delivered(payload, True)
    assert (n, seen, invalid) == (2, 2, {"out_of_range": 1})
    assert items == [(7, (ACK, 3, 4, 0))]
    with pytest.raises(OverflowError):
        sender.pack_ack(sender.new_pack(), 7, 2**64, 1)  # past msgpack's integers, as send_ack raises


@pytest.mark.parametrize("fast", [True, False], ids=["compiled reader", "msgpack reader"])
def test_bad_bins_and_misrouted_packs_are_counted_ack_by_ack(fast):
    good = packed([(11, 12), (13, 14)])
    items, seen, invalid = delivered(pack([ACK_PACKS, 7, [b"x" * 15, 5, good]]), fast)
    assert items == [(7, (ACK, 11, 12, 0)), (7, (ACK, 13, 14, 0))]
    assert seen == 4 and invalid == {MALFORMED: 2}
    items, seen, invalid = delivered(pack([ACK_PACKS, 3, [good, good]]), fast)  # task 3 is a bolt's
    assert items == [] and seen == 4 and invalid == {UNKNOWN_TASK: 4}
    items, seen, invalid = delivered(pack([ACK_PACKS, 7, []], [ACK_PACKS, 7, "x"]), fast)
    assert items == [] and seen == 1 and invalid == {MALFORMED: 1}


def test_drop_oldest_counts_a_packs_acks():
    box = Outbox()
    sender = TupleSender(msgpack.Packer(use_bin_type=True).pack, 1 << 20, lambda task: box)
    pack = sender.new_pack()
    for i in range(5):
        sender.pack_ack(pack, 7, i, i)
    sender.send_pack(7, pack)
    sender.send_result(1, (ACKED, 9))
    assert box.queued() == 2
    assert box.drop_oldest(1) == 5 and box.queued() == 1
    assert box.clear() == 1 and box.queued() == 0
