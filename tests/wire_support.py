"""What the wire tests share: a small layout of tasks and streams, a decoder for it, a sink that
records deliveries, and draining an outbox whole (``test_wire_groups``, ``test_outbox_order``)."""

from __future__ import annotations

import msgpack

from gale.topology.tuple import Fields, Tuple
from gale.worker.outbox import Outbox
from gale.worker.transfer import Transfer
from gale.worker.wire import BatchDecoder
from gale.worker.wire_kinds import ACKER, RESULT, TUPLE


WORDS = Fields(["word"], "split:default")
PAIR = Fields(["word", "count"], "count:default")
ROLES = {3: TUPLE, 4: TUPLE, 7: ACKER, 1: RESULT}
INPUTS = {3: {("split", "default")}, 4: {("count", "default")}}
DEST = "127.0.0.1:1"
U64 = 2**64 - 1


def fields_for(component, stream):
    return {("split", "default"): WORDS, ("count", "default"): PAIR}.get((component, stream))


def decoder() -> BatchDecoder:
    return BatchDecoder(fields_for, ROLES, INPUTS)


class Sink:
    """deliver / deliver_many that record what arrives, and how many calls it took."""

    def __init__(self):
        self.items: list[tuple[int, object]] = []
        self.calls = 0

    def deliver(self, task, obj):
        self.calls += 1
        self.items.append((task, obj))
        return True

    def deliver_many(self, task, objs):
        self.calls += 1
        self.items.extend((task, o) for o in objs)
        return 0


def decode(payload: bytes, dec: BatchDecoder | None = None):
    dec = dec or decoder()
    sink = Sink()
    seen, refused = dec.decode(payload, sink.deliver, sink.deliver_many)
    assert refused == 0
    return sink, seen, {k: v for k, v in dec.invalid.items() if v}


def pack(*messages) -> bytes:
    return b"".join(msgpack.packb(m, use_bin_type=True) for m in messages)


def as_fact(obj):
    """What the runtime gets, comparable: a tuple's identity fields, or the message itself."""
    if isinstance(obj, Tuple):
        return ("tuple", obj.values, obj.fields.source_key, obj.task, obj.message_id, obj.lineage)
    return obj


def transfer() -> Transfer:
    t = Transfer(bind_host="127.0.0.1", port=1, secret=b"k" * 32, deliver=lambda *_: True,
                 fields_for=fields_for, roles=ROLES)
    t.set_routes({task: DEST for task in (*ROLES, 9)})
    return t


def drain_all(box: Outbox, limit: int = 1000) -> list[tuple[bytes, int]]:
    out = []
    while True:
        payload, n = box.drain(limit)
        if not n:
            return out
        out.append((payload, n))
