"""The Kafka spout's lag: records behind per owned partition, reported every :data:`LAG_SECS` as
the ``kafka_lag`` details of its stats (the UI charts them per partition)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gale.worker.connectors.kafka_group import TopicPartition
from gale.worker.connectors.kafka_offsets import OffsetTracker

#: how often the lag per partition is reported (the UI's chart)
LAG_SECS = 1.0


def partition_lag(trackers: Mapping[TopicPartition, OffsetTracker],
                  highwater: Callable[[str, int], int | None]) -> dict[str, float]:
    """``{"topic/partition": records behind}``: the high watermark (from the last fetch; a
    partition without one yet is left out) minus the offset the group would commit now (Storm's
    Kafka spout lag)."""
    lag = {}
    for (topic, p), tracker in list(trackers.items()):
        hw = highwater(topic, p)
        if hw is not None:
            lag[f"{topic}/{p}"] = float(max(0, hw - tracker.committed()))
    return lag
