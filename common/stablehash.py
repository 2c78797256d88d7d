"""A hash of tuple values that is the same in every process and run (Python's ``hash`` of ``str``
is randomized per process). Fields groupings and key groups (``gale.topology.keygroups``) use it."""

from __future__ import annotations

import struct
import zlib
from typing import Any

_MASK32 = 0xFFFFFFFF


def stable_hash(value: Any) -> int:
    """A 32-bit hash of a tuple value that is identical across processes and runs."""
    if isinstance(value, str):
        return zlib.crc32(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bool) or value is None:
        return 1231 if value else 1237 if value is False else 0
    if isinstance(value, int):
        return (value ^ (value >> 32)) & _MASK32
    if isinstance(value, (bytes, bytearray, memoryview)):
        return zlib.crc32(value)
    if isinstance(value, float):
        if value.is_integer():
            return stable_hash(int(value))
        return zlib.crc32(struct.pack("<d", value))
    if isinstance(value, (list, tuple)):
        h = 1
        for v in value:
            h = (31 * h + stable_hash(v)) & _MASK32
        return h
    if isinstance(value, dict):
        h = 0
        for k, v in value.items():
            h ^= (stable_hash(k) * 31 + stable_hash(v)) & _MASK32
        return h
    return zlib.crc32(repr(value).encode("utf-8", "surrogatepass"))
