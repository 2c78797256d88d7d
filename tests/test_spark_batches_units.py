"""Batch streams without Spark: Arrow batches concatenated with per-tuple row ids, output rows
split by anchors, keys grouped per input batch (checked against the Python grouping), the
batcher's row weights, the Arrow codec of the wire (and a real transfer between two members),
and the batch executor's flow with a stand-in Spark job."""

from __future__ import annotations

import msgpack
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.topology.tuple import Fields, Tuple
from gale.worker.arrow_codec import ARROW_EXT, decode_arrow, ext_hook, pack_default
from gale.worker.spark import lineage as lin
from gale.worker.spark.arrow_batches import (
    ARROW_BATCH,
    batches_to_table,
    is_batch_stream,
    key_index_of_inputs,
    rows_in,
    split_by_anchor,
    split_by_row_id,
)
from gale.worker.spark.batching import Batcher, BatchPolicy
from gale.worker.spark.frames import SparkStageError
from gale.worker.spark.lineage import ROW_ID
from gale.worker.transfer import TUPLE, Transfer
from gale.worker.wire import BatchDecoder
from gale.zkserver import free_port
from tests.waiting import eventually

FIELDS = Fields([ARROW_BATCH], "src:default")


def batch_tuple(value, msg=None):
    return Tuple([value], FIELDS, "src", "default", 1, msg)


def words(*ws, start=0):
    return pa.table({"id": pa.array(range(start, start + len(ws)), type=pa.int64()), "word": list(ws)})


# ------------------------------------------------------------------------------ Arrow in


def test_batches_concatenate_and_rows_carry_their_batch_tuple_index():
    a, b = words("x", "y", "x"), words("z", start=3)
    table = batches_to_table("stage", [batch_tuple(a), batch_tuple(b.to_batches()[0]), batch_tuple(a.slice(0, 0))])
    assert table.column_names == ["id", "word", ROW_ID]
    assert table.column("word").to_pylist() == ["x", "y", "x", "z"]
    assert table.column(ROW_ID).to_pylist() == [0, 0, 0, 1]  # the empty third batch has no rows
    assert batches_to_table("stage", [batch_tuple(a)], row_ids=False).column_names == ["id", "word"]
    assert is_batch_stream([ARROW_BATCH]) and not is_batch_stream([ARROW_BATCH, "x"])
    assert rows_in(a) == 3 and rows_in(a.to_batches()[0]) == 3 and rows_in("not arrow") == 1


@pytest.mark.parametrize("value, message", [
    ({"id": 1}, "tuple 1 of the batch carries a builtins.dict, not a pyarrow.Table or pyarrow.RecordBatch"),
    ([1, 2], "carries a builtins.list"),
    (pa.table({"id": [1], "word": [2]}), "tuple 1 from 'src:default' has (id: int64, word: int64) where the "
                                         "first has (id: int64, word: string)"),
    (pa.table({"word": ["w"], "id": [1]}), "must have one schema"),
])
def test_bad_batch_values_name_the_component_and_the_problem(value, message):
    with pytest.raises(SparkStageError) as err:
        batches_to_table("stage", [batch_tuple(words("a")), batch_tuple(value)])
    assert "component 'stage'" in str(err.value) and message in str(err.value), str(err.value)


def test_a_batch_with_the_hidden_row_id_column_is_refused():
    with pytest.raises(SparkStageError, match="hidden lineage column"):
        batches_to_table("stage", [batch_tuple(pa.table({ROW_ID: [1]}))])


# ------------------------------------------------------------------------------ Arrow out


def test_rows_split_by_row_id_keep_their_order_and_nulls_go_to_the_whole_batch():
    table = pa.table({"v": list("abcdef")})
    tables, anchors = split_by_row_id(table, pa.array([2, 0, 2, None, 0, 2]))
    assert anchors == [None, 0, 2]
    assert [t.column("v").to_pylist() for t in tables] == [["d"], ["b", "e"], ["a", "c", "f"]]
    assert split_by_row_id(table.slice(0, 0), np.array([], dtype=np.int64)) == ([], [])


def test_rows_split_by_anchor_group_equal_anchors_in_first_row_order():
    table = pa.table({"v": list("abcde")})
    tables, anchors = split_by_anchor(table, [(0, 1), 2, (0, 1), None, 2])
    assert anchors == [(0, 1), 2, None]
    assert [t.column("v").to_pylist() for t in tables] == [["a", "c"], ["b", "e"], ["d"]]
    same, one = split_by_anchor(table, [None] * 5)
    assert one == [None] and same[0] is table  # one group: the table itself, no copy


_VALUES = {
    "int": st.one_of(st.none(), st.integers(-3, 3)),
    "str": st.one_of(st.none(), st.sampled_from(["", "a", "b", "é"])),
    "bool": st.one_of(st.none(), st.booleans()),
}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(_VALUES)).flatmap(lambda kind: st.tuples(
    st.just(kind), st.lists(st.lists(_VALUES[kind], max_size=6), max_size=6), st.lists(_VALUES[kind], max_size=8))))
