"""Spark stages in Gale: Spark bolts and sinks run in micro-batches by the worker's executors,
on a Spark application the worker starts in the background (see ``docs/spark.md``).

``from gale.worker.spark import SparkBolt, SparkSink, collect_row_ids, ROW_ID``
"""

from gale.worker.spark.arrow_batches import ARROW_BATCH, is_batch_stream
from gale.worker.spark.bolt import SparkBolt, SparkComponent, collect_row_ids
from gale.worker.spark.frames import SparkStageError
from gale.worker.spark.lineage import ROW_ID, ROW_IDS
from gale.worker.spark.sink import SparkSink

__all__ = ["ARROW_BATCH", "ROW_ID", "ROW_IDS", "SparkBolt", "SparkComponent", "SparkSink", "SparkStageError",
           "collect_row_ids", "is_batch_stream"]
