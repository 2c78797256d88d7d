"""Connectors: spouts and bolts for external systems that can replay (Kafka, RabbitMQ).

- :mod:`gale.worker.connectors.kafka_spout` — a Kafka spout whose tasks form a ZooKeeper consumer group
  laid out as Kafka's old consumer lays it out (``/consumers/<group>/ids|owners|offsets``,
  ``docs/storm-model.md`` §10).
- :mod:`gale.worker.connectors.kafka_bolt` — produces tuples to a Kafka topic, acking after the broker does.
- :mod:`gale.worker.connectors.rabbitmq_spout` — consumes a RabbitMQ queue with manual acknowledgements.
- :mod:`gale.worker.connectors.rabbitmq_bolt` — publishes tuples to RabbitMQ with publisher confirms.

The pure parts (range assignment, committed-offset bookkeeping, retry schedules, config checks)
live in their own modules and are tested without I/O. Import the classes from their modules:
``from gale.worker.connectors.kafka_spout import KafkaSpout`` (importing this package loads no client
library).
"""
