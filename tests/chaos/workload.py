"""The workload (a publisher of known message ids) and the checker (lost, duplicates).

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
