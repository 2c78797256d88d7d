"""The grouped message kinds (TUPLES, ACKERS, RESULTS): what the outbox writes, the decoder takes
back unchanged; every message of a group is checked as a single message would be, an invalid one
dropped and counted under its reason, the rest delivered in one call per group.

The reference for the checks is the single-message path (kinds 0, 1, 2), itself tested message by
message in ``tests/test_transfer_auth.py``: a group must decode to what its messages decode to one
by one, on valid and on junk input alike."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale import compiled
from gale.topology.tuple import Fields, Tuple, new_tuple
from gale.worker.outbox import Outbox, array_header
from gale.worker.sender import TupleSender, encode_body, encode_ints, encode_tuple
from gale.worker.runtime.acker import ACK, ACKED, FAIL, FAILED, INIT, RESET, RESET_TIMEOUT
from gale.worker.runtime.executor import Executor
from gale.worker.wire import BatchDecoder
from gale.worker.wire_kinds import ACKER, ACKERS, RESULT, RESULTS, TUPLE, TUPLES
from tests.wire_support import (
    DEST, INPUTS, PAIR, ROLES, U64, WORDS, as_fact, decode, decoder, drain_all, fields_for, pack, transfer,
)


# ---------------------------------------------------------------------------- round trips

u64 = st.integers(0, U64)
lineages = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, U64))
plain_atoms = st.one_of(st.text(max_size=8), st.integers(-(2**63), U64), st.booleans(), st.none(),
                        st.binary(max_size=8), st.floats(allow_nan=False))
# values that are not plain (TupleSender encodes their bodies at emit; plain ones wait for the drain)
atoms = st.one_of(plain_atoms, st.lists(st.integers(-5, 5), max_size=3),
                  st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2))
anchors = st.dictionaries(u64, u64, max_size=3)
sent_tuple = st.tuples(st.sampled_from([(3, WORDS), (4, PAIR)]), st.integers(1, 50), anchors, lineages,
                       st.lists(atoms, min_size=2, max_size=2))
acker_msg = st.tuples(st.sampled_from([INIT, ACK, FAIL, RESET]), u64, u64, st.integers(1, 2**31 - 1))
result_msg = st.tuples(st.sampled_from([ACKED, FAILED, RESET_TIMEOUT]), u64)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(sent_tuple.map(lambda x: ("t", x)), acker_msg.map(lambda x: ("a", x)),
                          result_msg.map(lambda x: ("r", x))), max_size=60),
       st.integers(1, 25))
def test_what_the_outbox_sends_the_decoder_delivers_unchanged_and_in_order_per_group(messages, limit):
    t = transfer()
    expected: dict[tuple, list] = {}
    for kind, m in messages:
        if kind == "t":
            (task, fields), source, ids, lineage, values = m
            values = values[:len(fields)]
            tup = new_tuple(values, fields, source, ids or None, lineage)
            t.send_tuple(task, tup)
            expected.setdefault((task, source, fields.source_key), []).append(
                ("tuple", values, fields.source_key, source, ids or None, lineage))
        elif kind == "a":
            t.send_acker(7, m)
            expected.setdefault((7,), []).append(m)
        else:
            t.send_result(1, m)
            expected.setdefault((1,), []).append(m)
    box = t.outboxes[DEST]
    assert box.queued() == len(messages)
    batches = drain_all(box, limit)
    assert not box and box.queued() == 0
    assert all(0 < n <= limit for _, n in batches) and sum(n for _, n in batches) == len(messages)
    dec = decoder()
    got: dict[tuple, list] = {}
    for payload, n in batches:
        sink, seen, invalid = decode(payload, dec)
        assert seen == n and invalid == {}
        for task, obj in sink.items:
            fact = as_fact(obj)
            key = (task, obj.task, obj.fields.source_key) if isinstance(obj, Tuple) else (task,)
            got.setdefault(key, []).append(fact)
    assert got == expected


def test_a_group_is_delivered_in_one_call_and_one_wake():
    t = transfer()
    for i in range(50):
        t.send_tuple(3, new_tuple([f"w{i}"], WORDS, 2, {i + 1: i + 2}, i))
    for i in range(30):
        t.send_acker(7, (ACK, i + 1, i, 0))
    (payload, n), = drain_all(t.outboxes[DEST])
    sink, seen, invalid = decode(payload)
    assert (n, seen, invalid, sink.calls) == (80, 80, {}, 2)
    # the runtime's side of that call: one extend, one wake of a sleeping executor thread
    woken = []
    thread = SimpleNamespace(sleeping=True, wake=lambda: woken.append(1))
    ex = SimpleNamespace(queues={3: deque()}, thread=thread)
    Executor.receive_many(ex, 3, [obj for _, obj in sink.items[:50]])
    assert [x.values for x in ex.queues[3]] == [[f"w{i}"] for i in range(50)] and woken == [1]


_PACK = msgpack.Packer(use_bin_type=True).pack
C_OUTBOX = compiled.status()["gale.worker.outbox"]
_ints = st.integers(-(2**63), 2**64 - 1)
_plain_values = st.one_of(st.text(max_size=300), st.binary(max_size=300), _ints, st.floats(allow_nan=False),
                          st.booleans(), st.none())


@settings(max_examples=400, deadline=None)
@given(values=st.lists(_plain_values, max_size=17), tracked=st.booleans(), root=st.integers(0, U64),
       edge=st.integers(0, U64), lineage=_ints, as_tuple=st.booleans())
def test_a_body_encoded_at_emit_is_msgpacks_own_bytes(values, tracked, root, edge, lineage, as_tuple):
    """``encode_body`` (C in the compiled build) writes exactly what msgpack writes for the body, or
    leaves the body to msgpack (None) — never other bytes."""
    from gale.topology.tuple import new_tracked

    vals = tuple(values) if as_tuple else values
    fields = Fields([f"f{i}" for i in range(len(vals))], "split:default")
    t = new_tracked(vals, fields, 5, root, edge, lineage) if tracked else new_tuple(vals, fields, 5, None, lineage)
    reference = encode_tuple(_PACK, t)
    got = encode_body(t, 1 << 20)
    if got is not None:
        assert got == reference
    if C_OUTBOX and len(values) <= 15 and len(reference) <= 900:  # plain and short: C writes it
        assert got == reference
    assert encode_body(t, len(reference) - 1) is None  # over the limit: msgpack (and the caller) decide


def test_bodies_the_encoder_leaves_to_msgpack():
    f1 = Fields(["v"], "split:default")
    for value in ["\ud800", 2**64, -(2**63) - 1, [1], {"a": 1}, 1.5j, "x" * 2000]:
        assert encode_body(new_tuple([value], f1, 5, None, 0), 1 << 20) is None, value
    assert encode_body(new_tuple(["w"], f1, 5, {1: 2, 3: 4}, 0), 1 << 20) is None  # two trees


@given(st.one_of(st.tuples(_ints, _ints, _ints, _ints), st.tuples(_ints, _ints)))
def test_integer_messages_encode_as_msgpack_array_elements(msg):
    assert encode_ints(msg) == _PACK(list(msg))[1:]


_edges = st.sampled_from([0, 1, 127, 128, 255, 256, 0xFFFF, 0x10000, 0xFFFFFFFF, 2**32, 2**63 - 1, 2**63,
                          2**64 - 1, -1, -32, -33, -(2**63)])


@given(st.one_of(_ints, _edges), st.one_of(_ints, _edges))
def test_a_buffered_ack_is_queued_as_the_acker_message_it_stands_for(root, val):
    """``send_ack`` (the ack buffer's path, no message tuple) queues the bytes ``send_acker`` does,
    at every msgpack width boundary."""
    box = Outbox()
    sender = TupleSender(_PACK, 1 << 20, lambda task: box)
    sender.send_ack(7, root, val)
    sender.send_acker(7, (ACK, root, val, 0))
    direct, reference = list(box.int_groups[(ACKERS, 7)])
    assert direct == reference == _PACK([ACK, root, val, 0])[1:]


def test_a_buffered_ack_outside_64_bits_raises_as_its_message_would():
    sender = TupleSender(_PACK, 1 << 20, lambda task: Outbox())
    for root, val in [(2**64, 1), (1, -(2**63) - 1)]:
        with pytest.raises(OverflowError):
            sender.send_acker(7, (ACK, root, val, 0))
        with pytest.raises(OverflowError):
            sender.send_ack(7, root, val)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 65535, 65536, 70000], ids=lambda n: f"n{n}")
def test_array_headers_are_msgpacks(n):
    assert array_header(n) == msgpack.packb([None] * n)[:len(array_header(n))]
    assert msgpack.unpackb(array_header(n) + b"\xc0" * n) == [None] * n


def test_a_tuple_without_a_route_is_counted_undeliverable_and_an_unencodable_one_fails_its_emit():
    t = transfer()
    t.send_tuple(99, new_tuple(["x"], WORDS, 2, None))
    t.send_acker(98, (ACK, 1, 1, 0))
    t.send_result(97, (ACKED, 1))
    assert t.stats["undeliverable"] == 3 and t.queued() == 0
    with pytest.raises(ValueError, match="cannot be sent to another worker"):
        t.send_tuple(3, new_tuple([object()], WORDS, 2, {1: 2}))
    assert t.queued() == 0


def test_a_string_msgpack_cannot_encode_fails_its_emit_and_spares_the_rest_of_the_group():
    """A lone surrogate is a str, but not UTF-8. It used to pass the plain check, wait in its group
    as a list and fail the whole group's encoding at drain, where every message queued for that
    worker was dropped; now its emit fails and the group goes out without it."""
    t = transfer()
    t.send_tuple(3, new_tuple(["before"], WORDS, 2, {1: 2}, 0))
    with pytest.raises(ValueError, match="cannot be sent to another worker.*surrogates not allowed"):
        t.send_tuple(3, new_tuple(["\ud800"], WORDS, 2, {3: 4}, 0))
    t.send_tuple(3, new_tuple(["after"], WORDS, 2, {5: 6}, 0))
    (payload, n), = drain_all(t.outboxes[DEST])
    sink, seen, invalid = decode(payload)
    assert (n, seen, invalid) == (2, 2, {})
    assert [obj.values for _, obj in sink.items] == [["before"], ["after"]]


def test_a_group_mixing_plain_bodies_and_bodies_msgpack_encodes_arrives_whole_and_in_order():
    """Plain values are written by ``encode_body``; others (a list value, a dict, two trees) by
    msgpack. Both are encoded at emit, and a group holding runs of both decodes to the tuples in
    emit order."""
    t = transfer()
    values = [["a"], [[1, 2]], ["b"], ["c"], [{"k": 1}], [{"k": 2}], ["d"]]
    for i, v in enumerate(values):
        t.send_tuple(3, new_tuple(v, WORDS, 2, {i + 1: i + 2}, i))
    (group,) = t.outboxes[DEST].tuple_groups.values()
    assert [type(x) for x in group] == [bytes] * 7
    (payload, n), = drain_all(t.outboxes[DEST])
    sink, seen, invalid = decode(payload)
    assert n == seen == 7 and invalid == {}
    assert [(obj.values, obj.message_id, obj.lineage) for _, obj in sink.items] == \
        [(v, {i + 1: i + 2}, i) for i, v in enumerate(values)]


def test_a_tuple_over_the_byte_limit_fails_its_emit_and_one_within_it_is_sent():
    """``topology.transfer.max.tuple.bytes`` holds for plain values too (their size is bounded at
    emit, and encoded exactly when the bound is over the limit), for multi-byte text, and for
    values encoded at emit."""
    t = transfer()
    t.tuple_sender.max_bytes = 100
    for values in (["x" * 200], ["é" * 60], [["x"] * 60], [b"x" * 101]):
        with pytest.raises(ValueError, match=r"byte tuple .*limited to topology.transfer.max.tuple.bytes \(100\)"):
            t.send_tuple(3, new_tuple(values, WORDS, 2, {1: 2}))
    assert t.queued() == 0
    for values in (["x" * 40], ["é" * 20], [["x"] * 20], [2**64 - 1]):
        t.send_tuple(3, new_tuple(values, WORDS, 2, {1: 2}))
    sink, seen, invalid = decode(drain_all(t.outboxes[DEST])[0][0])
    assert [obj.values for _, obj in sink.items] == [["x" * 40], ["é" * 20], [["x"] * 20], [2**64 - 1]]
    with pytest.raises(ValueError, match="cannot be sent to another worker"):
        t.send_tuple(3, new_tuple([2**64], WORDS, 2, {1: 2}))  # past msgpack's integers


# ---------------------------------------------------------------------------- invalid messages in a group

GOOD_BODY = [["cow"], 0, 5, 6]

BAD_BODIES = [
    # (body, reason)
    ("cow", "malformed"),
    ([["cow"]], "malformed"),                    # no lineage
    ([], "malformed"),
    ([["cow", "moon"], 0], "malformed"),         # wrong number of fields
    (["cow", 0], "malformed"),                   # values not a list
    ([{"word": "cow"}, 0], "malformed"),
    ([["cow"], "0"], "malformed"),               # lineage of the wrong type
    ([["cow"], 1.5], "malformed"),
    ([["cow"], True], "malformed"),
    ([["cow"], 0, 5], "malformed"),              # odd anchor list
    ([["cow"], 0, 5, 6.0], "malformed"),
    ([["cow"], 0, True, 6], "malformed"),
    ([["cow"], 0, 5, None], "malformed"),
    ([["cow"], 0, -5, 6], "out_of_range"),
    ([["cow"], 0, 5, -6], "out_of_range"),
    ([["cow"], 0, 1, 2, 3, -4], "out_of_range"),
]


def tuples_group(bodies, task=3, component="split", stream="default", source=2):
    return [TUPLES, task, component, stream, source, bodies]


@pytest.mark.parametrize("body,reason", BAD_BODIES, ids=[f"{i}-{r}" for i, (_, r) in enumerate(BAD_BODIES)])
def test_an_invalid_tuple_in_a_group_is_dropped_under_its_reason_and_the_others_delivered(body, reason):
    sink, seen, invalid = decode(pack(tuples_group([GOOD_BODY, body, [["moon"], -3]])))
    assert seen == 3 and invalid == {reason: 1}
    assert [(o.values, o.message_id, o.lineage) for _, o in sink.items] == [(["cow"], {5: 6}, 0), (["moon"], None, -3)]


#: one bad tuple among tuples of its own shape (the whole-group checks see one column fail)
BAD_ALIKE = [
    ([["cow"], 0, -5, 6], "out_of_range"),
    ([["cow"], 0, 5, -6], "out_of_range"),
    ([["cow"], 0, True, 6], "malformed"),
    ([["cow"], 0, 5, 6.0], "malformed"),
    ([["cow"], "0", 5, 6], "malformed"),
    ([["cow", "moon"], 0, 5, 6], "malformed"),
    ([("cow",), 0, 5, 6], None),               # msgpack has one array type: a tuple arrives as a list
    (["cow", 0, 5, 6], "malformed"),
    ([[], 0, 5, 6], "malformed"),
    ([["cow"], None], "malformed"),            # among untracked tuples
    ([["cow", 1], 0], "malformed"),
    ([b"cow", 0], "malformed"),
]


@pytest.mark.parametrize("body,reason", BAD_ALIKE, ids=[f"{i}-{r}" for i, (_, r) in enumerate(BAD_ALIKE)])
def test_one_bad_tuple_among_tuples_of_its_shape_is_found(body, reason):
    good = GOOD_BODY if len(body) == 4 else [["cow"], 7]
    sink, seen, invalid = decode(pack(tuples_group([good, body, good])))
    assert seen == 3
    assert invalid == ({reason: 1} if reason else {})
    assert len(sink.items) == (2 if reason else 3)


BAD_GROUPS = [
    # (message, reason, messages counted)
    (tuples_group([GOOD_BODY] * 3, component=7), "malformed", 3),
    (tuples_group([GOOD_BODY] * 3, stream=None), "malformed", 3),
    (tuples_group([GOOD_BODY] * 3, stream="errors"), "unknown_stream", 3),
    (tuples_group([GOOD_BODY] * 3, component="nosuch"), "unknown_stream", 3),
    (tuples_group([[["cow", 1], 0]] * 2, component="count"), "not_subscribed", 2),
    (tuples_group([GOOD_BODY] * 3, source="2"), "malformed", 3),
    (tuples_group([GOOD_BODY] * 3, source=True), "malformed", 3),
    (tuples_group([GOOD_BODY] * 3, source=-2), "out_of_range", 3),
    (tuples_group([GOOD_BODY] * 3, source=2**40), "out_of_range", 3),
    (tuples_group(GOOD_BODY), "malformed", 4),                          # one body's fields as the bodies
    (tuples_group({"a": GOOD_BODY}), "malformed", 1),
    (tuples_group("cow"), "malformed", 1),
    (tuples_group([GOOD_BODY] * 2, task=7), "unknown_task", 2),          # tuples for the acker
    (tuples_group([GOOD_BODY] * 2, task=99), "unknown_task", 2),         # not hosted here
    ([TUPLES, 3, "split", "default", 2], "malformed", 1),               # no bodies
    ([TUPLES, 3, "split", "default", 2, [GOOD_BODY], 0], "malformed", 1),
    ([ACKERS, 7, [ACK, 1, 2, 0, ACK]], "malformed", 1),                 # not a whole number of messages
    ([ACKERS, 7, {"k": 1}], "malformed", 1),
    ([ACKERS, 7], "malformed", 1),
    ([ACKERS, 3, [ACK, 1, 2, 0, ACK, 3, 4, 0]], "unknown_task", 2),      # acks for a bolt
    ([RESULTS, 1, [ACKED]], "malformed", 1),
    ([RESULTS, 1, "x"], "malformed", 1),
    ([RESULTS, 7, [ACKED, 1, FAILED, 2, ACKED, 3]], "unknown_task", 3),  # verdicts for the acker
    ([9, 3, [1, 2]], "unknown_kind", 1),
    ([True, 7, [ACK, 1, 2, 0]], "unknown_kind", 1),
]


@pytest.mark.parametrize("message,reason,count", BAD_GROUPS,
                         ids=[f"{i}-{r}" for i, (_, r, _) in enumerate(BAD_GROUPS)])
def test_a_group_whose_shared_fields_fail_is_dropped_each_message_counted(message, reason, count):
    good = tuples_group([GOOD_BODY])
    sink, seen, invalid = decode(pack(good, message, [ACKERS, 7, [ACK, 9, 9, 0]]))
    assert invalid == {reason: count}
    assert seen == 2 + count
    assert [t for t, _ in sink.items] == [3, 7]


BAD_QUADS = [
    ((ACK, 5.0, 1, 0), "malformed"),
    ((ACK, "5", 1, 0), "malformed"),
    ((ACK, 5, None, 0), "malformed"),
    ((ACK, 5, 1, False), "malformed"),
    ((True, 5, 1, 0), "malformed"),
    ((9, 5, 1, 0), "unknown_kind"),
    ((-1, 5, 1, 0), "unknown_kind"),
    ((ACK, -1, 1, 0), "out_of_range"),
    ((ACK, 5, -1, 0), "out_of_range"),
    ((INIT, 5, 1, -3), "out_of_range"),
    ((INIT, 5, 1, 2**40), "out_of_range"),
]


@pytest.mark.parametrize("quad,reason", BAD_QUADS, ids=[f"{i}-{r}" for i, (_, r) in enumerate(BAD_QUADS)])
def test_an_invalid_acker_message_in_a_group_is_dropped_and_the_others_delivered(quad, reason):
    sink, seen, invalid = decode(pack([ACKERS, 7, [INIT, U64, 12, 1, *quad, ACK, 5, 0, 0]]))
    assert seen == 3 and invalid == {reason: 1}
    assert [o for _, o in sink.items] == [(INIT, U64, 12, 1), (ACK, 5, 0, 0)]


BAD_PAIRS = [
    ((ACKED, 5.5), "malformed"),
    (("1", 5), "malformed"),
    ((ACKED, False), "malformed"),
    ((7, 5), "unknown_kind"),
    ((ACKED, -5), "out_of_range"),
]


@pytest.mark.parametrize("pair,reason", BAD_PAIRS, ids=[f"{i}-{r}" for i, (_, r) in enumerate(BAD_PAIRS)])
def test_an_invalid_result_in_a_group_is_dropped_and_the_others_delivered(pair, reason):
    sink, seen, invalid = decode(pack([RESULTS, 1, [ACKED, 5, *pair, FAILED, 0]]))
    assert seen == 3 and invalid == {reason: 1}
    assert [o for _, o in sink.items] == [(ACKED, 5), (FAILED, 0)]


def test_empty_groups_deliver_nothing_and_count_nothing():
    sink, seen, invalid = decode(pack(tuples_group([]), [ACKERS, 7, []], [RESULTS, 1, []]))
    assert (sink.items, seen, invalid) == ([], 0, {})


# ---------------------------------------------------------------------------- against the single-message path

junk = st.one_of(st.integers(-(2**63), U64), st.booleans(), st.none(), st.floats(allow_nan=False),
                 st.text(max_size=3), st.lists(st.integers(-3, 3), max_size=2))
body = st.one_of(
    st.tuples(st.lists(st.text(max_size=3), min_size=1, max_size=1), lineages, anchors).map(
        lambda x: [x[0], x[1], *[v for pair in x[2].items() for v in pair]]),   # a valid body
    st.lists(junk, max_size=5),                                                # anything else
    st.lists(st.one_of(st.lists(junk, min_size=1, max_size=2), junk, u64), min_size=2, max_size=6),
    junk,
)


def single_tuples(bodies, task, source):
    """The same tuples as single TUPLE messages (a body that is no list: a message that is no array)."""
    out = []
    for b in bodies:
        if type(b) is list and len(b) >= 2:
            out.append([TUPLE, task, "split", "default", source, b[0], b[2:], b[1]])
        else:
            out.append([TUPLE, task, "split", "default", source, b])  # malformed, as the body is
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(body, max_size=12), st.sampled_from([2, -1, 2**40, "2"]), st.sampled_from([3, 4, 7, 99]))
def test_a_tuples_group_decodes_as_its_tuples_do_one_by_one(bodies, source, task):
    """Same tuples delivered, same messages refused. Under the group's own task, stream and a valid
    source task, each refusal has the same reason too; when a field the group shares fails, that
    is every message's reason (one by one, a message whose shape is also wrong says malformed)."""
    grouped = decode(pack(tuples_group(bodies, task=task, source=source)))
    single = decode(pack(*single_tuples(bodies, task, source)))
    assert [(t, as_fact(o)) for t, o in grouped[0].items] == [(t, as_fact(o)) for t, o in single[0].items]
    if not bodies and task in (7, 99):
        assert grouped[1:] == (1, {"unknown_task": 1}) and single[1:] == (0, {})  # an empty misrouted group
        return
    assert grouped[1] == single[1] == len(bodies)
    if task == 3 and source == 2:
        assert grouped[2] == single[2]
    else:
        assert sum(grouped[2].values()) == sum(single[2].values()) == len(bodies)
        assert len(grouped[2]) <= 1


ints = st.one_of(st.integers(-2, 6), st.integers(2**31 - 2, 2**31), st.integers(2**64 - 2, U64), st.booleans(),
                 st.floats(allow_nan=False), st.none())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(ints, ints, ints, ints), max_size=10), st.lists(st.tuples(ints, ints), max_size=10))
