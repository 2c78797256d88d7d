"""RabbitMQSpout: consumes a RabbitMQ queue with manual acknowledgements (Storm's Kestrel model,
``docs/storm-model.md`` §11).

::

    from gale.worker.connectors.rabbitmq_spout import RabbitMQSpout
    builder.set_spout("events", RabbitMQSpout, 2)
    conf = {"rabbitmq.host": "127.0.0.1", "rabbitmq.queue": "events", "topology.max.spout.pending": 500}

Reliability is the broker's: every delivery is emitted with a message id and stays unacknowledged
in RabbitMQ until its tuple tree completes. Spout ``ack`` → ``basic.ack``; ``fail`` (or a timeout)
→ ``basic.reject`` with requeue, so the broker delivers it again. If the worker dies, its
connection closes and the broker requeues everything it had not acked. The channel's prefetch is
``topology.max.spout.pending`` (100 when unset; ``rabbitmq.prefetch`` overrides), so the broker never
hands a task more messages than it may have pending.

Why a consumer thread (and not ``process_data_events(time_limit=0)`` inside ``next_tuple``): pika's
``BlockingConnection`` must be serviced regularly for heartbeats, and ``next_tuple`` is not called
while the topology is deactivated or the task is at max pending; connecting (and reconnecting with
backoff after a broker restart) can take seconds and must not stall the executor thread, which may
run other executors. So one thread per task owns the connection: it consumes into a queue that
``next_tuple`` drains without blocking, and acks/rejects reach it through
``add_callback_threadsafe`` (the one thread-safe pika call). A message id carries the connection
generation: after a reconnect, acks of deliveries from the old connection are dropped (the broker
already requeued them), and undelivered stale messages are never emitted.

``open`` connects once synchronously, so an unreachable broker, bad credentials or a missing queue
fail with a clear error; later disconnects are retried forever with exponential backoff
(``rabbitmq.reconnect.*``). Counters: ``rabbitmq_acked``, ``rabbitmq_rejected``, ``rabbitmq_stale``
(acks/fails for a closed connection), ``rabbitmq_reconnects``, ``rabbitmq_poison`` (bodies that
``decode`` cannot parse), ``rabbitmq_dead_letters``.

A body that cannot be decoded is a **dead letter**: emitted on the ``error_stream`` (default
``"error"``; fields ``raw, key, reason, source, coordinates``) under the delivery's own message id,
so it is acked to the broker only when the dead letter's tuple tree completes (a RabbitMQBolt
subscribed to the stream writes a dead-letter queue; if that fails the message is requeued and
dead-lettered again). See :mod:`gale.worker.connectors.dead_letter`. With ``error_stream=None``
it is rejected without requeue (to the queue's dead-letter exchange, if one is configured) and
reported, instead of an endless redelivery loop.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gale.config import as_config
from gale.errors import ConfigError, GaleError
from gale.log import get_logger
from gale.worker.connectors.dead_letter import ERROR_STREAM, BrokerSpout, DeadLetters
from gale.worker.connectors.metrics import TaskCounters

log = get_logger("connectors.rabbitmq.spout")

KEYS: dict[str, tuple[Any, str]] = {
    "rabbitmq.url": (None, "amqp://user:pass@host:port/vhost (overrides host, port, virtual.host, username, password)"),
    "rabbitmq.host": ("localhost", "broker host"),
    "rabbitmq.port": (5672, "broker AMQP port"),
    "rabbitmq.virtual.host": ("/", "virtual host"),
    "rabbitmq.username": ("guest", "user"),
    "rabbitmq.password": ("guest", "password"),
    "rabbitmq.queue": (None, "queue to consume"),
    "rabbitmq.queue.declare": (False, "declare the queue (durable) if it does not exist"),
    "rabbitmq.prefetch": (None, "unacked deliveries per task (default: topology.max.spout.pending, else 100)"),
    "rabbitmq.heartbeat.secs": (30, "AMQP heartbeat"),
    "rabbitmq.connection.timeout.ms": (5000, "socket/connect timeout"),
    "rabbitmq.reconnect.initial.delay.ms": (100, "first reconnect delay"),
    "rabbitmq.reconnect.max.delay.ms": (5000, "largest reconnect delay (doubling)"),
}
FIELDS = ("body", "routing_key", "redelivered", "headers", "message_id", "exchange")
DEFAULT_PREFETCH = 100


@dataclass(frozen=True)
class RabbitMQSettings:
    params: Any  # pika.ConnectionParameters
    where: str  # for messages: host:port/vhost
    queue: str
    declare: bool
    prefetch: int
    reconnect_initial: float
    reconnect_max: float


def int_setting(c: Mapping[str, Any], key: str, minimum: int) -> int:
    v = c[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"invalid value for {key!r}: {v!r}; expected an integer >= {minimum}")
    return v


def str_setting(c: Mapping[str, Any], key: str) -> str:
    v = c[key]
    if not isinstance(v, str) or not v:
        raise ConfigError(f"invalid value for {key!r}: {v!r}; expected a non-empty string")
    return v


def merged(conf: Mapping[str, Any], overrides: Mapping[str, Any] | None, keys: Mapping[str, Any] = KEYS) -> dict:
    """Defaults ← topology conf ← component ``config``; refuses unknown override keys."""
    for name in overrides or {}:
        if name not in keys:
            raise ConfigError(f"unknown RabbitMQ setting {name!r}; known: {', '.join(sorted(keys))}")
    c = {k: d for k, (d, _) in keys.items()}
    c.update({k: v for k, v in conf.items() if k in keys and v is not None})
    c.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return c


def connection_params(c: Mapping[str, Any]) -> tuple[Any, str]:
    """pika connection parameters from merged ``rabbitmq.*`` keys, and ``host:port`` for messages."""
    import pika

    timeout = int_setting(c, "rabbitmq.connection.timeout.ms", 1) / 1000.0
    heartbeat = int_setting(c, "rabbitmq.heartbeat.secs", 0)
    if c["rabbitmq.url"] is not None:
        try:
            params = pika.URLParameters(str_setting(c, "rabbitmq.url"))
        except Exception as exc:  # noqa: BLE001 - pika's parse errors vary
            raise ConfigError(f"invalid value for 'rabbitmq.url': {c['rabbitmq.url']!r}: {exc}") from None
        params.heartbeat = heartbeat
        params.socket_timeout = timeout
        params.blocked_connection_timeout = timeout * 6
        params.connection_attempts = 1
    else:
        params = pika.ConnectionParameters(
            host=str_setting(c, "rabbitmq.host"),
            port=int_setting(c, "rabbitmq.port", 1),
            virtual_host=str_setting(c, "rabbitmq.virtual.host"),
            credentials=pika.PlainCredentials(str(c["rabbitmq.username"]), str(c["rabbitmq.password"])),
            heartbeat=heartbeat,
            socket_timeout=timeout,
            blocked_connection_timeout=timeout * 6,
            connection_attempts=1,
        )
    where = f"{params.host}:{params.port}" + ("" if params.virtual_host == "/" else f" (vhost {params.virtual_host})")
    return params, where


def rabbitmq_settings(conf: Mapping[str, Any], overrides: Mapping[str, Any] | None = None, *,
                      max_spout_pending: int | None = None) -> RabbitMQSettings:
    """The spout's ``rabbitmq.*`` settings from the topology's ``conf`` and the spout's own
    ``overrides``, validated; the prefetch defaults to ``max_spout_pending``
    (``topology.max.spout.pending``) when that is set."""
    c = merged(conf, overrides)
    if not c["rabbitmq.queue"]:
        raise ConfigError("rabbitmq.queue is required (the queue to consume), e.g. -c rabbitmq.queue=events")
    queue = str_setting(c, "rabbitmq.queue")
    declare = c["rabbitmq.queue.declare"]
    if not isinstance(declare, bool):
        raise ConfigError(f"invalid value for 'rabbitmq.queue.declare': {declare!r}; expected true or false")
    prefetch = int_setting(c, "rabbitmq.prefetch", 1) if c["rabbitmq.prefetch"] is not None else (
        max_spout_pending or DEFAULT_PREFETCH)
    params, where = connection_params(c)
    initial = int_setting(c, "rabbitmq.reconnect.initial.delay.ms", 1) / 1000.0
    maximum = int_setting(c, "rabbitmq.reconnect.max.delay.ms", 1) / 1000.0
    return RabbitMQSettings(params, where, queue, declare, int(prefetch), initial, max(initial, maximum))


class QueueConsumer:
    """Owns one pika BlockingConnection on its own thread; see the module docstring."""

    def __init__(self, settings: RabbitMQSettings, deliveries: deque, name: str):
        self.settings = settings
        self.deliveries = deliveries
        self.name = name
        #: generation of the live connection; -1 while disconnected
        self.generation = -1
        self._next_generation = 0
        self._conn: Any = None
        self._channel: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reconnects = 0
        self.log = log.bind(queue=settings.queue, consumer=name)

    # --- connection (consumer thread, or the opening thread before the consumer thread starts)
    def connect(self) -> None:
        import pika
        from pika.exceptions import ChannelClosedByBroker

        s = self.settings
        conn = pika.BlockingConnection(s.params)
        try:
            ch = conn.channel()
            try:
                ch.queue_declare(s.queue, durable=True, passive=not s.declare)
            except ChannelClosedByBroker as exc:
                if exc.reply_code == 404:
                    raise ConfigError(
                        f"rabbitmq.queue: queue {s.queue!r} does not exist on {s.where} "
                        f"(declare it, or set rabbitmq.queue.declare=true)"
                    ) from None
                raise
            ch.basic_qos(prefetch_count=s.prefetch)
            self._next_generation += 1
            generation = self._next_generation
            ch.basic_consume(s.queue, functools.partial(self._on_message, generation), auto_ack=False)
        except BaseException:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
            raise
        self._conn, self._channel = conn, ch
        self.generation = generation

    def _on_message(self, generation, _channel, method, properties, body) -> None:
        self.deliveries.append((generation, method, properties, body))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"rabbitmq-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """End the consumer thread within ``timeout``; it settles the queued acks and closes the
        connection itself. A thread still blocked then (a broker that stopped answering) is left
        to finish alone (a daemon): pika is not thread-safe, so its connection is not touched from
        here, and the broker requeues whatever was not acked when the connection dies."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self.log.warning("rabbitmq-consumer-stop-abandoned", timeout_secs=timeout)
                return
        self._close()

    def _close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        self.generation = -1
        if conn is not None:
            try:
                if conn.is_open:
                    conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    def _run(self) -> None:
        from pika.exceptions import AMQPError

        delay = self.settings.reconnect_initial
        while not self._stop.is_set():
            if self._conn is None:
                try:
                    self.connect()
                except (AMQPError, OSError, ConfigError) as exc:
                    self.log.warning("rabbitmq-reconnect-failed", error=f"{type(exc).__name__}: {exc}",
                                     retry_in_secs=round(delay, 3))
                    self._stop.wait(delay)
                    delay = min(delay * 2, self.settings.reconnect_max)
                    continue
                self.reconnects += 1
                delay = self.settings.reconnect_initial
                self.log.info("rabbitmq-reconnected", generation=self.generation)
            try:
                self._conn.process_data_events(time_limit=0.1)
            except (AMQPError, OSError) as exc:
                self.log.warning("rabbitmq-disconnected", error=f"{type(exc).__name__}: {exc}")
                self._close()
        if self._conn is not None:
            try:  # run the acks queued before stop, so a clean close does not requeue acked messages
                self._conn.process_data_events(time_limit=0)
            except (AMQPError, OSError):
                pass
        self._close()

    # --- acks (executor thread → consumer thread)
    def settle(self, generation: int, delivery_tag: int, ack: bool, requeue: bool = True) -> bool:
        """Ack, or reject (requeue by default), a delivery; False when its connection is gone."""
        conn = self._conn
        if conn is None or generation != self.generation:
            return False
        try:
            conn.add_callback_threadsafe(functools.partial(self._settle, generation, delivery_tag, ack, requeue))
        except Exception:  # noqa: BLE001 - the connection closed meanwhile: the broker requeues
            return False
        return True

    def _settle(self, generation: int, delivery_tag: int, ack: bool, requeue: bool) -> None:
        ch = self._channel
        if ch is None or generation != self.generation or not ch.is_open:
            return
        if ack:
            ch.basic_ack(delivery_tag)
        else:
            ch.basic_reject(delivery_tag, requeue=requeue)


