"""The compiled build reads a payload of plain groups straight from its bytes
(``gale.worker.wire_fast._fast_groups``) and gives any other payload to msgpack and the message-by-message
checks. Whatever a payload holds — valid groups, junk, a truncation, a flipped byte — the decoder
must deliver, count and refuse exactly what the msgpack path does (``BatchDecoder.fast = False``).
As Python both runs are the msgpack path; the test still holds there."""

from __future__ import annotations

import math

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from gale import compiled
from gale.topology.tuple import Tuple, new_tracked
from gale.worker.outbox import Outbox
from gale.worker.sender import TupleSender
from gale.worker.wire import BatchDecoder
from gale.worker.wire_fast import read_fast

from tests.test_wire_groups import INPUTS, PAIR, ROLES, WORDS, fields_for

U64 = 2**64 - 1
u64 = st.integers(0, U64)
lineages = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, U64))
# what the fast path reads itself: str, bytes, int, float, bool, None (floats from msgpack's own
# float32 too, below)
scalars = st.one_of(st.text(max_size=40), st.integers(-(2**63), U64), st.booleans(), st.none(),
                    st.binary(max_size=300), st.floats())
# and what makes it give the payload to msgpack
nested = st.one_of(st.lists(st.integers(-5, 5), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2))
tree = st.one_of(st.none(), st.tuples(u64, u64), st.dictionaries(u64, u64, min_size=2, max_size=3))


def body_of(values: list, anchors, lineage: int) -> list:
    body = [values, lineage]
    if isinstance(anchors, tuple):
        body += list(anchors)
    elif anchors:
        for pair in anchors.items():
            body += list(pair)
    return body


def payload_of(groups: list, float32: bool) -> bytes:
    """The wire bytes of ``groups``: ("t", task, source, bodies) / ("a", quads) / ("r", pairs) /
    ("p", task, bins of ack pairs) / ("loads", ...) / ("single", ...)."""
    double = msgpack.Packer(use_bin_type=True).pack
    single = msgpack.Packer(use_bin_type=True, use_single_float=True).pack

    def pack(message):
        if float32:
            try:
                return single(message)
            except OverflowError:  # a float past float32's range: this message as doubles
                pass
        return double(message)

    out = []
    for g in groups:
        if g[0] == "t":
            _, task, component, source, bodies = g
            out.append(pack([3, task, component, "default", source, bodies]))
        elif g[0] == "a":
            out.append(pack([4, 7, [x for q in g[1] for x in q]]))
        elif g[0] == "r":
            out.append(pack([5, 1, [x for p in g[1] for x in p]]))
        elif g[0] == "p":  # packed acks: each bin whole acks, or junk bytes, or not bytes at all
            out.append(pack([8, g[1], [b"".join(r.to_bytes(8, "little") + v.to_bytes(8, "little") for r, v in b)
                                       if isinstance(b, list) else b for b in g[2]]]))
        elif g[0] == "loads":
            out.append(pack([6, 300, [3, 10]]))
        else:
            out.append(pack([2, 1, 1, 5]))
    return b"".join(out)


def tuple_group(task: int, fields, component: str):
    body = st.builds(body_of, st.lists(st.one_of(scalars, scalars, scalars, nested), min_size=len(fields), max_size=len(fields)),
                     tree, lineages)
    return st.tuples(st.just("t"), st.just(task), st.just(component), st.integers(0, 2**31 - 1),
                     st.lists(body, max_size=6))


groups = st.lists(st.one_of(
    tuple_group(3, WORDS, "split"), tuple_group(4, PAIR, "count"),
    st.tuples(st.just("a"), st.lists(st.tuples(st.sampled_from([0, 1, 2, 3, 4]), u64, u64, st.integers(0, 2**31 - 1)),
                                     max_size=5)),
    st.tuples(st.just("r"), st.lists(st.tuples(st.sampled_from([0, 1, 2, 3]), u64), max_size=5)),
    st.tuples(st.just("p"), st.sampled_from([7, 7, 7, 3]),
              st.lists(st.one_of(st.lists(st.tuples(u64, u64), max_size=4), st.binary(max_size=20), st.integers(0, 3)),
                       max_size=3)),
    st.tuples(st.just("loads")), st.tuples(st.just("single")),
), max_size=5)


