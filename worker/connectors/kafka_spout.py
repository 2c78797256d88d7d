"""KafkaSpout: reads Kafka topics; its tasks form a ZooKeeper consumer group (``docs/storm-model.md`` §10).

::

    from gale.worker.connectors.kafka_spout import KafkaSpout
    builder.set_spout("sentences", KafkaSpout, 2, kwargs={"fields": ["value"]})
    conf = {"kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic": "sentences", "kafka.group": "wc"}

Each task is one member of the group ``kafka.group`` (see :mod:`gale.worker.connectors.kafka_member`):
it owns a contiguous range of each topic's partitions and reads them with kafka-python by manual
assignment (``assign``/``seek``; no broker-side group coordinator). Every record is emitted with
the message id ``(topic, partition, offset)``:

* ack → the offset is done; the committed offset (``/consumers/<group>/offsets/<topic>/<p>``, every
  ``kafka.commit.interval.ms`` and on deactivate/close) is the lowest offset not yet acked.
* fail → the offset is re-read from the broker and re-emitted after a backoff
  (``kafka.retry.*``); with ``kafka.retry.limit`` >= 0 it is dropped after that many retries
  (counted in ``kafka_dropped`` and logged).
* A committed offset outside the broker's range (below the log start, past the high watermark)
  is reset by ``kafka.offset.reset`` (``earliest``/``latest``) and counted in
  ``kafka_offset_out_of_range``. Tansu never answers OFFSET_OUT_OF_RANGE and its ListOffsets(latest)
  is wrong after multi-record batches, so both bounds are checked here: the log start with
  ListOffsets(earliest), the high watermark from fetch responses.
* On a rebalance the spout stops emitting new records, waits (``kafka.rebalance.drain.ms``) until
  every tuple from the partitions it gives up is acked — re-emitting their failed ones meanwhile, so
  a failure just before the rebalance does not make the next owner replay what was acked after it —
  commits its offsets and releases the partitions; acks of tuples from partitions it lost after that
  are ignored (the new owner resumes from the committed offset, so they are replayed there:
  at-least-once).

Output fields are chosen with ``fields`` from topic, partition, offset, key, value, timestamp;
``decode`` turns key and value bytes into ``utf-8`` text (default), parsed ``json``, or leaves
``bytes``. ``config`` holds ``kafka.*`` keys for this component that override the topology's.

A record that cannot be decoded is a **dead letter**: emitted on the ``error_stream`` (default
``"error"``; fields ``raw, key, reason, source, coordinates``) under its own message id, so its
offset is done only when the dead letter's tuple tree completes (a KafkaBolt subscribed to the
stream writes a dead-letter topic). Counted in ``kafka_dead_letters``, logged and reported; see
:mod:`gale.worker.connectors.dead_letter`.
"""

from __future__ import annotations

import json
import socket
from collections import deque
from typing import Any

from gale.clock import REAL_CLOCK
from gale.config import as_config
from gale.config_keys import Config
from gale.deadline import Deadline, within
from gale.errors import GaleError
from gale.log import get_logger
from gale.zk import start_client, stop_client
from gale.worker.connectors.dead_letter import ERROR_STREAM, BrokerSpout, DeadLetters
from gale.worker.connectors.kafka_config import (
    SPOUT_KEYS, consumer_options, group_zookeeper_config, merged, spout_settings,
)
from gale.worker.connectors.kafka_group import BrokerPaths, ConsumerGroupPaths, TopicPartition, consumer_id_string
from gale.worker.connectors.kafka_lag import LAG_SECS, partition_lag
from gale.worker.connectors.kafka_member import GroupMember, PartitionAssignment
from gale.worker.connectors.kafka_offsets import (
    DROP, EARLIEST, EMIT_RETRY, SKIP, OffsetTracker, new_partitions, plan_starts, stale_partitions,
)
from gale.worker.connectors.kafka_partitions import discover_brokers, initial_partitions, refreshed_partitions
from gale.worker.connectors.metrics import TaskCounters

