"""Where the Kafka spout learns its topics' brokers and partitions.

Two sources: the brokers' metadata (the default; refreshed every ``kafka.partition.refresh.ms``,
which is how a topic's new partitions reach the consumer group), or, with
``kafka.zookeeper.discovery``, the layout a ZooKeeper-mode Kafka keeps under ``<root>/brokers``
(the group member then watches it itself). A topic without partitions is refused: the spout never
creates topics.
"""

from __future__ import annotations

from typing import Any

from gale.errors import ConfigError
from gale.worker.connectors.kafka_group import BrokerPaths, broker_address, parse_topic_partitions


def discover_brokers(client: Any, paths: BrokerPaths) -> list[str]:
    """PLAINTEXT ``host:port`` of every broker registered under ``<root>/brokers/ids``."""
    found = []
    try:
        ids = client.get_children(paths.ids_dir)
    except Exception as exc:  # noqa: BLE001 - NoNode and friends: say where we looked
        raise ConfigError(f"kafka.zookeeper.discovery: cannot list brokers at {paths.ids_dir}: {exc!r}") from None
    for broker_id in sorted(ids):
        path = paths.broker(broker_id)
        try:
            data, _ = client.get(path)
        except Exception:  # noqa: BLE001 - broker left meanwhile
            continue
        address = broker_address(data, path)
        if address:
            found.append(address)
    if not found:
        raise ConfigError(f"kafka.zookeeper.discovery: no broker with a PLAINTEXT listener under {paths.ids_dir}")
    return found


def initial_partitions(topics: list[str], zk_discovery: bool, zk_client: Any, consumer: Any,
                       broker_paths: BrokerPaths, bootstrap: list[str]) -> dict[str, list[int]]:
    """Each topic's partitions when the spout opens: from ZooKeeper (``zk_discovery``) or the
    brokers' metadata; a topic that does not exist is a :class:`ConfigError`."""
    out = {}
    for topic in topics:
        if zk_discovery:
            path = broker_paths.topic(topic)
            stat = zk_client.exists(path)
            parts = parse_topic_partitions(zk_client.get(path)[0], path) if stat else []
            where = f"ZooKeeper {path}"
        else:
            parts = sorted(consumer.partitions_for_topic(topic) or ())
            where = f"the brokers {','.join(bootstrap)}"
        if not parts:
            raise ConfigError(
                f"kafka.topic: topic {topic!r} does not exist on {where}; create it first "
                f"(the spout never creates topics)"
            )
        out[topic] = parts
    return out


def refreshed_partitions(consumer: Any, topics: list[str], current: dict[str, list[int]],
                         log: Any) -> dict[str, list[int]]:
    """``current`` updated from the brokers' metadata (a new dict; a topic the metadata does not
    list keeps its partitions); each change is logged."""
    out = dict(current)
    for topic in topics:
        parts = sorted(consumer.partitions_for_topic(topic) or ())
        if parts and parts != out[topic]:
            log.info("kafka-partitions-changed", topic=topic, before=len(out[topic]), after=len(parts))
            out[topic] = parts
    return out
