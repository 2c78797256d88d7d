"""Workloads: what a chaos run feeds the topology, and how it checks the result.

A :class:`Workload` owns its services (brokers), its topology, its input and its checker;
:func:`tests.chaos.run.run_chaos` drives any of them through the same timeline. Two exist:

* :class:`RabbitWorkload` (``rabbitmq``, the default): known message ids through RabbitMQ → work →
  sink files, at-least-once — lost ids must be none, duplicates are reported.
* :class:`tests.chaos.eo_workload.KafkaEOWorkload` (``kafka-eo``): keyed records through Kafka →
  a stateful count with exactly-once state in Redis — lost and over-counted must both be 0.

The RabbitMQ workload's parts:

* :class:`Publisher` publishes ids ``0, 1, 2, …`` as persistent messages at a steady rate on its
  own thread, with publisher confirms: an id counts as an input only once the broker confirmed it.
* :class:`SinkReader` follows the sink's ``sink-*.log`` files incrementally (complete lines only)
  and keeps how many times each id was processed.
* :func:`check` compares the two: lost ids (confirmed, never processed — must be none), duplicate
  deliveries (processed more than once — allowed by at-least-once, reported), and ids processed
  that were never published (must be none too: that would be a corrupted sink).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.chaos.broker import ChaosRabbitMQ
from tests.chaos.cluster import log
from tests.chaos.schedule import Step, bounded_ensemble_plan, bounded_plan, kinds_for
from tests.waiting import poll_until

if TYPE_CHECKING:
    from tests.chaos.cluster import ChaosCluster
    from tests.chaos.run import RunResult

ROOT = Path(__file__).resolve().parents[2]


class Publisher:
    def __init__(self, host: str, port: int, queue: str, rate: float, limit: int | None = None):
        self.host, self.port, self.queue = host, port, queue
        self.rate = rate
        self.limit = limit
        self.confirmed: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Publisher:
        self._thread = threading.Thread(target=self._run, name="chaos-publisher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def count(self) -> int:
        return len(self.confirmed)

    def _connect(self):
        import pika

        conn = pika.BlockingConnection(pika.ConnectionParameters(host=self.host, port=self.port,
                                                                 connection_attempts=1, socket_timeout=5))
        ch = conn.channel()
        ch.queue_declare(self.queue, durable=True)
        ch.confirm_delivery()
        return conn, ch

    def _run(self) -> None:
        import pika

        props = pika.BasicProperties(delivery_mode=2)
        conn = ch = None
        next_id = 0
        started = time.monotonic()
        while not self._stop.is_set() and (self.limit is None or next_id < self.limit):
            due = started + next_id / self.rate
            delay = due - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                break
            try:
                if conn is None:
                    conn, ch = self._connect()
                ch.basic_publish("", self.queue, str(next_id).encode(), props, mandatory=True)
            except Exception as exc:  # noqa: BLE001 - unconfirmed: publish the same id again
                self.errors.append(f"{type(exc).__name__}: {exc}")
                try:
                    if conn is not None:
                        conn.close()
                except Exception:  # noqa: BLE001
                    pass
                conn = ch = None
                self._stop.wait(0.5)
                continue
            self.confirmed.append(next_id)
            next_id += 1
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass


class SinkReader:
    """Counts of processed ids from ``<state>/sink-*.log``, read incrementally."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.counts: Counter = Counter()
        self.lines = 0
        self._offsets: dict[Path, int] = {}
        self._lock = threading.Lock()

    def poll(self) -> Counter:
        with self._lock:
            for path in sorted(self.state_dir.glob("sink-*.log")):
                offset = self._offsets.get(path, 0)
                try:
                    with open(path, "rb") as fh:
                        fh.seek(offset)
                        data = fh.read()
                except FileNotFoundError:
                    continue
                end = data.rfind(b"\n") + 1  # complete lines only; the rest is read next time
                for line in data[:end].split():
                    self.counts[int(line)] += 1
                    self.lines += 1
                self._offsets[path] = offset + end
            return self.counts

    @property
    def distinct(self) -> int:
        return len(self.counts)

    def progress(self) -> int:
        """Distinct ids processed so far (what the run's sampler follows)."""
        self.poll()
        return self.distinct


@dataclass
class CheckResult:
    n: int
    processed: int  # distinct published ids seen in the sink
    lost: list[int] = field(default_factory=list)
    duplicates: int = 0  # extra deliveries beyond the first
    duplicated_ids: int = 0  # ids delivered more than once
    unexpected: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.lost and not self.unexpected

    def summary(self) -> dict[str, object]:
        return {"n": self.n, "processed": self.processed, "lost": len(self.lost), "lost_ids": self.lost[:50],
                "duplicates": self.duplicates, "duplicated_ids": self.duplicated_ids,
                "unexpected": len(self.unexpected), "unexpected_ids": self.unexpected[:50]}


def check(published: Iterable[int], counts: Counter) -> CheckResult:
    inputs = set(published)
    lost = sorted(i for i in inputs if counts.get(i, 0) == 0)
    unexpected = sorted(i for i in counts if i not in inputs)
    dup_ids = [i for i in inputs if counts.get(i, 0) > 1]
    return CheckResult(
        n=len(inputs), processed=len(inputs) - len(lost), lost=lost,
        duplicates=sum(counts[i] - 1 for i in dup_ids), duplicated_ids=len(dup_ids), unexpected=unexpected,
    )