log = get_logger("connectors.kafka.spout")

RECORD_FIELDS = ("topic", "partition", "offset", "key", "value", "timestamp")
COUNTERS = (
    "kafka_retried", "kafka_dropped", "kafka_lost", "kafka_offset_out_of_range", "kafka_decode_errors",
    "kafka_dead_letters", "kafka_rebalances", "kafka_rebalance_failures", "kafka_commit_writes", "kafka_owned_partitions",
    "kafka_drain_timeouts",
)
HOUSEKEEPING_SECS = 0.02
APPLY_RETRY_SECS = 1.0
#: how long deactivate waits for the offsets commit, and close for everything, while ZooKeeper is
#: connected (unreachable: the ZooKeeper steps are skipped, the committed offsets so far stand); a
#: worker's stop bounds them further (supervisor.worker.shutdown.sleep.secs)
COMMIT_WAIT_SECS = 5.0
CLOSE_SECS = 5.0


def _decoder(kind: str):
    if kind == "bytes":
        return lambda b: b
    if kind == "json":
        return lambda b: None if b is None else json.loads(b)
    return lambda b: None if b is None else b.decode("utf-8", errors="replace")


class KafkaSpout(BrokerSpout):
    RECORD_FIELDS = RECORD_FIELDS
    #: ``(topic, partition, offset)`` names a record whatever task reads it: a replay after a
    #: rebalance keeps its lineage id (Spark sinks recognise it)
    unique_message_ids = True

    def __init__(self, config: dict[str, Any] | None = None, fields: list[str] | tuple[str, ...] = ("value",),
                 decode: str = "utf-8", error_stream: str | None = ERROR_STREAM):
        self.config = dict(config or {})
        merged({}, self.config, SPOUT_KEYS)  # unknown keys fail at build time
        self._choose(fields, decode, error_stream)

    # ------------------------------------------------------------------ lifecycle

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        config = as_config(conf, "topology configuration")
        self.settings = s = spout_settings(conf, self.config, config.storm_zookeeper_session_timeout)
        self.log = log.bind(group=s.group, task=context.task_id, component=context.component_id)
        self.counters = TaskCounters(collector, COUNTERS)
        self._dead = (DeadLetters(collector, self.counters, self.error_stream, "kafka", self.log)
                      if self.error_stream is not None else None)
        self._getters = [self._getter(f) for f in self.fields]
        self._clock = REAL_CLOCK
        self.zk_client = None
        self.consumer = None
        self._member: GroupMember | None = None
        try:
            self.zk_client = self._start_zookeeper(config)
            broker_paths = BrokerPaths(s.zk_root)
            bootstrap = s.bootstrap_servers or discover_brokers(self.zk_client, broker_paths)
            self.consumer = self._start_consumer(bootstrap, context)
            self._partitions = initial_partitions(s.topics, s.zk_discovery, self.zk_client, self.consumer,
                                                  broker_paths, bootstrap)
            self.consumer_id = consumer_id_string(s.group, socket.gethostname(), int(self._clock.time() * 1000))
            self._member = GroupMember(
                self.zk_client,
                ConsumerGroupPaths(s.zk_root, s.group),
                self.consumer_id,
                s.topics,
                self._offsets_snapshot,
                partitions=None if s.zk_discovery else self._topic_partitions,
                broker_paths=broker_paths if s.zk_discovery else None,
                commit_interval=s.commit_interval,
                pending=self._pending,
                drain=s.rebalance_drain,
                backoff=s.rebalance_backoff,
                max_retries=s.rebalance_max_retries,
                clock=self._clock,
                name=f"{context.component_id}-{context.task_id}",
            )
            self._trackers: dict[TopicPartition, OffsetTracker] = {}
            self._generation = 0
            #: exactly-once (set by the first rewind): the positions of the checkpoint the topology
            #: went back to, per partition (every task's, merged); None in at-least-once topologies
            self._checkpointed: dict[TopicPartition, int] | None = None
            self._applied_since_rewind = False
            self._buffer: deque = deque()
            #: the partitions a rebalance is giving up while their failed tuples are re-emitted
            self._settling: frozenset[TopicPartition] | None = None
            self._probe: set[TopicPartition] = set()
            self._validate: dict[TopicPartition, int] = {}
            self._next_housekeeping = 0.0
            self._next_lag = 0.0
            self._next_refresh = self._clock.monotonic() + s.partition_refresh
            self._apply_retry_at = 0.0
            self._failure_reported = False
            self._seen = {"rebalances": 0, "rebalance_failures": 0, "commit_writes": 0, "drain_timeouts": 0}
            self._member.start()
        except BaseException:
            self._close_clients()
            raise
        self.log.info("kafka-spout-open", consumer=self.consumer_id, topics=s.topics, bootstrap=bootstrap)

    def _start_zookeeper(self, config: Config):
        s = self.settings
        zk_config = group_zookeeper_config(config, s)  # the cluster's credentials and ACLs, on any ZooKeeper
        try:
            return start_client(zk_config)
        except Exception as exc:  # noqa: BLE001 - kazoo's timeout says too little
            hosts = s.zk_servers or list(zk_config.storm_zookeeper_servers)
            raise GaleError(f"Kafka spout: cannot connect to ZooKeeper {hosts} for consumer group {s.group!r}: "
                            f"{type(exc).__name__}: {exc}") from exc

    def _start_consumer(self, bootstrap, context):
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        s = self.settings
        try:
            return KafkaConsumer(**consumer_options(s, bootstrap, f"gale-{context.topology_id}-{context.task_id}"))
        except KafkaError as exc:
            raise GaleError(
                f"Kafka spout: cannot reach the Kafka brokers {','.join(bootstrap)} (kafka.bootstrap.servers) "
                f"within {s.bootstrap_timeout_ms} ms: {type(exc).__name__}: {exc}"
            ) from exc

    def _close_clients(self, deadline: Deadline | None = None) -> None:
        deadline = deadline or Deadline(CLOSE_SECS)
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            within(deadline, "kafka-consumer-close", consumer.close, autocommit=False,
                   timeout_ms=int(deadline.remaining() * 1000))
        if self.zk_client is not None:
            stop_client(self.zk_client, deadline, "kafka-zookeeper-stop")

    def _zookeeper_connected(self) -> bool:
        return self.zk_client is not None and self.zk_client.connected

    def deactivate(self):
        if self._member is None:
            return
        if not self._zookeeper_connected():
            # a commit would only queue behind the reconnect: the offsets committed so far stand,
            # the acks since then replay (at-least-once)
            self.log.warning("kafka-commit-on-deactivate-skipped", reason="ZooKeeper not connected")
        elif not self._member.commit(wait=COMMIT_WAIT_SECS):
            self.log.warning("kafka-commit-on-deactivate-timed-out", wait_secs=COMMIT_WAIT_SECS)

    def close(self):
        deadline = Deadline(CLOSE_SECS)
        if self._member is not None:
            if not self._zookeeper_connected():  # its ephemeral nodes go when the session expires
                self.log.warning("kafka-group-leave-skipped", reason="ZooKeeper not connected")
            # connected: commit, release the owner nodes, delete the registration; either way the
            # member's thread ends (left running on a closed client it would outlive the spout)
            self._member.stop(timeout=deadline.earlier(1.0).remaining())
            self._publish_member_counters()
            self.counters.incr("kafka_owned_partitions", -self.counters["kafka_owned_partitions"])
        self._close_clients(deadline)
        self.log.info("kafka-spout-closed", consumer=getattr(self, "consumer_id", None))

    # ------------------------------------------------------------------ emitting

    def next_tuple(self):
        member = self._member
        if member.paused:
            giving_up = member.draining
            if giving_up and self._checkpointed is None:
                self._settle(giving_up)
                return
            if member.failure is not None and not self._failure_reported:
                self._failure_reported = True
                self.collector.report_error(f"Kafka spout: the consumer-group thread of {self.consumer_id} died "
                                            f"({member.failure}); this task emits nothing until restarted")
            return
        if self._settling is not None:
            self._end_settling()  # before a new assignment is applied: the consumer still has the old one
        assignment = member.assignment
        now = self._clock.monotonic()
        if assignment.generation != self._generation:
            if now >= self._apply_retry_at:
                self._apply(assignment, now)
            return
        if now >= self._next_housekeeping:
            self._housekeeping(now)
        buf = self._buffer
        if not buf:
            self._fill()
            if not buf:
                return
        with member.lock:
            if member.paused or member.assignment.generation != self._generation:
                return
            self._emit_buffered(now)

    def _settle(self, giving_up: frozenset[TopicPartition]) -> None:
        """A rebalance waits to give ``giving_up`` up: re-emit their failed tuples as they fall due
        and nothing new, so the commit before the hand-over gets past them and the next owner does
        not read again what this task acked after a failure (a rollback of the topology's state
        fails every tuple since its last commit)."""
        from kafka import TopicPartition as KTP

        if self._settling != giving_up:
            if self._settling is not None:
                self._end_settling()
            self._settling = giving_up  # fetch only those; the others are sought back when it ends
            self.consumer.pause(*[KTP(*tp) for tp in self._trackers if tp not in giving_up])
            self._buffer.clear()
        now = self._clock.monotonic()
        if now >= self._next_housekeeping:
            self._housekeeping(now)  # seeks the consumer back to failed offsets as they fall due
        if not self._buffer:
            self._fill()
        with self._member.lock:
            if self._member.draining == giving_up and self._member.assignment.generation == self._generation:
                self._emit_buffered(now, giving_up)

    def _end_settling(self) -> None:
        """Fetch every partition again, from where each tracker expects its next record (the
        consumer's assignment is still the one the trackers belong to)."""
        from kafka import TopicPartition as KTP

        self._settling = None
        self._buffer.clear()
        paused = self.consumer.paused()
        if paused:
            self.consumer.resume(*paused)
        for tp, tracker in self._trackers.items():
            self.consumer.seek(KTP(*tp), tracker.fetch_position)

    def _emit_buffered(self, now: float, giving_up: frozenset[TopicPartition] | None = None) -> None:
        """Emit the next buffered record that is due (under the member's lock); ``giving_up``: only
        failed tuples of those partitions again."""
        trackers, buf = self._trackers, self._buffer
        while buf:
            rec = buf.popleft()
            tracker = trackers.get((rec.topic, rec.partition))
            if tracker is None:
                continue
            if giving_up is not None and ((rec.topic, rec.partition) not in giving_up
                                          or rec.offset >= tracker.emit_position):
                continue
            verdict = tracker.on_record(rec.offset, now)
            if verdict == SKIP:
                continue
            try:
                values = [get(rec) for get in self._getters]
            except ValueError as exc:  # undecodable: a dead letter, not retried as data
                self.counters.incr("kafka_decode_errors")
                reason = f"cannot decode {exc}"
                if self._dead is None:  # no error stream: done, counted and reported
                    tracker.ack(rec.offset)
                    self.collector.report_error(f"Kafka record {rec.topic}-{rec.partition}@{rec.offset} "
                                                f"skipped: {reason}")
                    continue
                self._dead.emit((rec.topic, rec.partition, rec.offset), rec.value, rec.key, reason,
                                {"topic": rec.topic, "partition": rec.partition, "offset": rec.offset,
                                 "timestamp": rec.timestamp})
                if verdict == EMIT_RETRY:
                    self.counters.incr("kafka_retried")
                return
            self.collector.emit(values, msg_id=(rec.topic, rec.partition, rec.offset))
            if verdict == EMIT_RETRY:
                self.counters.incr("kafka_retried")
            return

    def ack(self, msg_id):
        topic, partition, offset = msg_id
        with self._member.lock:
            tracker = self._trackers.get((topic, partition))
            if tracker is not None:
                tracker.ack(offset)

    def fail(self, msg_id):
        topic, partition, offset = msg_id
        with self._member.lock:
            tracker = self._trackers.get((topic, partition))
            verdict = tracker.fail(offset, self._clock.monotonic()) if tracker is not None else None
        if verdict == DROP:
            self.counters.incr("kafka_dropped")
            self.log.warning("kafka-tuple-dropped", topic=topic, partition=partition, offset=offset,
                             retry_limit=self.settings.retry.limit)

    def _getter(self, name: str):
        decode = _decoder(self.decode)
        kind = self.decode
        if name in ("value", "key"):
            def get(r):
                try:
                    return decode(getattr(r, name))
                except ValueError as exc:  # json (and UnicodeDecodeError) errors
                    raise ValueError(f"the {name} as {kind}: {exc}") from None
            return get
        return lambda r: getattr(r, name)

    # ------------------------------------------------------------------ consumer upkeep

    def _fill(self) -> None:
        from kafka.errors import KafkaError, OffsetOutOfRangeError

        try:
            batches = self.consumer.poll(timeout_ms=0, max_records=self.settings.fetch_max_records)
        except OffsetOutOfRangeError as exc:
            # a real Kafka broker: the fetch position is outside the log
            for tp, offset in (exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}).items():
                self._out_of_range((tp.topic, tp.partition), offset)
            return
        except KafkaError as exc:
            self.log.warning("kafka-poll-failed", error=f"{type(exc).__name__}: {exc}")
            return
        for ktp, records in batches.items():
            tp = (ktp.topic, ktp.partition)
            self._validate.pop(tp, None)  # records at the stored offset: it was in range
            if tp in self._probe:
                continue
            self._buffer.extend(records)
        if self._probe or self._validate:
            self._check_watermarks()

    def _check_watermarks(self) -> None:
        """Resolve 'latest' starts and validate stored offsets against the fetched high watermark."""
        from kafka import TopicPartition as KTP

        for tp in list(self._probe):
            hw = self.consumer.highwater(KTP(*tp))
            if hw is not None:
                self._probe.discard(tp)
                self._start(tp, hw)
        for tp, stored in list(self._validate.items()):
            hw = self.consumer.highwater(KTP(*tp))
            if hw is not None:
                del self._validate[tp]
                if stored > hw:
                    self._out_of_range(tp, stored, high_watermark=hw)

    def _start(self, tp: TopicPartition, offset: int) -> None:
        from kafka import TopicPartition as KTP

        tracker = OffsetTracker(offset, self.settings.retry)
        with self._member.lock:
            self._trackers = {**self._trackers, tp: tracker}
        self.consumer.seek(KTP(*tp), offset)
        self._purge(tp)

    def _purge(self, tp: TopicPartition) -> None:
        """Forget buffered records of ``tp`` (the consumer was repositioned)."""
        if self._buffer:
            keep = [r for r in self._buffer if (r.topic, r.partition) != tp]
            self._buffer.clear()
            self._buffer.extend(keep)

    def _out_of_range(self, tp: TopicPartition, position: int, log_start: int | None = None,
                      high_watermark: int | None = None) -> None:
        from kafka import TopicPartition as KTP

        ktp = KTP(*tp)
        policy = self.settings.offset_reset
        if policy == EARLIEST:
            target = log_start if log_start is not None else self.consumer.beginning_offsets([ktp], 5000)[ktp]
        else:
            target = high_watermark if high_watermark is not None else self.consumer.end_offsets([ktp], 5000)[ktp]
        with self._member.lock:
            tracker = self._trackers.get(tp)
            lost = tracker.reset(target) if tracker is not None else 0
        if tracker is None:
            self._start(tp, target)
        else:
            self.consumer.seek(ktp, target)
            self._purge(tp)
        self.counters.incr("kafka_offset_out_of_range")
        self.counters.incr("kafka_lost", lost)
        self.log.warning("kafka-offset-out-of-range", topic=tp[0], partition=tp[1], offset=position,
                         log_start=log_start, high_watermark=high_watermark, policy=policy, reset_to=target,
                         lost_failed=lost)

    def _apply(self, a: PartitionAssignment, now: float) -> None:
        """Take over a new assignment: drop lost partitions, position the new ones."""
        from kafka import TopicPartition as KTP
        from kafka.errors import KafkaError

        self._apply_retry_at = now + APPLY_RETRY_SECS  # if anything below fails, try again later
        policy = self.settings.offset_reset
        fresh = new_partitions(a.partitions, a.retained, self._trackers)
        ends: dict = {}
        try:
            log_start = {}
            if fresh:
                ktps = [KTP(*tp) for tp in fresh]
                log_start = {(k.topic, k.partition): v for k, v in self.consumer.beginning_offsets(ktps, 5000).items()}
            stored = a.start_offsets if self._checkpointed is None else {**a.start_offsets, **self._checkpointed}
            plan = plan_starts(a.partitions, a.retained, self._trackers, stored, log_start, policy)
            if stale_partitions(self.consumer.assignment(), plan.keep):
                # forget the consumer's state (high watermark) of every partition we did not keep —
                # also of those it still holds after a rewind or a lost session dropped our trackers:
                # a high watermark from before another task read on would make a checkpointed offset
                # look past the end, and the reset policy would read the partition again
                self.consumer.assign([KTP(*tp) for tp in sorted(plan.keep)])
            self.consumer.assign([KTP(*tp) for tp in sorted(a.partitions)])
            if plan.probe:
                ends = self.consumer.end_offsets([KTP(*tp) for tp in sorted(plan.probe)], 5000)
        except KafkaError as exc:
            self.log.warning("kafka-assign-failed", error=f"{type(exc).__name__}: {exc}")
            return
        for tp, (stored, start) in plan.below_log_start.items():
            self.counters.incr("kafka_offset_out_of_range")
            self.log.warning("kafka-offset-out-of-range", topic=tp[0], partition=tp[1], offset=stored,
                             log_start=start, policy=policy)
        keep = {tp: self._trackers[tp] for tp in plan.keep}
        starts, probe, validate = plan.starts, set(plan.probe), dict(plan.validate)
        trackers = dict(keep)
        for tp, offset in starts.items():
            trackers[tp] = OffsetTracker(offset, self.settings.retry)
        self._buffer.clear()
        for tp, tracker in keep.items():
            self.consumer.seek(KTP(*tp), tracker.fetch_position)
        for tp, offset in starts.items():
            self.consumer.seek(KTP(*tp), offset)
        for ktp, end in ends.items():
            # 'latest': read from ListOffsets(latest) until a fetch reports the true high watermark
            self.consumer.seek(ktp, end)
        self._probe, self._validate = probe, validate
        dropped = len(self._trackers) - len(keep)
        with self._member.lock:
            self._trackers = trackers
            self._generation = a.generation
        if self._checkpointed is not None:
            if self._applied_since_rewind:
                # partitions moved between tasks mid-checkpoint: only a rollback to the last cut
                # keeps every partition's records counted once
                self.collector.rewind_needed()
            self._applied_since_rewind = True
        self._apply_retry_at = 0.0
        self.counters.incr("kafka_owned_partitions", len(a.partitions) - self.counters["kafka_owned_partitions"])
        self.log.info("kafka-assignment", generation=a.generation, owned=[f"{t}-{p}" for t, p in sorted(a.partitions)],
                      kept=len(keep), dropped=dropped, probing=len(probe))

    def _housekeeping(self, now: float) -> None:
        from kafka import TopicPartition as KTP

        self._next_housekeeping = now + HOUSEKEEPING_SECS
        with self._member.lock:
            seeks = [(tp, t.seek_target(now)) for tp, t in self._trackers.items() if t.failed]
            seeks = [(tp, o) for tp, o in seeks if o is not None]
            for tp, offset in seeks:
                self._trackers[tp].seek(offset)
        for tp, offset in seeks:
            self.consumer.seek(KTP(*tp), offset)
            self._purge(tp)
        self._publish_member_counters()
        if now >= self._next_lag:
            self._next_lag = now + LAG_SECS
            self.counters.set_details("kafka_lag", self._lag())
        if not self.settings.zk_discovery and now >= self._next_refresh:
            self._next_refresh = now + self.settings.partition_refresh
            self._refresh_partitions()

    def _lag(self) -> dict[str, float]:
        from kafka import TopicPartition as KTP

        return partition_lag(self._trackers, lambda topic, p: self.consumer.highwater(KTP(topic, p)))

    def _refresh_partitions(self) -> None:
        current = refreshed_partitions(self.consumer, self.settings.topics, self._partitions, self.log)
        if current != self._partitions:
            self._partitions = current
            self._member.partitions_changed()

    def _topic_partitions(self, topic: str) -> list[int]:
        """Partitions of ``topic`` as last seen in Kafka's metadata (read by the member thread)."""
        return self._partitions[topic]

    def _publish_member_counters(self) -> None:
        m = self._member
        for attr, name in (("rebalances", "kafka_rebalances"), ("rebalance_failures", "kafka_rebalance_failures"),
                           ("commit_writes", "kafka_commit_writes"), ("drain_timeouts", "kafka_drain_timeouts")):
            value = getattr(m, attr)
            self.counters.incr(name, value - self._seen[attr])
            self._seen[attr] = value

    def _offsets_snapshot(self):
        """Called by the group member, under its lock: the offsets to commit. Exactly-once: the
        positions of the checkpoint the topology last went back to (never ahead of a checkpoint:
        the checkpoint, not the group's offsets, is where a rewind goes)."""
        if self._checkpointed is not None:
            return self._generation, {tp: o for tp, o in self._checkpointed.items() if tp in self._trackers}
        return self._generation, {tp: t.committed() for tp, t in self._trackers.items()}

    def _pending(self, partitions) -> int:
        """Called by the group member, under its lock: tuples of ``partitions`` emitted and not yet
        acked, failed ones waiting for their retry included (exactly-once: 0, the checkpoint is
        where the next owner starts)."""
        if self._checkpointed is not None:
            return 0
        return sum(t.pending() for tp, t in self._trackers.items() if tp in partitions)

    # ------------------------------------------------------------------ exactly-once

    #: the executor passes :meth:`rewind` the union of every task's position: a partition the
    #: consumer group moves between tasks is found in whichever task checkpointed it
    merge_positions = True

    def position(self):
        """``{"topic/partition": next offset}`` of the owned partitions (called with nothing pending)."""
        with self._member.lock:
            return {f"{t}/{p}": tracker.committed() for (t, p), tracker in self._trackers.items()}

    def rewind(self, position):
        """Forget every record emitted or buffered and take the current assignment again, each
        partition from its position in ``position`` (else the group's committed offset, else
        ``kafka.offset.reset``). A later change of the assignment asks the topology to go back to its
        last checkpoint again (the partitions' new owners must start from the same cut)."""
        checkpointed = {}
        for key, offset in (position or {}).items():
            topic, _, partition = key.rpartition("/")
            checkpointed[(topic, int(partition))] = int(offset)
        with self._member.lock:
            self._checkpointed = checkpointed
            self._trackers = {}
            self._generation = -1  # take the assignment again on the next next_tuple
        self._buffer.clear()
        self._applied_since_rewind = False

    # ------------------------------------------------------------------ introspection (tests, UI)

    @property
    def member(self) -> GroupMember:
        return self._member
