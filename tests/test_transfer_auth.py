"""Authenticated worker traffic, the pure parts: sealing and opening batches, the replay guard,
validation of every message kind, and the acker's own defence against out-of-range values.

The same code runs against real workers in ``tests/test_forged_traffic.py``."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import random

import msgpack
import pytest

from gale.topology.tuple import Fields, Tuple
from gale.worker.batch_auth import (
    BAD_MAC, HEADER, MALFORMED, REPLAYED, STALE, Opener, ReplayGuard, Sealer,
)
from gale.worker.runtime.acker import ACK, ACKED, FAIL, FAILED, INIT, RESET, AckerTable, ReferenceAcker
from gale.worker.transfer import ACKER, RESULT, TUPLE, Transfer
from gale.worker.wire import BatchDecoder
from gale.zkserver import free_port
from tests.waiting import eventually

SECRET = b"0123456789abcdef0123456789abcdef"
RECEIVER = "sup1-127.0.0.1:6700"


class Clock:
    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def opener(floor_ms: int = 0, max_sessions: int = 1024, receiver: str = RECEIVER) -> Opener:
    return Opener(SECRET, receiver, ReplayGuard(floor_ms, max_sessions))


# ---------------------------------------------------------------------------- sealing and opening


def test_a_sealed_batch_opens_once_at_its_receiver_only():
    sealer = Sealer(SECRET, clock=Clock())
    frames = sealer.seal(RECEIVER, b"payload")
    assert opener().open(frames) == (None, b"payload")
    rx = opener()
    assert rx.open(frames) == (None, b"payload")
    assert rx.open(frames) == (REPLAYED, b"")                      # verbatim replay
    assert opener(receiver="sup2-127.0.0.1:6700").open(frames)[0] == BAD_MAC  # sealed for another worker


@pytest.mark.parametrize("key", [b"wrong-secret", b"topology-1-1700000000", os.urandom(32)],
                         ids=["wrong-secret", "the-topology-id", "random-32-bytes"])
def test_a_batch_sealed_with_another_key_is_refused(key):
    frames = Sealer(key, clock=Clock()).seal(RECEIVER, b"x")
    assert opener().open(frames) == (BAD_MAC, b"")


def test_tampering_with_any_frame_is_refused():
    frames = Sealer(SECRET, clock=Clock()).seal(RECEIVER, b"payload")
    header, mac, payload = frames
    flipped_seq = header[:17] + bytes([header[17] ^ 1]) + header[18:]
    for bad in ([header, mac, payload + b"!"], [flipped_seq, mac, payload],
                [header, bytes([mac[0] ^ 1]) + mac[1:], payload]):
        assert opener().open(bad)[0] == BAD_MAC


@pytest.mark.parametrize("frames", [
    [], [b"x"], [b"a", b"b"], [b"a", b"b", b"c", b"d"],
    [b"\x01" + b"\0" * 31, b"\0" * 32, b"p"],                   # header one byte short
    [b"\x01" + b"\0" * 32, b"\0" * 31, b"p"],                   # MAC one byte short
    [b"\x02" + b"\0" * 32, b"\0" * 32, b"p"],                   # unknown version
])
def test_malformed_frames_are_refused_before_any_mac_work(frames):
    assert opener().open(frames) == (MALFORMED, b"")


def test_the_mac_covers_version_session_sequence_stamp_receiver_and_payload():
    clock = Clock()
    sealer = Sealer(SECRET, clock=clock, session=b"S" * 16)
    header, mac, payload = sealer.seal(RECEIVER, b"data")
    assert HEADER.unpack(header) == (1, b"S" * 16, 1, int(clock.t * 1000))
    expected = hmac.new(SECRET, b"gale-batch-v1\0" + RECEIVER.encode() + b"\0" + header + b"data",
                        hashlib.sha256).digest()
    assert mac == expected and payload == b"data"


def test_sequence_numbers_increase_and_stamps_never_go_back():
    clock = Clock()
    sealer = Sealer(SECRET, clock=clock)
    first = HEADER.unpack(sealer.seal(RECEIVER, b"a")[0])
    clock.t -= 3600  # the wall clock steps back an hour
    second = HEADER.unpack(sealer.seal("elsewhere:1", b"b")[0])
    assert second[2] == first[2] + 1 and second[3] == first[3]


def test_no_secret_no_transfer():
    for make in (lambda: Sealer(b""), lambda: Opener(b"", RECEIVER, ReplayGuard(0))):
        with pytest.raises(ValueError, match="secret"):
            make()
    with pytest.raises(ValueError, match="no fallback key"):
        Transfer(bind_host="127.0.0.1", port=1, secret=b"", deliver=lambda *_: True, fields_for=lambda *_: None)


# ---------------------------------------------------------------------------- replay guard


def test_replay_guard_takes_each_sequence_once_and_in_order():
    g = ReplayGuard(floor_ms=1000)
    assert g.check(b"A", 1, 1000) is None
    assert g.check(b"A", 1, 1000) == REPLAYED
    assert g.check(b"A", 5, 1001) is None        # gaps are fine (batches for other workers)
    assert g.check(b"A", 3, 1001) == REPLAYED    # older than the last one taken
    assert g.check(b"A", 6, 900) is None         # a known session is judged by sequence, not stamp


def test_a_restarted_receiver_refuses_batches_sealed_before_it_started():
    """The new process remembers nothing; its floor (start time) refuses what was captured before."""
    clock = Clock()
    sealer = Sealer(SECRET, clock=clock)
    before = sealer.seal(RECEIVER, b"captured")
    assert opener(floor_ms=int(clock.t * 1000) - 5000).open(before)[0] is None  # the old receiver took it
    clock.t += 2
    restarted = opener(floor_ms=int(clock.t * 1000))
    assert restarted.open(before) == (STALE, b"")
    # the live sender's next batch (sealed after the restart) is accepted at once
    assert restarted.open(sealer.seal(RECEIVER, b"next"))[0] is None


def test_a_restarted_sender_is_accepted_at_once():
    clock = Clock()
    rx = opener(floor_ms=int(clock.t * 1000))
    old = Sealer(SECRET, clock=clock)
    for _ in range(3):
        assert rx.open(old.seal(RECEIVER, b"x"))[0] is None
    clock.t += 1
    new = Sealer(SECRET, clock=clock)  # a new process: new session, sequence from 1 again
    assert rx.open(new.seal(RECEIVER, b"y")) == (None, b"y")


def test_replay_guard_memory_is_bounded_and_forgotten_sessions_stay_refused():
    g = ReplayGuard(floor_ms=0, max_sessions=3)
    for i, s in enumerate([b"A", b"B", b"C"]):
        assert g.check(s, 1, 100 + i) is None
    assert g.check(b"A", 2, 110) is None          # A is now the most recent; B the least
    assert g.check(b"D", 1, 120) is None          # B is forgotten: the floor rises past its last stamp
    assert len(g) == 3 and g.floor_ms == 102
    assert g.check(b"B", 1, 101) == STALE         # B's old batches stay refused
    assert g.check(b"B", 2, 130) is None          # a live B (fresh stamps) comes back
    assert len(g) == 3


def test_replay_guard_against_a_model_over_random_histories():
    """Random histories of fresh batches and replays: every accepted (session, seq) is new, each
    session's accepted seqs increase, a session's first batch at or above the floor is accepted,
    and the table never outgrows its bound."""
    rng = random.Random(7)
    for _ in range(200):
        g = ReplayGuard(floor_ms=1000, max_sessions=rng.randint(1, 4))
        taken: dict[bytes, int] = {}
        stamps = {s: 1000 + rng.randint(-5, 5) for s in (b"a", b"b", b"c", b"d", b"e")}
        seqs = dict.fromkeys(stamps, 0)
        for _ in range(60):
            s = rng.choice(list(stamps))
            if rng.random() < 0.3 and seqs[s]:
                seq = rng.randint(1, seqs[s])  # a replay of something sent before
            else:
                seqs[s] += rng.randint(1, 3)
                stamps[s] += rng.randint(0, 3)
                seq = seqs[s]
            first_fresh = s not in taken and stamps[s] >= g.floor_ms
            verdict = g.check(s, seq, stamps[s])
            if first_fresh:
                assert verdict is None
            if verdict is None:
                assert seq > taken.get(s, 0)
                taken[s] = seq
            assert len(g) <= g.max_sessions


# ---------------------------------------------------------------------------- message validation

WORDS = Fields(["word"], "split:default")
PAIR = Fields(["word", "count"], "count:default")
ROLES = {3: TUPLE, 4: TUPLE, 7: ACKER, 1: RESULT}


def fields_for(component, stream):
    return {("split", "default"): WORDS, ("count", "default"): PAIR}.get((component, stream))


def run(decoder, payload):
    delivered: list = []
    seen, refused = decoder.decode(payload, lambda task, obj: delivered.append((task, obj)) or True)
    assert refused == 0
    return delivered, seen


#: the streams each bolt task's component subscribes to
INPUTS = {3: {("split", "default")}, 4: {("count", "default")}}


def decode(*messages):
    decoder = BatchDecoder(fields_for, ROLES, INPUTS)
    payload = b"".join(msgpack.packb(m, use_bin_type=True) for m in messages)
    delivered, seen = run(decoder, payload)
    return delivered, seen, {k: v for k, v in decoder.invalid.items() if v}


GOOD = [
    [TUPLE, 3, "split", "default", 2, ["cow"], [5, 6], 0],
    [TUPLE, 4, "count", "default", 9, ["cow", 1], [], 0],
    [TUPLE, 3, "split", "default", 2, ["moon"], [1, 2, 2**64 - 1, 0], 0],
    [ACKER, 7, INIT, 2**64 - 1, 12, 1],
    [ACKER, 7, ACK, 5, 0, 0],
    [ACKER, 7, FAIL, 5, 0, 0],
    [ACKER, 7, RESET, 5, 0, 0],
    [RESULT, 1, ACKED, 5],
    [RESULT, 1, FAILED, 0],
]


def test_valid_messages_of_every_kind_are_delivered_as_the_runtime_expects_them():
    delivered, seen, invalid = decode(*GOOD)
    assert seen == len(GOOD) and invalid == {}
    (t1, tup), (t2, tup2), (t3, tup3) = delivered[:3]
    assert (t1, tup.values, tup.fields, tup.task, tup.message_id) == (3, ["cow"], WORDS, 2, {5: 6})
    assert (t2, tup2.values, tup2.message_id) == (4, ["cow", 1], None)
    assert tup3.message_id == {1: 2, 2**64 - 1: 0}
    assert delivered[3:] == [(7, (INIT, 2**64 - 1, 12, 1)), (7, (ACK, 5, 0, 0)), (7, (FAIL, 5, 0, 0)),
                             (7, (RESET, 5, 0, 0)), (1, (ACKED, 5)), (1, (FAILED, 0))]


BAD = [
    # (message, reason)
    ([9, 3], "unknown_kind"),
    ([-1, 3], "unknown_kind"),
    ([True, 3, "split", "default", 2, ["x"], []], "unknown_kind"),    # a bool is not a kind
    ([0.0, 3, "split", "default", 2, ["x"], []], "unknown_kind"),
    (["0", 3], "unknown_kind"),
    ([TUPLE, 99, "split", "default", 2, ["x"], [], 0], "unknown_task"),  # not hosted here
    ([TUPLE, 7, "split", "default", 2, ["x"], [], 0], "unknown_task"),   # a tuple for the acker
    ([ACKER, 3, ACK, 5, 1, 0], "unknown_task"),                       # an ack for a bolt
    ([RESULT, 7, ACKED, 5], "unknown_task"),                          # a verdict for the acker
    ([TUPLE, "3", "split", "default", 2, ["x"], [], 0], "malformed"),
    ([TUPLE, True, "split", "default", 2, ["x"], [], 0], "malformed"),
    ({"kind": 0}, "malformed"),
    ([TUPLE], "malformed"),
    ("string", "malformed"),
    (5, "malformed"),
    ([TUPLE, 3, "split", "default", 2, ["x"], []], "malformed"),          # one field short (no lineage)
    ([TUPLE, 3, "split", "default", 2, ["x"], [], 0, 1], "malformed"),   # one too many
    ([TUPLE, 3, b"split", "default", 2, ["x"], [], 0], "malformed"),
    ([TUPLE, 3, "split", "default", "2", ["x"], [], 0], "malformed"),
    ([TUPLE, 3, "split", "default", 2, "x", [], 0], "malformed"),
    ([TUPLE, 3, "split", "default", 2, {"word": "x"}, [], 0], "malformed"),
    ([TUPLE, 3, "split", "default", 2, ["x", "y"], [], 0], "malformed"),  # wrong number of fields
    ([TUPLE, 3, "split", "default", 2, ["x"], [5], 0], "malformed"),     # odd anchor list
    ([TUPLE, 3, "split", "default", 2, ["x"], {"5": 6}, 0], "malformed"),
    ([TUPLE, 3, "split", "default", 2, ["x"], [5, 6.0], 0], "malformed"),
    ([TUPLE, 3, "split", "default", 2, ["x"], [True, 6], 0], "malformed"),
    ([TUPLE, 3, "split", "default", 2, ["x"], [-5, 6], 0], "out_of_range"),
    ([TUPLE, 3, "split", "default", 2, ["x"], [5, -6], 0], "out_of_range"),
    ([TUPLE, 3, "split", "default", -2, ["x"], [], 0], "out_of_range"),
    ([TUPLE, 3, "split", "default", 2**40, ["x"], [], 0], "out_of_range"),
    ([TUPLE, 3, "split", "errors", 2, ["x"], [], 0], "unknown_stream"),
    ([TUPLE, 3, "nosuch", "default", 2, ["x"], [], 0], "unknown_stream"),
    # declared, but task 3's component does not subscribe to it (a task id reused by another component)
    ([TUPLE, 3, "count", "default", 2, ["x", 1], [], 0], "not_subscribed"),
    ([TUPLE, 3, "split", "default", 2, ["x"], [], "7"], "malformed"),     # lineage of the wrong type
    ([ACKER, 7, ACK, -1, 1, 0], "out_of_range"),                     # the worker killer
    ([ACKER, 7, ACK, -(2**63), 1, 0], "out_of_range"),
    ([ACKER, 7, ACK, 5, -1, 0], "out_of_range"),
    ([ACKER, 7, INIT, 5, 1, -3], "out_of_range"),
    ([ACKER, 7, INIT, 5, 1, 2**40], "out_of_range"),
    ([ACKER, 7, ACK, 5.0, 1, 0], "malformed"),
    ([ACKER, 7, ACK, "5", 1, 0], "malformed"),
    ([ACKER, 7, ACK, 5, None, 0], "malformed"),
    ([ACKER, 7, ACK, 5, 1, False], "malformed"),
    ([ACKER, 7, ACK, 5, 1], "malformed"),
    ([ACKER, 7, 9, 5, 1, 0], "unknown_kind"),
    ([ACKER, 7, -1, 5, 1, 0], "unknown_kind"),
    ([RESULT, 1, ACKED, -5], "out_of_range"),
    ([RESULT, 1, 7, 5], "unknown_kind"),
    ([RESULT, 1, ACKED, 5.5], "malformed"),
    ([RESULT, 1, ACKED], "malformed"),
]


@pytest.mark.parametrize("message,reason", BAD, ids=[f"{i}-{r}" for i, (_, r) in enumerate(BAD)])
def test_each_invalid_message_is_dropped_under_its_reason_and_the_rest_delivered(message, reason):
    delivered, seen, invalid = decode(GOOD[0], message, GOOD[3])
    assert seen == 3
    assert invalid == {reason: 1}
    assert [t for t, _ in delivered] == [3, 7]


def test_every_bad_message_in_one_batch_is_counted_and_nothing_bad_is_delivered():
    delivered, seen, invalid = decode(*[m for m, _ in BAD], *GOOD)
    expected: dict[str, int] = {}
    for _, reason in BAD:
        expected[reason] = expected.get(reason, 0) + 1
    assert seen == len(BAD) + len(GOOD) and invalid == expected and len(delivered) == len(GOOD)


def test_a_payload_that_is_not_msgpack_loses_the_rest_of_its_batch_only():
    decoder = BatchDecoder(fields_for, ROLES)
    good = msgpack.packb(GOOD[0])
    delivered, seen = run(decoder, good + b"\xc1" + good)  # 0xc1 is never valid msgpack
    assert [t for t, _ in delivered] == [3] and decoder.invalid["undecodable"] == 1
    delivered, _ = run(decoder, msgpack.packb([TUPLE, 3, "split", "default", 2, [b"\xff".decode("latin-1")], [], 0])
                       .replace(b"\xc3\xbf", b"\xff\xff"))  # invalid UTF-8 in a str
    assert delivered == [] and decoder.invalid["undecodable"] == 2


def test_random_junk_never_raises_and_never_delivers_an_out_of_range_value():
    rng = random.Random(11)
    atoms = [0, 1, 3, 7, -1, 2**63, 2**64 - 1, -(2**63), 1.5, True, None, "split", "default", b"x", [], {}]
    decoder = BatchDecoder(fields_for, ROLES)
    for _ in range(3000):
        msg = [rng.choice([0, 1, 2, 3, -1])] + [rng.choice(atoms) for _ in range(rng.randint(0, 7))]
        delivered, _ = run(decoder, msgpack.packb(msg))
        for task, obj in delivered:
            assert task in ROLES
            if isinstance(obj, Tuple):
                assert all(type(x) is int and 0 <= x < 2**64 for x in itertools.chain(*(obj.message_id or {}).items()))
            else:
                assert all(type(x) is int and 0 <= x < 2**64 for x in obj)


# ---------------------------------------------------------------------------- acker defence in depth


def test_acker_drops_out_of_range_values_instead_of_crashing_when_trees_move_to_numpy():
    """Were a negative root to reach the acker, the next rotation used to raise OverflowError in the
    executor thread (the issue: a worker dying ~20 s after a forged message)."""
    table, ref = AckerTable(young_max=4), ReferenceAcker()
    good = [(INIT, 5, 7, 1), (INIT, 6, 1, 1), (INIT, 8, 2, 1)]
    bad = [(ACK, -1, 3, 0), (ACK, 2**64, 3, 0), (INIT, 9, -4, 1), (INIT, 11, 3, 2**40)]
    assert table.apply(good + bad) == ref.apply(good) == []
    table.rotate()  # young → compact arrays: the step that used to raise
    ref.rotate()
    assert table.invalid == len(bad) and len(table) == len(ref) == 3
    later = [(ACK, 5, 7, 0), (ACK, -7, 1, 0), (ACK, 6, -1, 0), (ACK, 6, 1, 0), (FAIL, 8, 0, 0)]
    assert sorted(table.apply(later)) == sorted(ref.apply([m for m in later if m[1] >= 0 and m[2] >= 0])) \
        == [(1, ACKED, 5), (1, ACKED, 6), (1, FAILED, 8)]
    assert table.invalid == len(bad) + 2 and len(table) == 0


# ---------------------------------------------------------------------------- over real sockets


def _transfer(port, secret, delivered, roles=None):
    fields = Fields(["v"], "src:default")
    t = Transfer(bind_host="127.0.0.1", port=port, secret=secret, roles=roles or {7: TUPLE},
                 deliver=lambda task, payload: delivered.append((task, payload)) or True,
                 fields_for=lambda c, s: fields if (c, s) == ("src", "default") else None)
    t.start()
    return t, fields


def test_transfers_deliver_between_members_and_count_every_refusal():
    import zmq

    recv_port, a_port, b_port = free_port(), free_port(), free_port()
    delivered: list = []
    receiver, fields = _transfer(recv_port, SECRET, delivered)
    member, _ = _transfer(a_port, SECRET, [])
    intruder, _ = _transfer(b_port, b"guessed-secret", [])
    ctx = zmq.Context()
    raw = ctx.socket(zmq.PUSH)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(f"tcp://127.0.0.1:{recv_port}")
    try:
        for sender in (intruder, member):
            sender.set_routes({7: f"127.0.0.1:{recv_port}"})
        intruder.send_tuple(7, Tuple(["injected"], fields, "src", "default", 1, {5: 6}))
        eventually(lambda: _assert_count(receiver, "rejected_batches_bad_mac", 1), 10)
        member.send_tuple(7, Tuple(["legit"], fields, "src", "default", 1, {5: 6}))
        eventually(lambda: _assert(delivered), 10)
        (task, tup), = delivered
        assert task == 7 and tup.values == ["legit"] and tup.message_id == {5: 6}
        # a member's batch replayed verbatim, and a member's batch with an out-of-range anchor
        sealer = Sealer(SECRET)
        frames = sealer.seal(f"127.0.0.1:{recv_port}", msgpack.packb([TUPLE, 7, "src", "default", 1, ["again"], [], 0]))
        raw.send_multipart(frames)
        raw.send_multipart(frames)
        raw.send_multipart(sealer.seal(f"127.0.0.1:{recv_port}",
                                       msgpack.packb([TUPLE, 7, "src", "default", 1, ["neg"], [-1, 2], 0])))
        raw.send_multipart([b"not", b"a batch"])
        eventually(lambda: (_assert_count(receiver, "rejected_batches_replayed", 1),
                            _assert_count(receiver, "invalid_messages_out_of_range", 1),
                            _assert_count(receiver, "rejected_batches_malformed", 1)), 10)
        assert [t.values for _, t in delivered] == [["legit"], ["again"]]
        assert receiver.stats["rejected_batches"] == 3 and receiver.stats["invalid_messages"] == 1
    finally:
        raw.close(0)
        ctx.term()
        for t in (receiver, member, intruder):
            t.close(0.1)


def _assert(value):
    assert value
    return value


def _assert_count(transfer, key, n):
    assert transfer.stats[key] == n, {k: v for k, v in transfer.stats.items() if v}


def _stall_transfer(connect_secs: float):
    from gale.clock import SimulatedClock

    clock = SimulatedClock()
    fields = Fields(["v"], "src:default")
    t = Transfer(bind_host="127.0.0.1", port=free_port(), secret=SECRET, roles={7: TUPLE}, clock=clock,
                 deliver=lambda *_: True, fields_for=lambda c, s: fields, connect_secs=connect_secs)
    t.stall_secs = 0.2
    return t, clock, fields


def _rounds_pass(t, real_secs: float = 0.0) -> None:
    """Wait until the send loop has gone round 20 times more (and ``real_secs`` of real time)."""
    import time

    from tests.waiting import until

    rounds, t0 = t._send_rounds, time.monotonic()
    until(lambda: t._send_rounds > rounds + 20 and time.monotonic() - t0 >= real_secs, 10,
          "the send loop went round with the batch held")


def test_a_destination_that_never_took_a_batch_holds_the_spouts_back_until_the_start_up_bound():
    """A worker still starting (it has not taken a batch since it was assigned) is slow, not down:
    its batch is kept and the spouts wait (``congested``) past ``stall_secs`` — judged by the
    transfer's clock, not real time — until ``connect_secs``; then it is down and its batch dropped."""
    from tests.waiting import until

    t, clock, fields = _stall_transfer(connect_secs=30.0)
    t.start()
    try:
        nobody = f"127.0.0.1:{free_port()}"  # reserved, so nothing listens there
        t.set_routes({9: nobody})
        t.send_tuple(9, Tuple(["x"], fields, "src", "default", 1, {5: 6}))
        until(lambda: t._held.get(nobody), 10, "the batch is held for the unreachable destination")
        _rounds_pass(t, real_secs=2 * t.stall_secs)
        clock.advance(t.stall_secs + 0.5)
        _rounds_pass(t)
        assert t.stats["dropped_messages"] == 0 and nobody not in t._down and t.congested()
        clock.advance(30.0)
        eventually(lambda: (_assert_count(t, "dropped_messages", 1), _assert(nobody in t._down)), 10)
        assert not t.congested()
    finally:
        t.close(0.1)