def test_acker_and_result_groups_decode_as_their_messages_do_one_by_one(quads, pairs):
    grouped = decode(pack([ACKERS, 7, [x for q in quads for x in q]], [RESULTS, 1, [x for p in pairs for x in p]]))
    single = decode(pack(*[[ACKER, 7, *q] for q in quads], *[[RESULT, 1, *p] for p in pairs]))
    assert [(t, tuple(o)) for t, o in grouped[0].items] == [(t, tuple(o)) for t, o in single[0].items]
    assert grouped[1:] == single[1:]
    assert grouped[0].calls <= 2


def test_the_transfer_benchmark_moves_every_message_through_each_stage():
    """bench_transfer's run raises unless every tuple and ack it sent was delivered, none invalid."""
    from benchmarks.bench_transfer import measure

    figures = measure(3000)
    assert {"tuple_encode", "tuple_decode_deliver", "ack_encode", "ack_decode_deliver", "tuple_local"} <= set(figures)
    assert all(v >= 0 for v in figures.values())


def test_the_pinned_crossing_benchmark_crosses_only_when_the_sink_is_pinned_elsewhere():
    """bench_crossing's two pinnings: every tuple crosses (and its ack comes back) when the sink is
    in the other worker, nothing crosses when it is in the spout's."""
    from benchmarks.bench_crossing import run

    per, parts, sent = run(300, remote=True)
    # B's CPU is read in whole clock ticks (it may be 0 over 300 tuples); the parts add up to the
    # whole, as floats do
    assert per > 0 and parts["b"] >= 0 and per == pytest.approx(parts["a"] + parts["b"])
    assert sent["a"] == 300 and sent["b"] == 300  # the tuples out, their acks back
    assert 1 <= sent["a_batches"] <= 300 and 1 <= sent["b_batches"] <= 300
    per, parts, sent = run(300, remote=False)
    assert per > 0 and parts["b"] == 0 and sent == {"a": 0, "b": 0, "a_batches": 0, "b_batches": 0}