def test_keys_grouped_per_input_batch_in_arrow_anchor_as_the_python_grouping(case):
    kind, batches, outputs = case
    batches = batches or [[]]  # a micro-batch has at least one tuple
    arrow_type = {"int": pa.int64(), "str": pa.string(), "bool": pa.bool_()}[kind]
    table = batches_to_table("stage", [batch_tuple(pa.table({"k": pa.array(b, type=arrow_type)})) for b in batches])
    out_keys = [lin.hashable_key([v]) for v in outputs]
    rows = table.column("k").to_pylist()
    owners = table.column(ROW_ID).to_pylist()
    expected = lin.from_keys([lin.hashable_key([v]) for v in rows], out_keys, owners=owners)
    # the reference written out: the sorted distinct batches holding each key
    for key, anchor in zip(out_keys, expected.anchors):
        holders = sorted({owners[i] for i, v in enumerate(rows) if lin.hashable_key([v]) == key})
        assert anchor == (None if not holders else holders[0] if len(holders) == 1 else tuple(holders))
    if table.num_rows:
        index = key_index_of_inputs(table.column("k"), table.column(ROW_ID))
        assert lin.from_key_index(index, out_keys) == expected


# ------------------------------------------------------------------------------ batcher weights


def test_batch_tuples_weigh_their_rows_and_close_the_batch_once_it_is_full():
    b = Batcher(BatchPolicy(size=100, millis=1000))
    b.add("t1", 0.0, rows=60)
    assert b.room() == 40 and not b.due(0.1) and len(b) == 1
    b.add("t2", 0.2, rows=60)  # never split: the batch goes past its size and is due
    assert b.rows == 120 and b.room() < 0 and b.due(0.2)
    with pytest.raises(OverflowError):
        b.add("t3", 0.3, rows=1)
    assert b.take() == ["t1", "t2"] and b.rows == 0 and b.room() == 100
    b.add("big", 1.0, rows=500)  # one tuple larger than the batch is a batch of its own
    assert b.due(1.0) and b.take() == ["big"]


# ------------------------------------------------------------------------------ the wire


def test_arrow_values_cross_the_codec_as_ipc_and_keep_their_kind():
    table = pa.table({"id": pa.array([1, None, 3], type=pa.int32()), "w": ["a", "b", None],
                      "l": [[1], [], None]})
    for value in (table, table.to_batches()[0], table.slice(0, 0)):
        data = msgpack.packb([TUPLE, 3, [value]], default=pack_default, use_bin_type=True)
        (_, _, (back,)) = msgpack.unpackb(data, ext_hook=ext_hook, raw=False)
        assert type(back) is type(value) and back.schema == value.schema and back.equals(value)
    other = msgpack.ExtType(7, b"opaque")  # another extension type passes through as it did
    assert msgpack.unpackb(msgpack.packb(other), ext_hook=ext_hook) == other
    with pytest.raises(TypeError, match="can not serialize 'object'"):
        msgpack.packb([object()], default=pack_default)
    for bad in (b"", b"Tnot arrow", b"Xabc"):
        with pytest.raises(ValueError):
            decode_arrow(bad)


def test_a_batch_tuple_decodes_through_the_wire_validation():
    decoder = BatchDecoder(lambda c, s: FIELDS if (c, s) == ("src", "default") else None, {3: TUPLE},
                           {3: {("src", "default")}})
    table = words("a", "b")
    payload = msgpack.packb([TUPLE, 3, "src", "default", 1, [table], [5, 6], 9], default=pack_default,
                            use_bin_type=True)
    delivered = []
    seen, refused = decoder.decode(payload, lambda task, tup: delivered.append((task, tup)) or True)
    (task, tup), = delivered
    assert (seen, refused, task) == (1, 0, 3) and tup.values[0].equals(table) and tup.message_id == {5: 6}
    # an extension value that is not Arrow IPC: the payload is undecodable from there on, and counted
    bad = msgpack.packb([TUPLE, 3, "src", "default", 1, [msgpack.ExtType(ARROW_EXT, b"Tjunk")], [], 0])
    decoder.decode(bad, lambda *_: True)
    assert decoder.invalid["undecodable"] == 1


def test_a_batch_tuple_crosses_between_two_transfer_members():
    delivered: list = []
    secret = b"0123456789abcdef0123456789abcdef"
    ports = free_port(), free_port()
    members = [Transfer(bind_host="127.0.0.1", port=port, secret=secret, roles={7: TUPLE},
                        deliver=lambda task, tup: delivered.append((task, tup)) or True,
                        fields_for=lambda c, s: FIELDS if (c, s) == ("src", "default") else None) for port in ports]
    for member in members:
        member.start()
    try:
        members[0].set_routes({7: f"127.0.0.1:{ports[1]}"})
        table = pa.table({"id": pa.array(range(20000), type=pa.int64()), "word": ["w%d" % (i % 97) for i in range(20000)]})
        members[0].send_tuple(7, batch_tuple(table, {5: 6}))
        (task, tup), = eventually(lambda: _one(delivered), 10)
        assert task == 7 and tup.values[0].equals(table) and tup.message_id == {5: 6}
        with pytest.raises(ValueError, match="pyarrow Tables and RecordBatches"):
            members[0].send_tuple(7, batch_tuple(object()))
    finally:
        for member in members:
            member.close(0.1)


def _one(items):
    assert len(items) == 1, items
    return items