class RabbitMQSpout(BrokerSpout):
    RECORD_FIELDS = FIELDS

    def __init__(self, config: dict[str, Any] | None = None, fields: list[str] | tuple[str, ...] = ("body",),
                 decode: str = "utf-8", error_stream: str | None = ERROR_STREAM):
        self.config = dict(config or {})
        merged({}, self.config)  # unknown keys fail at build time
        self._choose(fields, decode, error_stream)

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        from pika.exceptions import AMQPError, ProbableAccessDeniedError, ProbableAuthenticationError

        pending = as_config(conf, "topology configuration").topology_max_spout_pending
        self.settings = s = rabbitmq_settings(conf, self.config, max_spout_pending=pending)
        self.counters = TaskCounters(collector, ("rabbitmq_acked", "rabbitmq_rejected", "rabbitmq_stale",
                                                 "rabbitmq_reconnects", "rabbitmq_poison", "rabbitmq_dead_letters"))
        self._dead = (DeadLetters(collector, self.counters, self.error_stream, "rabbitmq",
                                  log.bind(queue=s.queue, task=context.task_id, component=context.component_id))
                      if self.error_stream is not None else None)
        self.deliveries: deque = deque()
        self.consumer = QueueConsumer(s, self.deliveries, f"{context.component_id}-{context.task_id}")
        try:
            self.consumer.connect()
        except (ProbableAuthenticationError, ProbableAccessDeniedError) as exc:
            raise GaleError(f"RabbitMQ spout: {s.where} refused the credentials (rabbitmq.username/password "
                            f"or rabbitmq.url): {type(exc).__name__}") from None
        except (AMQPError, OSError) as exc:
            raise GaleError(f"RabbitMQ spout: cannot connect to {s.where} (rabbitmq.host/port or rabbitmq.url): "
                            f"{type(exc).__name__}: {exc}") from None
        self.consumer.start()
        self._seen_reconnects = 0
        self._getters = [self._getter(f) for f in self.fields]
        log.info("rabbitmq-spout-open", queue=s.queue, broker=s.where, prefetch=s.prefetch, task=context.task_id)

    def _getter(self, name: str):
        if name == "body":
            if self.decode == "bytes":
                return lambda m, p, b: b
            if self.decode == "json":
                import json

                return lambda m, p, b: json.loads(b)
            return lambda m, p, b: b.decode("utf-8", errors="replace")
        if name in ("routing_key", "redelivered", "exchange"):
            return lambda m, p, b: getattr(m, name)
        return lambda m, p, b: getattr(p, name)

    def next_tuple(self):
        deliveries = self.deliveries
        consumer = self.consumer
        while deliveries:
            generation, method, props, body = deliveries.popleft()
            if generation != consumer.generation:
                continue  # from a closed connection: the broker has requeued it
            try:
                values = [get(method, props, body) for get in self._getters]
            except ValueError as exc:
                self.counters.incr("rabbitmq_poison")
                reason = f"cannot decode the body as {self.decode}: {exc}"
                if self._dead is None:
                    # a poison message would come back forever: reject it without requeue (the queue's
                    # dead-letter exchange gets it, if one is configured) and report it
                    self.collector.report_error(f"RabbitMQ message on {self.settings.queue!r} rejected without "
                                                f"requeue: {reason}")
                    consumer.settle(generation, method.delivery_tag, ack=False, requeue=False)
                    return
                self._dead.emit((generation, method.delivery_tag), body, None, reason, {
                    "queue": self.settings.queue, "delivery_tag": method.delivery_tag,
                    "message_id": getattr(props, "message_id", None), "routing_key": method.routing_key,
                    "exchange": method.exchange, "redelivered": bool(method.redelivered),
                })
                return
            self.collector.emit(values, msg_id=(generation, method.delivery_tag))
            return
        reconnects = consumer.reconnects
        if reconnects != self._seen_reconnects:
            self.counters.incr("rabbitmq_reconnects", reconnects - self._seen_reconnects)
            self._seen_reconnects = reconnects

    def ack(self, msg_id):
        if self.consumer.settle(msg_id[0], msg_id[1], ack=True):
            self.counters.incr("rabbitmq_acked")
        else:
            self.counters.incr("rabbitmq_stale")

    def fail(self, msg_id):
        if self.consumer.settle(msg_id[0], msg_id[1], ack=False):
            self.counters.incr("rabbitmq_rejected")
        else:
            self.counters.incr("rabbitmq_stale")

    def close(self):
        consumer = getattr(self, "consumer", None)
        if consumer is not None:
            consumer.stop()
