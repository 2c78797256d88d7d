"""Connectors to sources that can replay and to sinks that confirm:
``from gale.connectors import KafkaSpout, KafkaBolt, RabbitMQSpout, RabbitMQBolt``.

See ``docs/kafka.md``. Each class is imported on first use, so importing this module loads no
client library (kafka-python, pika).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from gale.worker.connectors.kafka_bolt import KafkaBolt
    from gale.worker.connectors.kafka_spout import KafkaSpout
    from gale.worker.connectors.rabbitmq_bolt import RabbitMQBolt
    from gale.worker.connectors.rabbitmq_spout import RabbitMQSpout

_WHERE = {
    "KafkaSpout": "gale.worker.connectors.kafka_spout",
    "KafkaBolt": "gale.worker.connectors.kafka_bolt",
    "RabbitMQSpout": "gale.worker.connectors.rabbitmq_spout",
    "RabbitMQBolt": "gale.worker.connectors.rabbitmq_bolt",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gale.connectors' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
