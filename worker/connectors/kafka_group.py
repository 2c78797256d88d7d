"""Kafka's ZooKeeper consumer group, the pure parts: znode paths and payloads, range assignment.

Kafka's ZooKeeper consumer layout (``docs/storm-model.md`` §10), under a configurable root (``/`` by
default, so the paths read as Kafka's)::

    /consumers/<group>/ids/<consumerIdString>          EPHEMERAL  {"version":1,"subscription":{topic: threads},
                                                                    "pattern":"static","timestamp":"<ms>"}
    /consumers/<group>/owners/<topic>/<partition>       EPHEMERAL  the owning thread id
    /consumers/<group>/offsets/<topic>/<partition>      PERSISTENT the next offset to resume from (decimal text)
    /brokers/ids/<id>                                   EPHEMERAL  {"host","port","endpoints",...} (read only)
    /brokers/topics/<topic>                             PERSISTENT {"version":1,"partitions":{"0":[1,2],...}}

``consumerIdString`` is ``<group>_<hostname>-<epoch ms>-<first 8 hex digits of a random UUID>``, and a
thread id is ``<consumerIdString>-<n>``. Each Gale spout task is one member with one thread per topic.

Every path is built here (:class:`ConsumerGroupPaths`, :class:`BrokerPaths`); nothing else formats
znode paths. The ZooKeeper I/O is in :mod:`gale.worker.connectors.kafka_member`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

TopicPartition = tuple[str, int]

_LEGAL_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class GroupDataError(ValueError):
    """A znode of the consumer-group or broker layout holds something we cannot read."""


def check_name(kind: str, name: str) -> None:
    """Group ids and topic names become znode names: legal Kafka characters only."""
    if not isinstance(name, str) or not _LEGAL_NAME.match(name) or name in (".", ".."):
        raise ValueError(f"{kind} {name!r} is not a legal Kafka name (letters, digits, '.', '_', '-')")


def _join(root: str, *parts: str) -> str:
    base = "/" + root.strip("/") if root.strip("/") else ""
    return base + "/" + "/".join(parts)


@dataclass(frozen=True)
class ConsumerGroupPaths:
    """``<root>/consumers/<group>/...``"""

    root: str
    group: str

    def __post_init__(self) -> None:
        check_name("consumer group", self.group)
        if not self.root.startswith("/"):
            raise ValueError(f"ZooKeeper root {self.root!r} must start with '/'")

    @property
    def group_dir(self) -> str:
        return _join(self.root, "consumers", self.group)

    @property
    def ids_dir(self) -> str:
        return _join(self.root, "consumers", self.group, "ids")

    def member(self, consumer_id: str) -> str:
        return _join(self.root, "consumers", self.group, "ids", consumer_id)

    def owners_dir(self, topic: str) -> str:
        return _join(self.root, "consumers", self.group, "owners", topic)

    def owner(self, topic: str, partition: int) -> str:
        return _join(self.root, "consumers", self.group, "owners", topic, str(partition))

    def offsets_dir(self, topic: str) -> str:
        return _join(self.root, "consumers", self.group, "offsets", topic)

    def offset(self, topic: str, partition: int) -> str:
        return _join(self.root, "consumers", self.group, "offsets", topic, str(partition))


@dataclass(frozen=True)
class BrokerPaths:
    """``<root>/brokers/...`` of a ZooKeeper-mode Kafka cluster (read by discovery)."""

    root: str

    @property
    def ids_dir(self) -> str:
        return _join(self.root, "brokers", "ids")

    def broker(self, broker_id: str | int) -> str:
        return _join(self.root, "brokers", "ids", str(broker_id))

    @property
    def topics_dir(self) -> str:
        return _join(self.root, "brokers", "topics")

    def topic(self, topic: str) -> str:
        return _join(self.root, "brokers", "topics", topic)

    def partition_state(self, topic: str, partition: int) -> str:
        return _join(self.root, "brokers", "topics", topic, "partitions", str(partition), "state")


# ----------------------------------------------------------------------------- member identity


def consumer_id_string(group: str, hostname: str, now_ms: int, uuid_hex: str | None = None) -> str:
    """``<group>_<hostname>-<ms>-<8 hex>`` as the old consumer forms it."""
    tail = (uuid_hex or uuid.uuid4().hex)[:8]
    return f"{group}_{hostname}-{now_ms}-{tail}"


def thread_id(consumer_id: str, n: int = 0) -> str:
    return f"{consumer_id}-{n}"


def registration_json(subscription: Mapping[str, int], now_ms: int) -> bytes:
    """The ``ids/<consumerId>`` payload of a static subscription."""
    return json.dumps(
        {"version": 1, "subscription": dict(subscription), "pattern": "static", "timestamp": str(now_ms)},
        separators=(",", ":"),
    ).encode()


@dataclass(frozen=True)
class Registration:
    subscription: dict[str, int]
    pattern: str

    def streams_for(self, topic: str) -> int:
        """How many threads this member runs for ``topic`` (0: not subscribed)."""
        if self.pattern == "static":
            return int(self.subscription.get(topic, 0))
        # wildcard members (Java consumers): one entry, regex → streams
        for regex, streams in self.subscription.items():
            # the old consumer escapes ',' as '|' in white/black lists
            try:
                matched = re.fullmatch(regex.replace(",", "|"), topic) is not None
            except re.error:
                return 0
            if self.pattern == "white_list" and matched:
                return int(streams)
            if self.pattern == "black_list" and not matched:
                return int(streams)
        return 0


def parse_registration(data: bytes, path: str = "") -> Registration:
    try:
        doc = json.loads(data.decode())
        sub = doc["subscription"]
        if not isinstance(sub, dict) or not all(isinstance(v, int) and v >= 0 for v in sub.values()):
            raise ValueError("subscription must map topic to a thread count")
        return Registration(dict(sub), str(doc.get("pattern", "static")))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise GroupDataError(f"cannot read consumer registration {path}: {exc}") from None


def parse_offset(data: bytes, path: str = "") -> int:
    try:
        value = int(data.decode().strip())
    except (ValueError, UnicodeDecodeError):
        raise GroupDataError(f"offset znode {path} holds {data[:40]!r}, not a decimal offset") from None
    if value < 0:
        raise GroupDataError(f"offset znode {path} holds a negative offset {value}")
    return value


def encode_offset(offset: int) -> bytes:
    return str(int(offset)).encode()


# ----------------------------------------------------------------------------- range assignment


def range_assign(
    partitions: Mapping[str, Iterable[int]], members: Mapping[str, Registration | Mapping[str, int]]
) -> dict[str, list[TopicPartition]]:
    """The old consumer's range assignment, computed for every thread of every member.

    Per topic: partitions sorted numerically, the subscribing thread ids sorted *as strings*;
    with P partitions and C threads each thread gets ``P // C`` contiguous partitions and the first
    ``P % C`` threads one more. Threads beyond the partition count get nothing.
    Returns thread id → [(topic, partition), ...] for every subscribing thread (possibly empty).
    """
    regs = {
        cid: (r if isinstance(r, Registration) else Registration(dict(r), "static")) for cid, r in members.items()
    }
    out: dict[str, list[TopicPartition]] = {}
    for topic in sorted(partitions):
        threads = sorted(
            thread_id(cid, n) for cid, reg in regs.items() for n in range(reg.streams_for(topic))
        )
        parts = sorted(set(partitions[topic]))
        for t in threads:
            out.setdefault(t, [])
        if not threads:
            continue
        per, extra = divmod(len(parts), len(threads))
        for i, t in enumerate(threads):
            start = per * i + min(i, extra)
            count = per + (1 if i < extra else 0)
            out[t].extend((topic, p) for p in parts[start:start + count])
    return out


# ----------------------------------------------------------------------------- broker discovery


def parse_topic_partitions(data: bytes, path: str = "") -> list[int]:
    """Partition ids from a ``/brokers/topics/<t>`` payload (string keys → sorted ints)."""
    try:
        doc = json.loads(data.decode())
        return sorted(int(p) for p in doc["partitions"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise GroupDataError(f"cannot read topic partitions from {path}: {exc}") from None


def broker_address(data: bytes, path: str = "") -> str | None:
    """``host:port`` of a broker's PLAINTEXT listener from its ``/brokers/ids/<id>`` payload.

    Uses ``endpoints`` with ``listener_security_protocol_map`` when present (v2+), falling back to
    the top-level ``host``/``port`` (which describe the first PLAINTEXT endpoint only, or are
    null/-1). None when the broker has no PLAINTEXT listener.
    """
    try:
        doc: dict[str, Any] = json.loads(data.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise GroupDataError(f"cannot read broker registration {path}: {exc}") from None
    protocols = doc.get("listener_security_protocol_map") or {}
    for endpoint in doc.get("endpoints") or []:
        name, sep, rest = str(endpoint).partition("://")
        if not sep:
            continue
        if protocols.get(name, name) == "PLAINTEXT":
            return rest
    host, port = doc.get("host"), doc.get("port")
    if host and isinstance(port, int) and port > 0:
        return f"{host}:{port}"
    return None