# ---------------------------------------------------------------------- control messages (CONTROLS)


def test_control_messages_travel_as_a_group_to_a_spout_task_and_arrive_as_control_payloads():
    """What the outbox writes for ``send_control`` decodes to ``(CONTROL, (a, b, c, d))`` for the
    spout task, in order, four unsigned 64-bit integers each."""
    from gale.worker.runtime.acker import CONTROL

    box = Outbox()
    sender = TupleSender(msgpack.Packer(use_bin_type=True).pack, 1 << 20, lambda task: box)
    payloads = [(1, 7, 3, 2), (2, 5, U64, 0), (1, 0, 0, 0)]
    for p in payloads:
        sender.send_control(1, p)
    sender.send_result(1, (ACKED, 9))
    payload, n = box.drain(100)
    assert n == 4
    sink, seen, invalid = decode(payload)
    assert seen == 4 and invalid == {}
    assert [o for _, o in sink.items] == [(CONTROL, p) for p in payloads] + [(ACKED, 9)]
    assert {t for t, _ in sink.items} == {1}


BAD_CONTROLS = [
    ([7, 3, [1, 2, 3, 4]], "unknown_task", 1),           # for a bolt task
    ([7, 7, [1, 2, 3, 4, 1, 2, 3, 4]], "unknown_task", 2),  # for the acker
    ([7, 1, [1, 2, 3]], "malformed", 1),                 # not a whole number of messages
    ([7, 1, "x"], "malformed", 1),
]


