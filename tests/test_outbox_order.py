"""What an outbox sends, in which order: a drain's limit and each group's order, dropping the oldest,
and a checkpoint tuple keeping its place among the data between workers."""

from __future__ import annotations

import msgpack

from gale.topology.tuple import Fields, new_tuple
from gale.worker.outbox import Outbox
from gale.worker.sender import TupleSender, encode_ints
from gale.worker.runtime.acker import ACK
from gale.worker.wire import BatchDecoder
from tests.wire_support import ROLES, WORDS, decode, drain_all


def test_drain_takes_at_most_the_limit_and_keeps_each_groups_order():
    box = Outbox()
    g1, g2 = box.tuple_group(3, 2, "split", "default"), box.acker_group(7)
    for i in range(7):
        g1.append(msgpack.packb([[f"w{i}"], 0]))
        g2.append(encode_ints((ACK, i, i, 0)))
    sizes = [n for _, n in drain_all(box, 5)]
    assert sizes == [5, 5, 4]
    box2 = Outbox()
    g = box2.tuple_group(3, 2, "split", "default")
    for i in range(7):
        g.append(msgpack.packb([[f"w{i}"], 0]))
    values = []
    for payload, _ in drain_all(box2, 3):
        sink, _, _ = decode(payload)
        values += [obj.values[0] for _, obj in sink.items]
    assert values == [f"w{i}" for i in range(7)]


def test_dropping_takes_the_oldest_and_counts():
    box = Outbox()
    g = box.acker_group(7)
    for i in range(10):
        g.append(encode_ints((ACK, i, 1, 0)))
    assert box.drop_oldest(4) == 4 and [msgpack.unpackb(b"\x94" + m)[1] for m in g] == list(range(4, 10))
    assert box.clear() == 6 and box.queued() == 0 and box.drop_oldest(3) == 0


# ---------------------------------------------------------------------------- barriers keep their place

CHECKPOINT = Fields(["txid", "action"], "split:$checkpoint")


def _from_split(values, fields=WORDS, task=2):
    return new_tuple(list(values), fields, task, None)


def test_a_checkpoint_tuple_is_never_overtaken_by_the_data_around_it():
    """The checkpoint barrier (Storm's CheckpointTupleForwarder, docs/state.md) needs each receiving
    task to get a source task's data and its ``$checkpoint`` tuples in the order they were emitted.
    Groups are per stream, and an older ``$checkpoint`` group would be drained before a newer data
    group: the barrier would overtake the data emitted before it (and data after it, the barrier)."""
    box = Outbox()
    sender = TupleSender(msgpack.Packer(use_bin_type=True).pack, 1 << 20, lambda task: box)
    sender.send_tuple(3, _from_split([0, "INITSTATE"], CHECKPOINT))  # the checkpoint group comes first
    sender.send_tuple(3, _from_split(["early"]))
    drain_all(box)
    sender.send_tuple(3, _from_split(["a"]))
    sender.send_tuple(3, _from_split(["b"]))
    sender.send_tuple(3, _from_split([1, "PREPARE"], CHECKPOINT))
    sender.send_tuple(3, _from_split(["c"]))
    sender.send_tuple(3, _from_split([1, "COMMIT"], CHECKPOINT))
    sender.send_tuple(4, _from_split(["other task"]))  # another receiver: no constraint, delivered too
    arrived = []
    for payload, _ in drain_all(box, limit=3):  # small batches: a barrier may fall between them
        sink, _, _ = decode(payload, BatchDecoder(
            lambda c, s: {("split", "default"): WORDS, ("split", "$checkpoint"): CHECKPOINT}.get((c, s)),
            ROLES, {3: {("split", "default"), ("split", "$checkpoint")}, 4: {("split", "default")}}))
        arrived += [(task, tuple(t.values)) for task, t in sink.items]
    assert [v for task, v in arrived if task == 3] == [("a",), ("b",), (1, "PREPARE"), ("c",), (1, "COMMIT")]
    assert [v for task, v in arrived if task == 4] == [("other task",)]
    # sealed groups do not pile up once drained
    assert len(box._order) <= 6
