"""The ``kafka.*`` configuration keys of the Kafka spout and bolt: defaults and validation.

Keys live in the topology configuration (``-c kafka.topic=words``) or, per component, in the
``config`` argument of :class:`~gale.worker.connectors.kafka_spout.KafkaSpout` /
:class:`~gale.worker.connectors.kafka_bolt.KafkaBolt`, which wins. Errors are
:class:`~gale.errors.ConfigError` naming the key, the value and what is expected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gale.config_keys import Config
from gale.errors import ConfigError
from gale.worker.connectors.kafka_group import check_name
from gale.worker.connectors.kafka_offsets import RESET_POLICIES, RetryPolicy

#: key → (default, description); documented in docs/kafka.md
SPOUT_KEYS: dict[str, tuple[Any, str]] = {
    "kafka.bootstrap.servers": (None, "host:port[,host:port...] of the brokers (or a list)"),
    "kafka.topic": (None, "topic(s) to read: a name, a comma-separated string or a list"),
    "kafka.group": (None, "consumer group id: names /consumers/<group> in ZooKeeper"),
    "kafka.zookeeper.root": ("/", "root of the Kafka layout (/consumers, /brokers) in ZooKeeper"),
    "kafka.zookeeper.servers": (None, "ZooKeeper of the group (default: storm.zookeeper.servers)"),
    "kafka.zk.session.timeout.ms": (None, "session timeout (default: storm.zookeeper.session.timeout)"),
    "kafka.zookeeper.discovery": (False, "read brokers and partitions from <root>/brokers (ZooKeeper-mode Kafka)"),
    "kafka.offset.reset": ("earliest", "where to start without a committed offset, or when it is out of range"),
    "kafka.commit.interval.ms": (2000, "period of offset commits to ZooKeeper"),
    "kafka.retry.initial.delay.ms": (100, "delay before the first retry of a failed tuple"),
    "kafka.retry.delay.multiplier": (2.0, "backoff multiplier per further failure"),
    "kafka.retry.max.delay.ms": (10000, "largest retry delay"),
    "kafka.retry.limit": (-1, "retries per failed offset before it is dropped (-1: forever)"),
    "kafka.rebalance.backoff.ms": (2000, "wait between rebalance attempts"),
    "kafka.rebalance.drain.ms": (5000, "how long a rebalance waits for tuples in flight from partitions the task "
                                       "gives up to be acked, before it commits and releases them"),
    "kafka.rebalance.max.retries": (None, "attempts before an error is logged (default: enough to outlast the session timeout)"),
    "kafka.fetch.max.records": (500, "records taken from the consumer per poll"),
    "kafka.fetch.max.wait.ms": (100, "how long the broker may hold a fetch when there is no data (also delays "
                                     "ListOffsets queued behind it on the connection)"),
    "kafka.partition.refresh.ms": (30000, "how often Kafka metadata is checked for new partitions"),
    "kafka.bootstrap.timeout.ms": (10000, "how long open() waits for the brokers"),
    "kafka.consumer.config": ({}, "extra kafka-python KafkaConsumer settings (security, sizes)"),
}

BOLT_KEYS: dict[str, tuple[Any, str]] = {
    "kafka.bootstrap.servers": (None, "host:port[,host:port...] of the brokers (or a list)"),
    "kafka.topic": (None, "topic to produce to"),
    "kafka.producer.acks": ("all", "broker acknowledgement the bolt waits for: all, 1 or 0"),
    "kafka.producer.linger.ms": (5, "producer batching delay"),
    "kafka.producer.max.block.ms": (10000, "how long a send may block (metadata, full buffer)"),
    "kafka.bootstrap.timeout.ms": (10000, "how long prepare() waits for the brokers"),
    "kafka.producer.config": ({}, "extra kafka-python KafkaProducer settings"),
}


def merged(conf: Mapping[str, Any], overrides: Mapping[str, Any] | None, keys: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults ← topology conf ← component ``config``; refuses unknown ``kafka.*`` override keys."""
    for name in overrides or {}:
        if name not in keys:
            raise ConfigError(f"unknown Kafka setting {name!r}; known: {', '.join(sorted(keys))}")
    out = {name: default for name, (default, _) in keys.items()}
    out.update({k: v for k, v in conf.items() if k in keys and v is not None})
    out.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return out


