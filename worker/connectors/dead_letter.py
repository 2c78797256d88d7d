"""Dead letters: a record a spout cannot turn into a tuple goes to its error stream, with the reason.

One convention for the Kafka and RabbitMQ spouts. A spout built with ``error_stream="error"``
(the default) declares that stream with :data:`ERROR_FIELDS`:

=============== ==================================================================================
``raw``          the record's bytes exactly as received (Kafka value, RabbitMQ body)
``key``          the Kafka record's key bytes (``None`` for RabbitMQ)
``reason``       why it could not be emitted, e.g. ``cannot decode value as json: Expecting value...``
``source``       ``kafka`` or ``rabbitmq``
``coordinates``  where it came from: ``{"topic", "partition", "offset", "timestamp"}`` or
                 ``{"queue", "delivery_tag", "message_id", "routing_key", "exchange", "redelivered"}``
=============== ==================================================================================

The dead-letter tuple is emitted with the record's own message id, so the source position is
released only when the dead letter's tuple tree completes: a KafkaBolt or RabbitMQBolt subscribed
to the stream (``body_field``/``value_field="raw"``, ``encode="bytes"``) writes a dead-letter
topic or queue, and if that write fails the record is read (or redelivered) again and dead-lettered
again — nothing is lost. With no subscriber the tree completes at once: the record counts as done,
never silently — every dead letter is counted (``<source>_dead_letters`` in the executor stats,
``gale_worker_dead_letters_total`` in the worker's ``/metrics``), logged (``dead-letter``) and
reported as a component error (throttled). ``error_stream=None`` restores the old behaviour
(Kafka: counted, reported and skipped; RabbitMQ: rejected without requeue, to the queue's
dead-letter exchange if it has one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gale.errors import ConfigError
from gale.topology.components import Spout

ERROR_STREAM = "error"
ERROR_FIELDS = ("raw", "key", "reason", "source", "coordinates")


DECODERS = ("utf-8", "json", "bytes")


def check_stream(cls: str, stream: Any) -> str | None:
    """Validate a spout's ``error_stream`` argument (a stream id, or None for none)."""
    if stream is None:
        return None
    if not isinstance(stream, str) or not stream or stream.startswith("__"):
        raise ConfigError(f"{cls} error_stream {stream!r}: expected a stream id (a non-empty string not starting "
                          "with '__'), or None for no error stream")
    return stream


class BrokerSpout(Spout):
    """What the broker spouts share: the output fields chosen among the record's (:attr:`RECORD_FIELDS`),
    the payload's decoder, and the error stream of dead letters; each is checked when the topology is
    built, naming the spout class and the choices."""

    RECORD_FIELDS: tuple[str, ...] = ()

    def _choose(self, fields: list[str] | tuple[str, ...], decode: str, error_stream: str | None) -> None:
        cls = type(self).__name__
        self.error_stream = check_stream(cls, error_stream)
        self.fields = list(fields)
        choices = self.RECORD_FIELDS
        if not self.fields or any(f not in choices for f in self.fields):
            raise ConfigError(f"{cls} fields {self.fields!r}: choose from {', '.join(choices)}")
        if decode not in DECODERS:
            raise ConfigError(f"{cls} decode {decode!r}: expected one of {', '.join(DECODERS)}")
        self.decode = decode

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)
        if self.error_stream is not None:
            declarer.declare_stream(self.error_stream, ERROR_FIELDS)


class DeadLetters:
    """Emits one spout task's dead letters on its error stream; counts, logs and reports them."""

    def __init__(self, collector: Any, counters: Any, stream: str, source: str, log: Any):
        self.collector = collector
        self.counters = counters
        self.stream = stream
        self.source = source
        self.counter = f"{source}_dead_letters"
        self.log = log

    def emit(self, msg_id: Any, raw: bytes | None, key: bytes | None, reason: str,
             coordinates: Mapping[str, Any]) -> list[int]:
        """Emit a dead letter tracked under ``msg_id`` (the record's own message id)."""
        coords = dict(coordinates)
        targets = self.collector.emit([raw, key, reason, self.source, coords], msg_id=msg_id, stream=self.stream)
        self.counters.incr(self.counter)
        where = ", ".join(f"{k}={v}" for k, v in coords.items())
        self.log.warning("dead-letter", source=self.source, reason=reason, stream=self.stream,
                         subscribed=bool(targets), bytes=None if raw is None else len(raw), **coords)
        self.collector.report_error(
            f"{self.source} record ({where}) sent to the error stream {self.stream!r}"
            f"{'' if targets else ' (no subscriber: counted and dropped)'}: {reason}"
        )
        return targets