def test_a_destination_that_took_batches_and_stalls_is_down_after_stall_secs_of_the_injected_clock():
    """Once a destination has taken a batch, ``stall_secs`` without progress — by the transfer's
    clock: real time passing drops nothing — make it down, whatever ``connect_secs`` is."""
    import zmq

    from tests.waiting import until

    t, clock, fields = _stall_transfer(connect_secs=1000.0)
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    address = f"127.0.0.1:{port}"
    t.start()
    try:
        t.set_routes({9: address})
        t.send_tuple(9, Tuple(["first"], fields, "src", "default", 1, {5: 6}))
        until(lambda: address in t._reached, 10, "the first batch went out")
        assert pull.poll(10_000), "the first batch did not arrive"
        pull.close(0)

        def held() -> bool:
            t.send_tuple(9, Tuple(["more"], fields, "src", "default", 1, {5: 6}))
            return bool(t._held.get(address))
        until(held, 10, "a batch is held once the destination went away")
        _rounds_pass(t, real_secs=2 * t.stall_secs)
        assert t.stats["dropped_messages"] == 0 and address not in t._down and t.congested()
        clock.advance(t.stall_secs + 0.5)
        eventually(lambda: (_assert(t.stats["dropped_messages"] >= 1), _assert(address in t._down)), 10)
        assert not t.congested()
    finally:
        ctx.destroy(linger=0)
        t.close(0.1)