# ------------------------------------------------------------------------------------- workloads


class Workload:
    """What :func:`~tests.chaos.run.run_chaos` needs of a workload, in the order it calls it:
    :meth:`start_services` (on a thread while the cluster starts), :meth:`submit_conf`,
    :meth:`start` (input begins), :meth:`progress` (sampled), :meth:`stop_input`,
    :meth:`converge`, :meth:`check`, and :meth:`stop_services` at the end, whatever happened."""

    name = ""
    topology: Path

    def kinds(self, zookeepers: int) -> tuple[str, ...]:
        """The fault kinds a soak deals."""
        raise NotImplementedError

    def bounded_plan(self, zookeepers: int) -> list[Step]:
        raise NotImplementedError

    def start_services(self, c: ChaosCluster) -> None:
        raise NotImplementedError

    def submit_conf(self, c: ChaosCluster) -> dict[str, Any]:
        raise NotImplementedError

    def start(self, c: ChaosCluster) -> None:
        raise NotImplementedError

    def progress(self) -> int:
        """A count that grows while the topology makes progress (outputs so far)."""
        raise NotImplementedError

    def stop_input(self) -> int:
        """Stop feeding input; the number of inputs (acknowledged by the broker)."""
        raise NotImplementedError

    def converge(self, c: ChaosCluster, timeout: float) -> bool:
        """Wait until every input has been processed (False if it does not happen)."""
        raise NotImplementedError

    def check(self, result: RunResult) -> None:
        """Compare inputs and outputs, filling ``result``'s verdict fields."""
        raise NotImplementedError

    def stop_services(self) -> None:
        raise NotImplementedError


class RabbitWorkload(Workload):
    """Message ids through RabbitMQ → work → sink files (at-least-once)."""

    name = "rabbitmq"
    topology = ROOT / "tests" / "chaos_topology" / "pipeline.py"

    def __init__(self, rate: float = 40.0, queue: str = "chaos-input"):
        self.rate = rate
        self.queue = queue
        self.rabbit: ChaosRabbitMQ | None = None
        self.publisher: Publisher | None = None
        self.sink: SinkReader | None = None

    def kinds(self, zookeepers: int) -> tuple[str, ...]:
        return kinds_for(zookeepers)

    def bounded_plan(self, zookeepers: int) -> list[Step]:
        return bounded_ensemble_plan() if zookeepers > 1 else bounded_plan()

    def start_services(self, c: ChaosCluster) -> None:
        self.rabbit = ChaosRabbitMQ(c.base / "rabbitmq", also_listen=c.host)
        self.rabbit.start(timeout=120)
        self.rabbit.declare(self.queue)
        log(f"RabbitMQ {c.host}:{self.rabbit.port}")

    def submit_conf(self, c: ChaosCluster) -> dict[str, Any]:
        return self.rabbit.spout_conf(self.queue)

    def start(self, c: ChaosCluster) -> None:
        self.sink = SinkReader(c.state_dir)
        self.publisher = Publisher("127.0.0.1", self.rabbit.port, self.queue, self.rate).start()

    def progress(self) -> int:
        return self.sink.progress() if self.sink is not None else 0

    def stop_input(self) -> int:
        if self.publisher is None:
            return 0
        self.publisher.stop()
        return self.publisher.count

    def queue_counts(self) -> tuple[int, int] | None:
        try:
            return self.rabbit.queue_counts(self.queue)
        except Exception:  # noqa: BLE001
            return None

    def converge(self, c: ChaosCluster, timeout: float, settle_secs: float = 20.0) -> bool:
        """Wait until the queue is empty with nothing unacknowledged and every published id is in
        the sink. Gives up early when the queue has been empty and idle for ``settle_secs`` with
        ids still missing (nothing is left that could bring them: they are lost)."""
        wanted = set(self.publisher.confirmed)
        idle_since: list[float] = []  # when the queue was last seen empty and idle

        def verdict() -> str | None:
            counts = self.sink.poll()
            missing = sum(1 for i in wanted if counts.get(i, 0) == 0)
            if self.queue_counts() != (0, 0):
                idle_since.clear()
                return None
            if not missing:
                return "converged"
            if not idle_since:
                idle_since.append(time.monotonic())
            if time.monotonic() - idle_since[0] > settle_secs:
                log(f"queue empty for {settle_secs}s with {missing} ids missing from the sink")
                return "lost"
            return None

        return poll_until(verdict, time.monotonic() + timeout, interval=1.0) == "converged"

    def check(self, result: RunResult) -> None:
        result.publish_errors = len(self.publisher.errors)
        verdict = check(self.publisher.confirmed, self.sink.poll())
        result.lost, result.lost_ids = len(verdict.lost), verdict.lost[:100]
        result.duplicates, result.duplicated_ids = verdict.duplicates, verdict.duplicated_ids
        result.unexpected = len(verdict.unexpected)

    def stop_services(self) -> None:
        if self.publisher is not None:
            self.publisher.stop()
        if self.rabbit is not None:
            self.rabbit.cleanup()
