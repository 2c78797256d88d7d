"""One member of a Kafka consumer group kept in ZooKeeper (``docs/storm-model.md`` §10): the ZooKeeper shell.

A :class:`GroupMember` is one Kafka spout task. It registers the ephemeral
``/consumers/<group>/ids/<consumerId>`` node, watches the group's members (and, with ZooKeeper
discovery, the topics' partition lists), computes the range assignment
(:func:`~gale.worker.connectors.kafka_group.range_assign`), claims ephemeral ``owners/<topic>/<p>`` nodes
and commits ``offsets/<topic>/<p>``.

Threads: all ZooKeeper I/O runs on the member's own thread (``kafka-group-<task>``). Kazoo watch
callbacks and the session listener only put an event on its queue; the thread drains the queue,
so a burst of events coalesces into one rebalance (the old consumer's watcher-executor thread).
The spout's executor thread never waits for ZooKeeper, except for the bounded
:meth:`GroupMember.commit` on deactivate and :meth:`GroupMember.stop` on close.

The spout and the member share :attr:`GroupMember.lock`. Under it the member sets ``paused`` (the
spout stops emitting), takes the spout's committed offsets, and publishes a new
:class:`PartitionAssignment`; under it the spout emits, acks and fails. The offsets are always safe to
commit: they are the lowest unacked offsets, which only move forward.

A rebalance attempt (the old consumer's, ``docs/storm-model.md`` §10):

1. read the members (``ids``, watched) and the partitions, compute the assignment;
   if this member's share is unchanged and it still holds every owner node, stop here;
2. pause the spout; wait (at most ``drain`` seconds) until every tuple from a partition it gives up
   is acked — meanwhile (``draining``) the spout re-emits their failed tuples and nothing new — so
   their acks count before the offsets move to the next owner; commit its offsets, release (delete)
   every owner node it holds;
3. claim each assigned partition with an ephemeral owner node; if one is still held by another
   member, delete everything claimed in this attempt and retry after ``backoff`` (the previous
   owner may be dead and its session not yet expired: ``retries × backoff`` exceeds the session
   timeout). Unlike the old consumer, a member whose retries run out logs an error and keeps
   trying with the same backoff instead of sitting idle without partitions;
4. read the committed offsets of the claimed partitions and publish the new assignment.

Session states (kazoo's contract): SUSPENDED pauses emitting (the ephemerals may be gone);
LOST forgets the ownership (they are gone) and, once a new session is CONNECTED, the member
registers again and rebalances.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from gale.clock import REAL_CLOCK
from gale.log import get_logger
from gale.worker.connectors.kafka_group import (
    BrokerPaths,
    ConsumerGroupPaths,
    GroupDataError,
    TopicPartition,
    encode_offset,
    parse_offset,
    parse_registration,
    parse_topic_partitions,
    range_assign,
    registration_json,
    thread_id,
)

log = get_logger("connectors.kafka.group")

#: how often a draining rebalance looks at the tuples still in flight
DRAIN_POLL_SECS = 0.005

#: returns (generation the spout has applied, {(topic, partition): offset to resume from})
OffsetsSource = Callable[[], "tuple[int, Mapping[TopicPartition, int]]"]
#: called under the member's lock: how many tuples of these partitions are still pending (emitted and
#: not acked: in flight, or failed and waiting for their retry)
PendingSource = Callable[[frozenset], int]
#: returns the sorted partition ids of a topic (from Kafka metadata)
PartitionsSource = Callable[[str], "list[int]"]


@dataclass(frozen=True)
class PartitionAssignment:
    """What the member owns, published to the spout. ``start_offsets`` holds the committed offset
    of each partition (None: never committed); ``retained`` were owned without interruption in the
    previous generation too (the spout keeps their in-flight state)."""

    generation: int = 0
    partitions: frozenset[TopicPartition] = frozenset()
    start_offsets: Mapping[TopicPartition, int | None] = field(default_factory=dict)
    retained: frozenset[TopicPartition] = frozenset()


class GroupMember:
    def __init__(
        self,
        client: Any,
        paths: ConsumerGroupPaths,
        consumer_id: str,
        topics: list[str],
        offsets: OffsetsSource,
        *,
        partitions: PartitionsSource | None = None,
        broker_paths: BrokerPaths | None = None,
        commit_interval: float = 2.0,
        pending: PendingSource | None = None,
        drain: float = 0.0,
        backoff: float = 2.0,
        max_retries: int = 4,
        clock: Any = REAL_CLOCK,
        name: str = "",
    ):
        if partitions is None and broker_paths is None:
            raise ValueError("give partitions (Kafka metadata) or broker_paths (ZooKeeper discovery)")
        self.client = client
        self.paths = paths
        self.consumer_id = consumer_id
        self.thread_id = thread_id(consumer_id, 0)
        self.topics = sorted(topics)
        self._offsets = offsets
        self._partitions = partitions
        self._broker_paths = broker_paths
        self.commit_interval = commit_interval
        self._pending = pending
        self.drain = drain
        self.backoff = backoff
        self.max_retries = max_retries
        self.clock = clock
        self.log = log.bind(group=paths.group, consumer=consumer_id)

        #: reentrant: with acking off, the spout's emit calls its ack synchronously, under this lock
        self.lock = threading.RLock()
        #: True while the spout must not emit (rebalancing, disconnected, not registered)
        self.paused = True
        #: while paused for a rebalance: the partitions given up, whose failed tuples the spout
        #: re-emits until the drain ends
        self.draining: frozenset[TopicPartition] = frozenset()
        self.assignment = PartitionAssignment()
        # --- owned by the member thread
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._owned: set[TopicPartition] = set()
        self._committed: dict[TopicPartition, int] = {}
        self._session: int | None = None
        self._registered = False
        self._thread: threading.Thread | None = None
        self._name = name or consumer_id
        self._stopped = threading.Event()
        # --- counters (read by the spout; written by the member thread only)
        self.rebalances = 0
        self.rebalance_failures = 0
        self.commit_writes = 0
        self.drain_timeouts = 0
        self.last_rebalance_secs = 0.0
        #: set when the member thread died of a bug: the spout reports it (and stays paused)
        self.failure: str | None = None

    # ------------------------------------------------------------------ public (any thread)

    def start(self) -> None:
        """Register in the group (synchronously: errors surface in the spout's ``open``) and start
        the member thread, which performs the first rebalance."""
        self._register()
        self.client.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name=f"kafka-group-{self._name}", daemon=True)
        self._thread.start()
        self._events.put(("rebalance", None))

    def stop(self, timeout: float = 10.0) -> None:
        """Commit, release the owner nodes, delete the registration and end the thread."""
        if self._thread is None or not self._thread.is_alive():
            return
        self._events.put(("stop", None))
        self._thread.join(timeout)
        try:
            self.client.remove_listener(self._on_state)
        except Exception:  # noqa: BLE001 - listener already gone with a closed client
            pass

    def commit(self, wait: float = 5.0) -> bool:
        """Commit the spout's offsets now; wait up to ``wait`` seconds. True when written."""
        if self._thread is None or not self._thread.is_alive():
            return False
        done = threading.Event()
        self._events.put(("commit", done))
        return done.wait(wait)

    def partitions_changed(self) -> None:
        """The spout saw a topic's partition count change in Kafka's metadata."""
        self._events.put(("partitions", None))

    @property
    def owned(self) -> frozenset[TopicPartition]:
        return self.assignment.partitions

    # ------------------------------------------------------------------ kazoo callbacks: enqueue only

    def _on_watch(self, event: Any) -> None:
        self._events.put(("watch", getattr(event, "path", None)))

    def _on_state(self, state: Any) -> bool:
        self._events.put(("state", state))
        return False

    # ------------------------------------------------------------------ the member thread

    def _run(self) -> None:
        now = self.clock.monotonic
        next_commit = now() + self.commit_interval
        retry_at: float | None = None
        want_rebalance = False
        attempts = 0
        try:
            while True:
                wake = next_commit
                if retry_at is not None and self.client.connected:
                    # a retry waits for a session: without one, the reconnect's state event wakes
                    # this thread (a retry time passed while disconnected would make it spin)
                    wake = min(wake, retry_at)
                events = self._next_events(max(0.0, wake - now()))
                waiters: list[threading.Event] = []
                stop = False
                for kind, arg in events:
                    if kind in ("rebalance", "watch", "partitions"):
                        want_rebalance = True
                    elif kind == "state":
                        want_rebalance |= self._on_session_state(arg)
                    elif kind == "commit":
                        waiters.append(arg)
                    elif kind == "stop":
                        stop = True
                if stop:
                    self._shutdown()
                    for w in waiters:
                        w.set()
                    return
                if want_rebalance and self.client.connected and (retry_at is None or now() >= retry_at):
                    if not self._registered:
                        self._try_register()
                    if self._registered and self._rebalance():
                        want_rebalance, retry_at, attempts = False, None, 0
                    else:
                        attempts += 1
                        self.rebalance_failures += 1
                        retry_at = now() + self.backoff
                        if attempts == self.max_retries:
                            self.log.error("kafka-rebalance-retries-exhausted", attempts=attempts,
                                           backoff_secs=self.backoff, note="still retrying")
                if waiters or now() >= next_commit:
                    self._commit()
                    next_commit = now() + self.commit_interval
                    for w in waiters:
                        w.set()
        except Exception as exc:  # noqa: BLE001 - a bug here must not die silently
            self.log.exception("kafka-group-thread-crashed")
            with self.lock:
                self.paused = True
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self._stopped.set()

    def _next_events(self, timeout: float) -> list[tuple[str, Any]]:
        try:
            events = [self._events.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                events.append(self._events.get_nowait())
            except queue.Empty:
                return events

    def _on_session_state(self, state: Any) -> bool:
        """React to a session state change; True when a rebalance is needed."""
        if state == KazooState.SUSPENDED:
            with self.lock:
                self.paused = True
            self.log.warning("kafka-group-suspended")
            return False
        if state == KazooState.LOST:
            with self.lock:
                self.paused = True
            self._owned.clear()
            self._registered = False
            self.log.warning("kafka-group-session-lost")
            return True
        # CONNECTED: watches were reset by the disconnect; re-check everything
        if self._registered and self.client.client_id and self.client.client_id[0] != self._session:
            self._registered = False
            self._owned.clear()
        return True

    # ------------------------------------------------------------------ registration

    def _register(self) -> None:
        path = self.paths.member(self.consumer_id)
        data = registration_json({t: 1 for t in self.topics}, int(self.clock.time() * 1000))
        session = self.client.client_id[0]
        try:
            self.client.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            # ZKCheckedEphemeral: a retried create that already succeeded in this session is fine
            _, stat = self.client.get(path)
            if stat.ephemeralOwner != session:
                raise RuntimeError(
                    f"consumer id {self.consumer_id} is already registered by another session at {path}"
                ) from None
        self._session = session
        self._registered = True
        self.log.info("kafka-group-registered", path=path)

    def _try_register(self) -> None:
        try:
            self._register()
        except (KazooException, RuntimeError) as exc:
            self.log.warning("kafka-group-register-failed", error=str(exc))

    # ------------------------------------------------------------------ rebalance

    def _read_partitions(self) -> dict[str, list[int]]:
        out = {}
        for topic in self.topics:
            if self._broker_paths is not None:
                path = self._broker_paths.topic(topic)
                try:
                    data, _ = self.client.get(path, watch=self._on_watch)
                except NoNodeError:
                    self.client.exists(path, watch=self._on_watch)
                    out[topic] = []
                    continue
                out[topic] = parse_topic_partitions(data, path)
            else:
                out[topic] = list(self._partitions(topic))  # type: ignore[misc]
        return out

    def _read_members(self) -> dict[str, Any]:
        self.client.ensure_path(self.paths.ids_dir)
        members = {}
        for cid in self.client.get_children(self.paths.ids_dir, watch=self._on_watch):
            path = self.paths.member(cid)
            try:
                data, _ = self.client.get(path)
            except NoNodeError:
                continue  # left while we were reading: its removal fires the watch again
            try:
                members[cid] = parse_registration(data, path)
            except GroupDataError as exc:
                self.log.warning("kafka-group-bad-member", error=str(exc))
        return members

    def _holds(self, tp: TopicPartition) -> bool:
        try:
            data, stat = self.client.get(self.paths.owner(*tp))
        except NoNodeError:
            return False
        return data.decode() == self.thread_id and stat.ephemeralOwner == self._session

    def _rebalance(self) -> bool:
        """One attempt; True when this member owns its share and the spout may emit."""
        started = self.clock.monotonic()
        claimed: list[TopicPartition] = []
        try:
            members = self._read_members()
            if self.consumer_id not in members:
                self.log.warning("kafka-group-not-registered")
                self._registered = False
                return False
            partitions = self._read_partitions()
            mine = set(range_assign(partitions, members).get(self.thread_id, []))
            if mine == self._owned and self.assignment.partitions == frozenset(mine) and all(
                self._holds(tp) for tp in mine
            ):
                with self.lock:
                    self.paused = False
                return True
            previous = frozenset(self._owned)
            # stop emitting, let what is in flight from the partitions given up finish, commit while
            # still the owner, release everything
            with self.lock:
                self.paused = True
            self._drain(previous - mine)
            self._commit()
            for tp in sorted(self._owned):
                try:
                    self.client.delete(self.paths.owner(*tp))
                except NoNodeError:
                    pass
            self._owned.clear()
            for tp in sorted(mine):
                path = self.paths.owner(*tp)
                try:
                    self.client.create(path, self.thread_id.encode(), ephemeral=True, makepath=True)
                except NodeExistsError:
                    if self._holds(tp):
                        claimed.append(tp)
                        continue
                    owner = self._owner_of(tp)
                    self.log.info("kafka-claim-conflict", topic=tp[0], partition=tp[1], owner=owner,
                                  backoff_secs=self.backoff)
                    self._release(claimed)
                    return False
                claimed.append(tp)
            starts: dict[TopicPartition, int | None] = {}
            for tp in claimed:
                path = self.paths.offset(*tp)
                try:
                    data, _ = self.client.get(path)
                    starts[tp] = parse_offset(data, path)
                    self._committed[tp] = starts[tp]  # type: ignore[assignment]
                except NoNodeError:
                    starts[tp] = None
                    self._committed.pop(tp, None)
                except GroupDataError as exc:
                    self.log.error("kafka-bad-offset", error=str(exc))
                    starts[tp] = None
            self._owned = set(claimed)
            with self.lock:
                self.assignment = PartitionAssignment(
                    generation=self.assignment.generation + 1,
                    partitions=frozenset(claimed),
                    start_offsets=starts,
                    retained=previous & frozenset(claimed),
                )
                self.paused = False
            self.rebalances += 1
            self.last_rebalance_secs = self.clock.monotonic() - started
            self.log.info(
                "kafka-rebalance",
                generation=self.assignment.generation,
                owned=[f"{t}-{p}" for t, p in sorted(claimed)],
                members=len(members),
                secs=round(self.last_rebalance_secs, 3),
            )
            return True
        except (KazooException, GroupDataError) as exc:
            self.log.warning("kafka-rebalance-failed", error=f"{type(exc).__name__}: {exc}")
            self._release(claimed)
            return False

    def _drain(self, giving_up: frozenset[TopicPartition]) -> None:
        """Wait (at most :attr:`drain` seconds) until every tuple from ``giving_up`` is acked, the
        spout re-emitting failed ones meanwhile (:attr:`draining`): acked ones then count in the
        commit instead of being replayed by the next owner. Those not acked by the deadline are
        replayed there (at-least-once)."""
        if not giving_up or self._pending is None or self.drain <= 0:
            return
        started = self.clock.monotonic()
        with self.lock:
            self.draining = giving_up
        try:
            while True:
                with self.lock:
                    left = self._pending(giving_up)
                waited = self.clock.monotonic() - started
                if left == 0:
                    return
                if waited >= self.drain:
                    self.log.warning("kafka-drain-timeout", pending=left, waited_secs=round(waited, 3),
                                     partitions=[f"{t}-{p}" for t, p in sorted(giving_up)])
                    self.drain_timeouts += 1
                    return
                self.clock.sleep(DRAIN_POLL_SECS)
        finally:
            with self.lock:
                self.draining = frozenset()

    def _owner_of(self, tp: TopicPartition) -> str | None:
        try:
            return self.client.get(self.paths.owner(*tp))[0].decode()
        except (NoNodeError, KazooException):
            return None

    def _release(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            try:
                self.client.delete(self.paths.owner(*tp))
            except (NoNodeError, KazooException):
                pass

    # ------------------------------------------------------------------ offsets

    def _commit(self, pause: bool = False) -> None:
        """Write the spout's committed offsets of owned partitions that changed."""
        with self.lock:
            if pause:
                self.paused = True
            generation, offsets = self._offsets()
            current = self.assignment.generation
        if generation != current or not self._owned or not self.client.connected:
            return  # (while disconnected a write would wait for the reconnect; the next commit catches up)
        for tp, offset in offsets.items():
            if tp not in self._owned or self._committed.get(tp) == offset:
                continue
            path = self.paths.offset(*tp)
            data = encode_offset(offset)
            try:
                try:
                    self.client.set(path, data)
                except NoNodeError:
                    try:
                        self.client.create(path, data, makepath=True)
                    except NodeExistsError:
                        self.client.set(path, data)
            except KazooException as exc:
                self.log.warning("kafka-commit-failed", topic=tp[0], partition=tp[1], error=str(exc))
                continue
            self._committed[tp] = offset
            self.commit_writes += 1

    def _shutdown(self) -> None:
        try:
            if self.client.connected:
                self._commit(pause=True)
                self._release(sorted(self._owned))
                if self._registered:
                    try:
                        self.client.delete(self.paths.member(self.consumer_id))
                    except NoNodeError:
                        pass
        except KazooException as exc:
            self.log.warning("kafka-group-leave-failed", error=str(exc))
        with self.lock:
            self.paused = True
            self.assignment = PartitionAssignment(generation=self.assignment.generation + 1)
        self._owned.clear()
        self._registered = False
        self.log.info("kafka-group-left")