@pytest.mark.parametrize("message,reason,count", BAD_CONTROLS,
                         ids=[f"{i}-{r}" for i, (_, r, _) in enumerate(BAD_CONTROLS)])
def test_a_control_group_for_the_wrong_task_or_of_the_wrong_shape_is_dropped_and_counted(message, reason, count):
    sink, seen, invalid = decode(pack(message, [RESULTS, 1, [ACKED, 5]]))
    assert invalid == {reason: count}
    assert [o for _, o in sink.items] == [(ACKED, 5)]


@pytest.mark.parametrize("quad,reason", [((1, -1, 0, 0), "out_of_range"), ((1, 2, 3.5, 0), "malformed"),
                                         ((True, 2, 3, 4), "malformed"), (("1", 2, 3, 4), "malformed")])
def test_an_invalid_control_message_in_a_group_is_dropped_and_the_others_delivered(quad, reason):
    from gale.worker.runtime.acker import CONTROL

    sink, seen, invalid = decode(pack([7, 1, [1, 2, 3, 4, *quad, 2, 0, 0, 9]]))
    assert seen == 3 and invalid == {reason: 1}
    assert [o for _, o in sink.items] == [(CONTROL, (1, 2, 3, 4)), (CONTROL, (2, 0, 0, 9))]


@pytest.mark.parametrize("cut", [1, 3, 7])
def test_a_payload_whose_last_message_is_cut_short_delivers_the_whole_ones_and_counts_the_rest(cut):
    """The complete messages are delivered; the cut one is counted ``undecodable``, not lost silently
    (msgpack alone would wait for the rest)."""
    whole = pack(tuples_group([GOOD_BODY]), [ACKERS, 7, [ACK, 9, 9, 0]])
    last = pack([RESULTS, 1, [ACKED, 5, FAILED, 6]])
    sink, seen, invalid = decode(whole + last[:-cut])
    assert invalid == {"undecodable": 1}
    assert [t for t, _ in sink.items] == [3, 7] and seen == 3


@pytest.mark.parametrize("single", [False, True], ids=["group", "single"])
def test_an_init_that_names_no_spout_task_is_dropped_and_counted(single):
    """An INIT names the spout task its tree's verdict goes to: a bolt task or the acker itself there
    would have its executor handed a verdict (a sealed batch could crash a worker that way)."""
    dec = BatchDecoder(fields_for, ROLES, INPUTS, on_loads=None)
    dec.set_roles(ROLES, INPUTS, spout_tasks={1})
    msgs = [(INIT, 5, 9, 1), (INIT, 6, 9, 3), (INIT, 7, 9, 7), (ACK, 6, 9, 0)]
    payload = pack(*[[ACKER, 7, *m] for m in msgs]) if single else pack([ACKERS, 7, [x for m in msgs for x in m]])
    sink, seen, invalid = decode(payload, dec)
    assert invalid == {"not_a_spout_task": 2} and seen == 4
    assert [tuple(o) for _, o in sink.items] == [(INIT, 5, 9, 1), (ACK, 6, 9, 0)]


