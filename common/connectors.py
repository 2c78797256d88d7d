"""Connectors to sources that can replay and to sinks that confirm:
``from gale.connectors import KafkaSpout, KafkaBolt, RabbitMQSpout, RabbitMQBolt``.

``kafka_spout_settings(conf)`` / ``kafka_bolt_settings(conf)`` validate a topology's ``kafka.*``
keys up front (a missing or bad key raises :class:`gale.ConfigError` naming it), e.g. in a
topology file's ``topology(conf)``. See ``docs/kafka.md``. Everything is imported on first use, so
importing this module loads no client library (kafka-python, pika).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from gale.worker.connectors.kafka_bolt import KafkaBolt
    from gale.worker.connectors.kafka_config import bolt_settings as kafka_bolt_settings
    from gale.worker.connectors.kafka_config import spout_settings as kafka_spout_settings
    from gale.worker.connectors.kafka_spout import KafkaSpout
    from gale.worker.connectors.rabbitmq_bolt import RabbitMQBolt
    from gale.worker.connectors.rabbitmq_spout import RabbitMQSpout

#: exported name → (module, attribute)
_WHERE = {
    "KafkaSpout": ("gale.worker.connectors.kafka_spout", "KafkaSpout"),
    "KafkaBolt": ("gale.worker.connectors.kafka_bolt", "KafkaBolt"),
    "RabbitMQSpout": ("gale.worker.connectors.rabbitmq_spout", "RabbitMQSpout"),
    "RabbitMQBolt": ("gale.worker.connectors.rabbitmq_bolt", "RabbitMQBolt"),
    "kafka_spout_settings": ("gale.worker.connectors.kafka_config", "spout_settings"),
    "kafka_bolt_settings": ("gale.worker.connectors.kafka_config", "bolt_settings"),
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'gale.connectors' has no attribute {name!r}")
    module, attribute = where
    return getattr(importlib.import_module(module), attribute)
