"""Arrow values on the wire: a tuple value that is a ``pyarrow.Table`` or ``pyarrow.RecordBatch``
(a batch stream's batch, :mod:`gale.worker.spark.arrow_batches`) crosses workers as a msgpack
extension type holding the Arrow IPC stream of its rows.

Pure. :func:`pack_default` is the msgpack packer's ``default`` (the transfer's outgoing tuples);
:func:`ext_hook` the unpacker's (:mod:`gale.worker.wire`). The message layout is unchanged: only
the value inside a tuple's values is encoded differently. pyarrow is imported only when an Arrow
value is met, so workers of topologies without them never load it.

Extension data: one byte saying what was sent (``T`` a Table, ``B`` a RecordBatch), then the
IPC stream (schema, then the record batches). A Table arrives as a Table, a RecordBatch as a
RecordBatch, with the same schema and rows.
"""

from __future__ import annotations

from typing import Any

import msgpack

#: the msgpack extension type code of an Arrow value
ARROW_EXT = 65
_TABLE, _BATCH = b"T", b"B"


def _is_arrow(obj: Any) -> bool:
    return type(obj).__module__.startswith("pyarrow") and type(obj).__name__ in ("Table", "RecordBatch")


def encode_arrow(obj: Any) -> bytes:
    """The extension data of a ``pyarrow.Table`` or ``pyarrow.RecordBatch``."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    kind = _TABLE if isinstance(obj, pa.Table) else _BATCH
    with pa.ipc.new_stream(sink, obj.schema) as writer:
        if kind == _TABLE:
            writer.write_table(obj)
        else:
            writer.write_batch(obj)
    return kind + sink.getvalue().to_pybytes()


def decode_arrow(data: bytes) -> Any:
    """The value :func:`encode_arrow` encoded. Raises ``ValueError`` on data that is not that."""
    import pyarrow as pa

    kind, body = data[:1], data[1:]
    if kind not in (_TABLE, _BATCH):
        raise ValueError(f"Arrow extension value of unknown kind {kind!r}")
    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"Arrow extension value is not an Arrow IPC stream: {exc}") from exc
    if kind == _TABLE:
        return table
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], table.schema)


def pack_default(obj: Any) -> Any:
    """msgpack ``default``: Arrow values as :data:`ARROW_EXT`; anything else is refused as msgpack
    refuses it (``TypeError``)."""
    if _is_arrow(obj):
        return msgpack.ExtType(ARROW_EXT, encode_arrow(obj))
    raise TypeError(f"can not serialize {type(obj).__name__!r} object")


def ext_hook(code: int, data: bytes) -> Any:
    """msgpack ``ext_hook``: :data:`ARROW_EXT` back to the Arrow value; other codes stay ``ExtType``."""
    if code == ARROW_EXT:
        return decode_arrow(data)
    return msgpack.ExtType(code, data)
