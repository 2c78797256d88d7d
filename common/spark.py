"""Spark stages: ``from gale.spark import SparkBolt, SparkSink``.

A :class:`SparkBolt` takes micro-batches of tuples as a Spark DataFrame (``transform(df)``) and
returns a DataFrame; a :class:`SparkSink` writes batches idempotently (Parquet by default). See
``docs/spark.md``. The implementation is ``gale.worker.spark``; it is imported on first use so that
importing this module does not start or load Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from gale.worker.spark import (
        ARROW_BATCH, ROW_ID, ROW_IDS, SparkBolt, SparkSink, SparkStageError, collect_row_ids, is_batch_stream,
    )

__all__ = ["ARROW_BATCH", "ROW_ID", "ROW_IDS", "SparkBolt", "SparkSink", "SparkStageError", "collect_row_ids",
           "is_batch_stream"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gale.worker import spark

        return getattr(spark, name)
    raise AttributeError(f"module 'gale.spark' has no attribute {name!r}")