def run(payload: bytes, fast: bool):
    dec = BatchDecoder(fields_for, ROLES, INPUTS, on_loads=lambda *a: None)
    dec.fast = fast
    items, calls = [], []

    def deliver(task, obj):
        items.append((task, fact(obj)))
        return obj != (1, 5)  # refuse one verdict: refusals must be counted alike

    def deliver_many(task, objs):
        calls.append((task, len(objs)))
        items.extend((task, fact(o)) for o in objs)
        return sum(1 for o in objs if o == (1, 5))

    seen, refused = dec.decode(payload, deliver, deliver_many)
    return seen, refused, dict(dec.invalid), items, calls


def fact(obj):
    if isinstance(obj, Tuple):
        # types too: True == 1 and 1.0 == 1, but a bool must arrive a bool
        return ("tuple", type(obj.values), same_nan(obj.values), [type(v) for v in obj.values],
                obj.fields.source_key, obj.task, obj.message_id, obj.lineage)
    return same_nan(obj)


class _NaN:
    """The marker a float NaN compares as: equal only to itself, unlike the string "NaN" a
    payload may hold."""

    def __repr__(self) -> str:
        return "NaN"


NAN = _NaN()


def same_nan(value):
    """A flipped byte can make a float NaN anywhere, nested values and keys included; NaN equals
    nothing, not even the NaN the other path decoded, so both must read it a NaN."""
    if isinstance(value, float):
        return NAN if math.isnan(value) else value
    if isinstance(value, (list, tuple)):
        return type(value)(same_nan(v) for v in value)
    if isinstance(value, dict):
        return {same_nan(k): same_nan(v) for k, v in value.items()}
    return value


@settings(max_examples=300, deadline=None)
@given(groups, st.booleans(), st.data())
def test_the_fast_path_delivers_and_counts_exactly_what_msgpack_does(gs, float32, data):
    payload = payload_of(gs, float32)
    assert run(payload, True) == run(payload, False)
    # the same bytes cut short, or with one byte changed
    if payload:
        cut = data.draw(st.integers(0, len(payload) - 1))
        assert run(payload[:cut], True) == run(payload[:cut], False)
        at = data.draw(st.integers(0, len(payload) - 1))
        flipped = payload[:at] + bytes([data.draw(st.integers(0, 255))]) + payload[at + 1:]
        assert run(flipped, True) == run(flipped, False)


def test_the_compiled_build_reads_what_the_outbox_writes_itself():
    """The common payload — bodies of str words in one tree, acker messages, verdicts — takes the
    fast path (else it would only ever be tested on what it gives up on)."""
    box = Outbox()
    sender = TupleSender(msgpack.Packer(use_bin_type=True).pack, 1 << 20, lambda task: box)
    for i in range(20):
        sender.send_tuple(3, new_tracked([f"w{i}"], WORDS, 5, 2**63 + i, 2**40 + i, -i))
        sender.send_acker(7, (1, 2**63 + i, 2**64 - 1 - i, 5))
    sender.send_result(1, (1, 12))
    payload, n = box.drain(100)
    dec = BatchDecoder(fields_for, ROLES, INPUTS)
    read = read_fast(dec, payload)
    if compiled.hot_path() == "python":
        assert read is None
        return
    assert read is not None, "the compiled build gave the outbox's own payload to msgpack"
    delivered, seen = read
    assert seen == n == 41
    assert [(task, len(items)) for task, items in delivered] == [(3, 20), (7, 20), (1, 1)]
    first = delivered[0][1][0]
    assert (first.values, first.task, first.message_id, first.lineage) == (["w0"], 5, {2**63: 2**40}, 0)
    assert delivered[1][1][3] == (1, 2**63 + 3, 2**64 - 4, 5)
    assert run(payload, True) == run(payload, False)
