"""The chaos suite's second workload: Kafka → keyed count with exactly-once state in Redis.

* Services: a Tansu Kafka-protocol broker and a Redis server (append-only file, ``appendfsync
  always``), both listening on the veth host address so workers on either node reach them. Redis is
  a component of this workload only; the ``redis_kill`` fault kills it (``c.redis``).
* Input: :class:`KeyedProducer` sends records whose value is a key ``k0 … k12`` round-robin over
  the topic's partitions at a steady rate, on its own thread; a record is an input once the broker
  acknowledged it.
* Topology: ``tests/chaos_topology/eo_count.py`` (KafkaSpout → keys → StatefulBolt count, state
  exactly-once on Redis, a checkpoint every second).
* Convergence: every partition's position checkpointed at the topic's end offset (the high
  watermark), then two more checkpoints committed — nothing is left to count.
* Check (:func:`check_counts`, pure): the topic read back from the broker gives the expected count
  per key; the committed counts in Redis must equal them — ``lost`` (expected − committed, where
  positive, summed) and ``over_counted`` (committed − expected, where positive, summed) both 0.
  And every checkpoint seen committed during the run (:class:`tests.eo_cuts.CutWatcher`, sampling
  from the producer's start to the check) is a consistent cut: its counts add up to its positions.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gale.redisserver import RedisServer
from gale.worker.state.exactly_once import committed_position, read_epoch, source_namespace
from gale.worker.state.inspect import read_committed
from gale.worker.state.redis_provider import RedisStateProvider
from tests.brokers import TansuBroker
from tests.chaos.cluster import TOPOLOGY_NAME, log
from tests.chaos.schedule import EO_KINDS, Step, bounded_eo_plan
from tests.chaos.workload import Workload
from tests.chaos_topology.eo_count import KEY_GROUPS, SPOUT_TASKS
from tests.eo_cuts import CutWatcher, settled
from tests.waiting import poll_until

if TYPE_CHECKING:
    from tests.chaos.cluster import ChaosCluster
    from tests.chaos.run import RunResult

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "chaos-keys"
PARTITIONS = 4
KEYS = tuple(f"k{i}" for i in range(13))


# ------------------------------------------------------------------------------------- checker


@dataclass
class CountCheck:
    expected_total: int
    committed_total: int
    lost: int = 0  # Σ (expected − committed) over keys where positive
    over_counted: int = 0  # Σ (committed − expected) over keys where positive
    lost_keys: dict[str, int] = field(default_factory=dict)
    over_counted_keys: dict[str, int] = field(default_factory=dict)
    unexpected_keys: list[str] = field(default_factory=list)  # committed, never in the topic
    malformed: dict[str, object] = field(default_factory=dict)  # committed values that are not counts

    @property
    def ok(self) -> bool:
        return not self.lost and not self.over_counted and not self.malformed


def check_counts(expected: Mapping[str, int], committed: Mapping[Any, Any]) -> CountCheck:
    """Compare the committed count per key with the expected one (pure)."""
    malformed = {str(k): v for k, v in committed.items() if not isinstance(v, int) or isinstance(v, bool) or v < 0}
    counts = {str(k): v for k, v in committed.items() if str(k) not in malformed}
    r = CountCheck(expected_total=sum(expected.values()), committed_total=sum(counts.values()), malformed=malformed)
    for key in sorted(set(expected) | set(counts)):
        diff = expected.get(key, 0) - counts.get(key, 0)
        if diff > 0:
            r.lost_keys[key] = diff
        elif diff < 0:
            r.over_counted_keys[key] = -diff
    r.lost = sum(r.lost_keys.values())
    r.over_counted = sum(r.over_counted_keys.values())
    r.unexpected_keys = sorted(k for k in counts if k not in expected)
    return r


# ------------------------------------------------------------------------------------- services


class ChaosRedis(RedisServer):
    """The dev Redis bound to the veth host address; protected mode off (workers in the namespace
    connect from 10.X.Y.2, which protected mode would refuse without a password; the link is private)."""

    def _write_config(self) -> Path:
        cfg = super()._write_config()
        cfg.write_text(cfg.read_text().replace("protected-mode yes", "protected-mode no"))
        return cfg


class ChaosKafka(TansuBroker):
    """The Tansu broker listening on (and advertising) the veth host address."""

    def __init__(self, workdir: Path, host: str):
        super().__init__(workdir)
        self.host = host


class KeyedProducer:
    """Records ``key`` (the value; the Kafka key too) round-robin over keys and partitions at
    ``rate`` per second; ``acked`` counts per key what the broker acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float):
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.acked: Counter = Counter()
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-kafka-producer", daemon=True)

    def start(self) -> KeyedProducer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    @property
    def count(self) -> int:
        with self._lock:
            return sum(self.acked.values())

    def _done(self, key: str):
        def ok(_metadata) -> None:
            with self._lock:
                self.acked[key] += 1
        return ok

    def _failed(self, exc: BaseException) -> None:
        with self._lock:
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def _run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5, acks="all", retries=0)
        try:
            started, n = time.monotonic(), 0
            while not self._stop.is_set():
                delay = started + n / self.rate - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    break
                key = KEYS[n % len(KEYS)]
                future = producer.send(self.topic, value=key.encode(), key=key.encode(),
                                       partition=(n // len(KEYS)) % self.partitions)
                future.add_callback(self._done(key)).add_errback(self._failed)
                n += 1
            producer.flush(30)
        finally:
            producer.close(10)


# ------------------------------------------------------------------------------------- workload


class KafkaEOWorkload(Workload):
    """Kafka → keyed count, exactly-once state on Redis (``kafka-eo``)."""

    name = "kafka-eo"
    topology = ROOT / "tests" / "chaos_topology" / "eo_count.py"

    def __init__(self, rate: float = 100.0):
        self.rate = rate
        self.kafka: ChaosKafka | None = None
        self.redis: ChaosRedis | None = None
        self.producer: KeyedProducer | None = None
        self._provider: RedisStateProvider | None = None
        self._sampler_provider: RedisStateProvider | None = None
        self.cuts: CutWatcher | None = None
        self._last_progress = 0
        self._expected: Counter | None = None

    def kinds(self, zookeepers: int) -> tuple[str, ...]:
        if zookeepers > 1:
            raise ValueError("the kafka-eo workload runs on a single ZooKeeper server (its fault is zk_restart)")
        return EO_KINDS

    def bounded_plan(self, zookeepers: int) -> list[Step]:
        self.kinds(zookeepers)
        return bounded_eo_plan()

    def start_services(self, c: ChaosCluster) -> None:
        self.redis = ChaosRedis(host=c.host, data_dir=c.base / "redis")
        self.redis.start()
        c.redis = self.redis
        self.kafka = ChaosKafka(c.base / "kafka", c.host)
        (c.base / "kafka").mkdir(parents=True, exist_ok=True)
        self.kafka.start()
        self.kafka.create_topic(TOPIC, PARTITIONS)
        self._provider = RedisStateProvider(self.redis.url)
        self._sampler_provider = RedisStateProvider(self.redis.url, timeout=1.0)
        log(f"Kafka {self.kafka.bootstrap} (topic {TOPIC}, {PARTITIONS} partitions), Redis {self.redis.url}")

    def submit_conf(self, c: ChaosCluster) -> dict[str, Any]:
        return {"kafka.bootstrap.servers": self.kafka.bootstrap, "kafka.topic": TOPIC, "kafka.group": TOPOLOGY_NAME,
                "kafka.zookeeper.root": "/kafka",
                "topology.state.provider": "redis", "topology.state.redis.url": self.redis.url}

    def start(self, c: ChaosCluster) -> None:
        self.producer = KeyedProducer(self.kafka.bootstrap, TOPIC, PARTITIONS, self.rate).start()
        # every committed checkpoint seen during the run must be a consistent cut, not only the last
        self.cuts = CutWatcher(self.redis.url, TOPOLOGY_NAME, lambda p, _n: self.checkpointed_offsets(p),
                               lambda p, _n: sum(v for v in self.committed(p).values() if isinstance(v, int)),
                               interval=0.02).__enter__()

    def committed(self, provider: RedisStateProvider | None = None) -> dict[Any, Any]:
        return read_committed(provider or self._provider, TOPOLOGY_NAME, "count", key_groups=KEY_GROUPS)

    def progress(self) -> int:
        """Records counted in the committed state (the last value while Redis is down)."""
        try:
            self._last_progress = sum(v for v in self.committed(self._sampler_provider).values() if isinstance(v, int))
        except Exception:  # noqa: BLE001 - Redis down (its fault): no new observation
            pass
        return self._last_progress

    def stop_input(self) -> int:
        if self.producer is None:
            return 0
        self.producer.stop()
        return self.producer.count

    def checkpointed_offsets(self, provider: RedisStateProvider | None = None) -> dict[int, int]:
        """Partition → the offset the committed checkpoint resumes from (every source task's, merged)."""
        namespaces = [source_namespace(TOPOLOGY_NAME, "kafka", i) for i in range(SPOUT_TASKS)]
        merged = committed_position(provider or self._provider, namespaces, merge=True)
        return {int(key.rpartition("/")[2]): offset for key, offset in (merged or {}).items()}

    def converge(self, c: ChaosCluster, timeout: float) -> bool:
        """Every partition's position checkpointed at the topic's end, then two more checkpoints
        committed (the counts can no longer change)."""
        deadline = time.monotonic() + timeout
        hws = self.kafka.high_watermarks(TOPIC, PARTITIONS)

        def at_the_end() -> tuple[int] | None:  # (the txid that checkpointed them,): 0 is a txid too
            try:
                if self.checkpointed_offsets() == hws:
                    return (read_epoch(self._provider, TOPOLOGY_NAME).txid,)
            except Exception:  # noqa: BLE001 - Redis still coming back
                pass
            return None

        found = poll_until(at_the_end, deadline)
        if found is None:
            log(f"positions not checkpointed at the topic's end {hws}: {self.checkpointed_offsets()}")
            return False
        (txid,) = found

        def two_more_commits() -> bool:
            epoch = read_epoch(self._provider, TOPOLOGY_NAME)
            if settled(epoch) >= txid + 2:
                log(f"converged: positions {hws} checkpointed by txid {txid}; {epoch}")
                return True
            return False

        return bool(poll_until(two_more_commits, deadline))

    def expected(self) -> Counter:
        """Counts per key of every record in the topic, read back from the broker."""
        if self._expected is None:
            records = self.kafka.read_all(TOPIC, PARTITIONS, timeout=60)
            self._expected = Counter(r.value.decode() for r in records)
        return self._expected

    def check(self, result: RunResult) -> None:
        expected = self.expected()
        acked = self.producer.acked if self.producer is not None else Counter()
        result.publish_errors = len(self.producer.errors) if self.producer is not None else 0
        short = {k: n - expected.get(k, 0) for k, n in acked.items() if n > expected.get(k, 0)}
        if short:
            raise RuntimeError(f"the topic holds fewer records than the broker acknowledged: {short}")
        if self.cuts is not None:
            self.cuts.__exit__(None, None, None)
            result.cuts_checked = len(self.cuts.cuts)
            result.inconsistent_cuts = [f"txid {c.txid} gen {c.generation}: positions {c.positions} "
                                        f"(sum {sum(c.positions.values())}), state sum {c.total}"
                                        for c in self.cuts.inconsistent()]
            self.cuts = None
        verdict = check_counts(expected, self.committed())
        result.n = verdict.expected_total
        result.lost, result.lost_keys = verdict.lost, verdict.lost_keys
        result.over_counted, result.over_counted_keys = verdict.over_counted, verdict.over_counted_keys
        result.unexpected = len(verdict.unexpected_keys) + len(verdict.malformed)
        log(f"counts: expected {verdict.expected_total}, committed {verdict.committed_total}, "
            f"lost {verdict.lost} {verdict.lost_keys}, over-counted {verdict.over_counted} {verdict.over_counted_keys}")

    def stop_services(self) -> None:
        if self.cuts is not None:
            self.cuts.__exit__(None, None, None)
            self.cuts = None
        if self.producer is not None:
            self.producer.stop()
        for p in (self._provider, self._sampler_provider):
            if p is not None:
                try:
                    p.close()
                except Exception:  # noqa: BLE001
                    pass
        if self.kafka is not None:
            self.kafka.stop()
        if self.redis is not None:
            self.redis.cleanup()