def _fail(key: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(f"invalid value for {key!r}: {value!r}; expected {expected}")


def _names(key: str, value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value if v.strip()]
    else:
        raise _fail(key, value, f"{what} as a string or a list of strings")
    if not items:
        raise _fail(key, value, f"at least one {what}")
    return items


def servers(key: str, value: Any) -> list[str]:
    items = _names(key, value, "host:port")
    for item in items:
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise _fail(key, value, "host:port entries (for example 127.0.0.1:9092)")
    return items


def _int(conf: Mapping[str, Any], key: str, minimum: int) -> int:
    value = conf[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(key, value, f"an integer >= {minimum}")
    return value


def _number(conf: Mapping[str, Any], key: str, minimum: float) -> float:
    value = conf[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise _fail(key, value, f"a number >= {minimum}")
    return float(value)


def _mapping(conf: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = conf[key]
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _fail(key, value, "a mapping of kafka-python setting names to values")
    return dict(value)


def _required(conf: Mapping[str, Any], key: str, example: str) -> Any:
    value = conf.get(key)
    if value is None or value == "" or value == []:
        raise ConfigError(f"{key} is required ({SPOUT_KEYS.get(key, BOLT_KEYS.get(key))[1]}), e.g. -c {key}={example}")
    return value


@dataclass(frozen=True)
class SpoutSettings:
    bootstrap_servers: list[str] | None
    topics: list[str]
    group: str
    zk_root: str
    zk_servers: list[str] | None
    zk_session_timeout_ms: int | None
    zk_discovery: bool
    offset_reset: str
    commit_interval: float
    retry: RetryPolicy
    rebalance_backoff: float
    rebalance_drain: float
    rebalance_max_retries: int
    fetch_max_records: int
    fetch_max_wait_ms: int
    partition_refresh: float
    bootstrap_timeout_ms: int
    consumer_config: dict[str, Any] = field(default_factory=dict)


def spout_settings(conf: Mapping[str, Any], overrides: Mapping[str, Any] | None = None,
                   session_timeout_ms: int | None = None) -> SpoutSettings:
    """Validate the spout's keys. ``session_timeout_ms`` is the ZooKeeper session timeout the
    rebalance retries must outlast (``storm.zookeeper.session.timeout`` when not overridden)."""
    c = merged(conf, overrides, SPOUT_KEYS)
    discovery = c["kafka.zookeeper.discovery"]
    if not isinstance(discovery, bool):
        raise _fail("kafka.zookeeper.discovery", discovery, "true or false")
    topics = _names("kafka.topic", _required(c, "kafka.topic", "words"), "topic name")
    for t in topics:
        try:
            check_name("topic", t)
        except ValueError as exc:
            raise ConfigError(f"invalid value for 'kafka.topic': {exc}") from None
    group = _required(c, "kafka.group", "wordcount")
    try:
        check_name("consumer group", group)
    except ValueError as exc:
        raise ConfigError(f"invalid value for 'kafka.group': {exc}") from None
    bootstrap = None
    if c["kafka.bootstrap.servers"] is not None or not discovery:
        bootstrap = servers("kafka.bootstrap.servers",
                            _required(c, "kafka.bootstrap.servers", "127.0.0.1:9092"))
    root = c["kafka.zookeeper.root"]
    if not isinstance(root, str) or not root.startswith("/"):
        raise _fail("kafka.zookeeper.root", root, "a znode path starting with '/' (default '/')")
    zk_servers = None
    if c["kafka.zookeeper.servers"] is not None:
        zk_servers = servers("kafka.zookeeper.servers", c["kafka.zookeeper.servers"])
    zk_timeout = None
    if c["kafka.zk.session.timeout.ms"] is not None:
        zk_timeout = _int(c, "kafka.zk.session.timeout.ms", 1)
    reset = c["kafka.offset.reset"]
    if reset not in RESET_POLICIES:
        raise _fail("kafka.offset.reset", reset, "one of " + ", ".join(RESET_POLICIES))
    retry = RetryPolicy(
        initial_delay=_number(c, "kafka.retry.initial.delay.ms", 0) / 1000.0,
        multiplier=_number(c, "kafka.retry.delay.multiplier", 1.0),
        max_delay=_number(c, "kafka.retry.max.delay.ms", 0) / 1000.0,
        limit=_int(c, "kafka.retry.limit", -1),
    )
    backoff_ms = _int(c, "kafka.rebalance.backoff.ms", 1)
    session_ms = zk_timeout or session_timeout_ms or 0
    needed = max(4, math.floor(session_ms / backoff_ms) + 1)
    if c["kafka.rebalance.max.retries"] is None:
        max_retries = needed
    else:
        max_retries = _int(c, "kafka.rebalance.max.retries", 1)
        if max_retries * backoff_ms <= session_ms:
            raise ConfigError(
                f"kafka.rebalance.max.retries ({max_retries}) × kafka.rebalance.backoff.ms ({backoff_ms}) must exceed "
                f"the ZooKeeper session timeout ({session_ms} ms), so that a dead member's owner nodes expire before "
                f"the retries run out; use at least {needed} retries"
            )
    return SpoutSettings(
        bootstrap_servers=bootstrap,
        topics=topics,
        group=group,
        zk_root=root,
        zk_servers=zk_servers,
        zk_session_timeout_ms=zk_timeout,
        zk_discovery=discovery,
        offset_reset=reset,
        commit_interval=_int(c, "kafka.commit.interval.ms", 1) / 1000.0,
        retry=retry,
        rebalance_backoff=backoff_ms / 1000.0,
        rebalance_drain=_int(c, "kafka.rebalance.drain.ms", 0) / 1000.0,
        rebalance_max_retries=max_retries,
        fetch_max_records=_int(c, "kafka.fetch.max.records", 1),
        fetch_max_wait_ms=_int(c, "kafka.fetch.max.wait.ms", 0),
        partition_refresh=_int(c, "kafka.partition.refresh.ms", 1) / 1000.0,
        bootstrap_timeout_ms=_int(c, "kafka.bootstrap.timeout.ms", 1),
        consumer_config=_mapping(c, "kafka.consumer.config"),
    )


def group_zookeeper_config(config: Config, settings: SpoutSettings) -> Config:
    """The ZooKeeper client configuration of the spout's consumer group: the cluster's, with the
    group's own servers (``kafka.zookeeper.servers``) and session timeout when set. The cluster's
    digest credentials (``storm.zookeeper.auth.*``) always apply, so the group's nodes get the
    cluster's ACL (its identity may write, everyone may read) on a separate ZooKeeper too."""
    if settings.zk_servers:
        config = replace(config, storm_zookeeper_servers=tuple(settings.zk_servers))
    if settings.zk_session_timeout_ms:
        config = replace(config, storm_zookeeper_session_timeout=settings.zk_session_timeout_ms)
    return config


def consumer_options(settings: SpoutSettings, bootstrap: list[str], client_id: str) -> dict[str, Any]:
    """The spout's ``KafkaConsumer`` arguments: manual assignment (no group coordinator, no
    auto-commit, no topic creation, no reset of its own: out-of-range offsets are the spout's to
    judge), then ``kafka.consumer.config`` over them."""
    options = dict(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        allow_auto_create_topics=False,
        bootstrap_timeout_ms=settings.bootstrap_timeout_ms,
        max_poll_records=settings.fetch_max_records,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        metadata_max_age_ms=int(settings.partition_refresh * 1000),
        client_id=client_id,
    )
    options.update(settings.consumer_config)
    return options


@dataclass(frozen=True)
class BoltSettings:
    bootstrap_servers: list[str]
    topic: str
    acks: Any
    linger_ms: int
    max_block_ms: int
    bootstrap_timeout_ms: int
    producer_config: dict[str, Any] = field(default_factory=dict)


def bolt_settings(conf: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> BoltSettings:
    c = merged(conf, overrides, BOLT_KEYS)
    bootstrap = servers("kafka.bootstrap.servers", _required(c, "kafka.bootstrap.servers", "127.0.0.1:9092"))
    topic = _required(c, "kafka.topic", "counts")
    try:
        check_name("topic", topic)
    except ValueError as exc:
        raise ConfigError(f"invalid value for 'kafka.topic': {exc}") from None
    acks = c["kafka.producer.acks"]
    if acks in ("1", "0"):
        acks = int(acks)
    if acks not in ("all", 1, 0, -1):
        raise _fail("kafka.producer.acks", acks, "all, 1 or 0")
    return BoltSettings(
        bootstrap_servers=bootstrap,
        topic=topic,
        acks=acks,
        linger_ms=_int(c, "kafka.producer.linger.ms", 0),
        max_block_ms=_int(c, "kafka.producer.max.block.ms", 1),
        bootstrap_timeout_ms=_int(c, "kafka.bootstrap.timeout.ms", 1),
        producer_config=_mapping(c, "kafka.producer.config"),
    )
