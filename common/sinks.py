"""Sinks that commit with the checkpoint (docs/sinks.md):
``from gale.sinks import PostgresSink, KafkaSink, FileSink, RedisSink``, and the readers that see
committed records only (``read_committed_kafka``, ``read_parts``). The base class for your own is
``gale.TransactionalSink``. Everything is imported on first use, so importing this module loads no
client library (psycopg, kafka-python, redis, pyarrow).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from gale.worker.sinks.files import FileSink, read_parts
    from gale.worker.sinks.kafka import KafkaSink, read_committed_kafka
    from gale.worker.sinks.postgres import PostgresSink
    from gale.worker.sinks.redis_sink import RedisSink

#: exported name → module
_WHERE = {
    "PostgresSink": "gale.worker.sinks.postgres",
    "KafkaSink": "gale.worker.sinks.kafka",
    "read_committed_kafka": "gale.worker.sinks.kafka",
    "FileSink": "gale.worker.sinks.files",
    "read_parts": "gale.worker.sinks.files",
    "RedisSink": "gale.worker.sinks.redis_sink",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gale.sinks' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