def test_tuples_sent_to_a_worker_that_starts_later_all_arrive_once_it_binds():
    """The s26d case: a worker emits for a peer that binds its port well after ``stall_secs``.
    Nothing is dropped: the batches wait (and the spouts with them) and all arrive in order."""
    import time

    from tests.waiting import until

    fields = Fields(["v"], "src:default")
    port = free_port()
    delivered: list = []
    sender = Transfer(bind_host="127.0.0.1", port=free_port(), secret=SECRET, roles={}, deliver=lambda *_: True,
                      fields_for=lambda c, s: fields)
    sender.stall_secs = 0.2
    receiver = Transfer(bind_host="127.0.0.1", port=port, secret=SECRET, roles={7: TUPLE},
                        deliver=lambda task, tup: delivered.append(tup.values[0]) or True,
                        fields_for=lambda c, s: fields)
    sender.start()
    try:
        sender.set_routes({7: f"127.0.0.1:{port}"})
        for i in range(500):
            sender.send_tuple(7, Tuple([i], fields, "src", "default", 1, {5: 6}))
        until(lambda: sender._held.get(f"127.0.0.1:{port}"), 10, "the batch is held for the peer not yet bound")
        t0 = time.monotonic()
        until(lambda: time.monotonic() - t0 > 5 * sender.stall_secs and sender._send_rounds, 10, "time passes")
        assert sender.congested() and sender.stats["dropped_messages"] == 0
        receiver.start()
        eventually(lambda: _assert(len(delivered) == 500), 10)
        assert delivered == list(range(500)) and sender.stats["dropped_messages"] == 0
        eventually(lambda: _assert(not sender.congested()), 10)
    finally:
        receiver.close(0.1)
        sender.close(0.1)
