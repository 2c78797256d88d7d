"""KafkaBolt: produces each input tuple to a Kafka topic and acks it once the broker has.

::

    from gale.worker.connectors.kafka_bolt import KafkaBolt
    builder.set_bolt("to-kafka", KafkaBolt, 2, kwargs={"config": {"kafka.topic": "counts"},
                                                       "key_field": "word"}).fields_grouping("count", ["word"])

* The record key is the ``key_field`` value (none by default); the value is the ``value_field``
  value, or — without ``value_field`` — the whole tuple as a JSON object (``{"word": .., "count": ..}``).
  ``encode`` turns a key/value into bytes: ``utf-8`` (``str(x)``), ``json``, or ``bytes`` (as is).
* Reliability: the tuple is acked only when the producer's future succeeds (the broker
  acknowledged with ``kafka.producer.acks``, default ``all``) and failed when it fails, so its
  spout tuple replays. Futures complete on kafka-python's I/O thread; their outcomes are queued and
  applied on the executor thread, in ``execute`` and on tick tuples (every 0.1 s, requested by
  :meth:`component_configuration`). ``cleanup`` flushes the producer and applies what completed.
* ``prepare`` fails with a clear error when the brokers cannot be reached or the topic does not
  exist (checked with DescribeTopics, which never creates it: Tansu auto-creates topics on a
  producer's metadata request).

Counters in the executor stats: ``kafka_produced``, ``kafka_produce_errors``.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from gale.errors import ConfigError, GaleError
from gale.log import get_logger
from gale.topology.components import Bolt
from gale.topology.tuple import TICK_STREAM
from gale.worker.connectors.kafka_config import BOLT_KEYS, bolt_settings, merged
from gale.worker.connectors.metrics import TaskCounters

log = get_logger("connectors.kafka.bolt")

ENCODERS = ("utf-8", "json", "bytes")
TICK_SECS = 0.1


def encoder(kind: str):
    if kind == "json":
        return lambda v: json.dumps(v, separators=(",", ":"), default=str).encode()
    if kind == "bytes":
        def raw(v):
            if v is not None and not isinstance(v, (bytes, bytearray)):
                raise TypeError(f"encode='bytes' needs bytes values, got {type(v).__name__}")
            return v
        return raw
    return lambda v: v.encode() if isinstance(v, str) else (v if isinstance(v, (bytes, bytearray)) else str(v).encode())


class KafkaBolt(Bolt):
    def __init__(self, config: dict[str, Any] | None = None, key_field: str | None = None,
                 value_field: str | None = None, encode: str = "utf-8"):
        self.config = dict(config or {})
        merged({}, self.config, BOLT_KEYS)  # unknown keys fail at build time
        if encode not in ENCODERS:
            raise ConfigError(f"KafkaBolt encode {encode!r}: expected one of {', '.join(ENCODERS)}")
        self.key_field = key_field
        self.value_field = value_field
        self.encode = encode

    def component_configuration(self) -> dict[str, Any]:
        return {"topology.tick.tuple.freq.secs": TICK_SECS}

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        self.settings = s = bolt_settings(conf, self.config)
        self.log = log.bind(task=context.task_id, component=context.component_id, topic=s.topic)
        self.counters = TaskCounters(collector, ("kafka_produced", "kafka_produce_errors"))
        self._encode = encoder(self.encode)
        self._done: deque = deque()
        options = dict(
            bootstrap_servers=s.bootstrap_servers,
            acks=s.acks,
            linger_ms=s.linger_ms,
            max_block_ms=s.max_block_ms,
            bootstrap_timeout_ms=s.bootstrap_timeout_ms,
            allow_auto_create_topics=False,
            client_id=f"gale-{context.topology_id}-{context.task_id}",
        )
        options.update(s.producer_config)
        try:
            self.producer = KafkaProducer(**options)
        except KafkaError as exc:
            raise GaleError(
                f"Kafka bolt: cannot reach the Kafka brokers {','.join(s.bootstrap_servers)} "
                f"(kafka.bootstrap.servers) within {s.bootstrap_timeout_ms} ms: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            exists = self._topic_exists(options)
        except KafkaError as exc:
            self.producer.close(timeout=1)
            raise GaleError(f"Kafka bolt: cannot describe topic {s.topic!r} on {','.join(s.bootstrap_servers)}: "
                            f"{type(exc).__name__}: {exc}") from exc
        if not exists:
            self.producer.close(timeout=1)
            raise ConfigError(
                f"kafka.topic: topic {s.topic!r} does not exist on the brokers {','.join(s.bootstrap_servers)}; "
                f"create it first (the bolt never creates topics)"
            )

    def _topic_exists(self, options: dict[str, Any]) -> bool:
        """Ask with DescribeTopics: a producer's metadata request may auto-create the topic (Tansu does)."""
        from kafka.admin import KafkaAdminClient

        admin_options = {k: v for k, v in options.items()
                         if k in ("bootstrap_servers", "bootstrap_timeout_ms", "client_id")
                         or k.startswith(("security_", "ssl_", "sasl_"))}
        admin = KafkaAdminClient(**admin_options)
        try:
            (desc,) = admin.describe_topics([self.settings.topic])
        finally:
            admin.close()
        return desc.get("error_code") == 0 and bool(desc.get("partitions"))

    def execute(self, tup):
        if tup.stream == TICK_STREAM:
            self._apply_completions()
            return
        self._apply_completions()
        try:
            key = self._encode(tup[self.key_field]) if self.key_field else None
            if self.value_field:
                value = self._encode(tup[self.value_field])
            else:
                value = json.dumps(tup.as_dict(), separators=(",", ":"), default=str).encode()
            future = self.producer.send(self.settings.topic, key=key, value=value)
        except Exception as exc:  # noqa: BLE001 - encoding or a send that could not even be queued
            self.counters.incr("kafka_produce_errors")
            self.collector.report_error(f"Kafka bolt: cannot produce tuple to {self.settings.topic!r}: "
                                        f"{type(exc).__name__}: {exc}")
            self.collector.fail(tup)
            return
        future.add_callback(self._on_sent, tup)
        future.add_errback(self._on_error, tup)

    # producer I/O thread: only queue the outcome
    def _on_sent(self, tup, _metadata):
        self._done.append((tup, None))

    def _on_error(self, tup, exc):
        self._done.append((tup, exc))

    def _apply_completions(self) -> None:
        done = self._done
        while done:
            tup, exc = done.popleft()
            if exc is None:
                self.counters.incr("kafka_produced")
                self.collector.ack(tup)
            else:
                self.counters.incr("kafka_produce_errors")
                self.log.warning("kafka-produce-failed", error=f"{type(exc).__name__}: {exc}")
                self.collector.fail(tup)

    def cleanup(self):
        producer = getattr(self, "producer", None)
        if producer is None:
            return
        try:
            producer.flush(timeout=5)
        except Exception as exc:  # noqa: BLE001 - unsent records fail below via their futures
            self.log.warning("kafka-flush-failed", error=str(exc))
        self._apply_completions()
        producer.close(timeout=5)
