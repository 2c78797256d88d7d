"""Authenticated, replay-proof batches between the workers of one topology (pure: no sockets).

A batch travels as three ZeroMQ frames ``[header, mac, payload]``:

* ``header`` (:data:`HEADER`, 33 bytes, network byte order): format version (1), the sender's
  *session* (16 random bytes, new in every worker process), a *sequence number* (strictly increasing
  within the session) and a *stamp* (milliseconds since the epoch by the sender's clock, never
  decreasing within the session);
* ``mac``: HMAC-SHA256 keyed by the topology secret over ``"gale-batch-v1" NUL receiver NUL header
  payload``, where *receiver* names the worker the batch is for (``<supervisor id>:<slot port>``),
  so a batch sealed for one worker does not verify at another;
* ``payload``: the msgpack messages (:mod:`gale.worker.wire`).

A receiver (:class:`Opener`) checks the frames' shape, then the MAC (so nothing unauthenticated
reaches its state), then freshness with a :class:`ReplayGuard`: for every sender session it has
seen it keeps the last sequence number and refuses any batch not above it (a replay); a session it
has not seen is accepted only if its stamp is not older than the receiver's *floor* — the moment
the receiver started — so a batch captured before a receiver restarted is refused by the new
process (which remembers nothing), while a restarted sender, with a new session and fresh stamps,
is accepted at once. The table of sessions is bounded: when it is full the least recently active
session is forgotten and the floor rises past that session's last stamp, so a forgotten session's
old batches stay refused.

The stamp is compared with the receiver's clock only for a session's first batch, against the
receiver's start: workers on different hosts need synchronised clocks (NTP). A sender whose clock
lags the receiver's by *d* seconds has its batches refused as ``stale`` for *d* seconds after the
receiver starts (the tuples time out and replay); one whose clock runs ahead lets a batch captured
within *d* seconds before a receiver restart be accepted once by the new receiver.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

VERSION = 1
#: version, session, sequence number, stamp (ms)
HEADER = struct.Struct("!B16sQQ")
SESSION_BYTES = 16
MAC_BYTES = 32
_PREFIX = b"gale-batch-v1\0"

#: batch rejection reasons (counted per reason by the transfer)
MALFORMED = "malformed"   # not [header, mac, payload], unknown version, wrong sizes
BAD_MAC = "bad_mac"       # not sealed with this topology's secret for this worker
REPLAYED = "replayed"     # a sequence number this receiver already took from that session
STALE = "stale"           # a session first seen here with a stamp older than the receiver's floor
REJECT_REASONS = (MALFORMED, BAD_MAC, REPLAYED, STALE)


def _keyed(secret: bytes, receiver: str) -> hmac.HMAC:
    return hmac.new(secret, _PREFIX + receiver.encode() + b"\0", hashlib.sha256)


class Sealer:
    """The sending side: one session per process, a sequence number and stamp per batch.

    Seal a batch right before each attempt to send it (a batch held back by a slow peer is sealed
    again), so its stamp is never older than the connection it goes out on.
    """

    def __init__(self, secret: bytes, *, clock: Callable[[], float] = time.time, session: bytes | None = None):
        if not secret:
            raise ValueError("a topology secret is required to seal batches")
        self.secret = secret
        self.clock = clock
        self.session = session if session is not None else os.urandom(SESSION_BYTES)
        if len(self.session) != SESSION_BYTES:
            raise ValueError(f"a session is {SESSION_BYTES} bytes")
        self.seq = 0
        self._stamp = 0
        self._keys: dict[str, hmac.HMAC] = {}

    def seal(self, receiver: str, payload: bytes) -> list[bytes]:
        self.seq += 1
        stamp = int(self.clock() * 1000)
        if stamp < self._stamp:
            stamp = self._stamp  # the wall clock stepped back: stamps never decrease within a session
        self._stamp = stamp
        header = HEADER.pack(VERSION, self.session, self.seq, stamp)
        keyed = self._keys.get(receiver)
        if keyed is None:
            keyed = self._keys[receiver] = _keyed(self.secret, receiver)
        mac = keyed.copy()
        mac.update(header)
        mac.update(payload)
        return [header, mac.digest(), payload]

    def forget(self, receiver: str) -> None:
        self._keys.pop(receiver, None)


class ReplayGuard:
    """Which (session, sequence, stamp) a receiver still accepts. Pure; see the module docstring."""

    def __init__(self, floor_ms: int, max_sessions: int = 1024):
        if max_sessions < 1:
            raise ValueError("max_sessions must be >= 1")
        self.floor_ms = floor_ms
        self.max_sessions = max_sessions
        self._last: OrderedDict[bytes, tuple[int, int]] = OrderedDict()  # session -> (seq, stamp), LRU first

    def __len__(self) -> int:
        return len(self._last)

    def check(self, session: bytes, seq: int, stamp_ms: int) -> str | None:
        """Accept (``None``, and remember) or refuse (:data:`REPLAYED` / :data:`STALE`) a batch."""
        last = self._last.get(session)
        if last is None:
            if stamp_ms < self.floor_ms:
                return STALE
            self._last[session] = (seq, stamp_ms)
            if len(self._last) > self.max_sessions:
                _, (_, old_stamp) = self._last.popitem(last=False)
                # everything the forgotten session ever sent is stamped at or before old_stamp
                self.floor_ms = max(self.floor_ms, old_stamp + 1)
            return None
        if seq <= last[0]:
            return REPLAYED
        self._last[session] = (seq, max(stamp_ms, last[1]))
        self._last.move_to_end(session)
        return None


class Opener:
    """The receiving side of one worker: verifies and de-duplicates batches."""

    def __init__(self, secret: bytes, receiver: str, guard: ReplayGuard):
        if not secret:
            raise ValueError("a topology secret is required to open batches")
        self._keyed = _keyed(secret, receiver)
        self.guard = guard

    def open(self, frames: Sequence[bytes]) -> tuple[str | None, bytes]:
        """``(None, payload)`` for an authentic, fresh batch, else ``(reason, b"")``."""
        if len(frames) != 3:
            return MALFORMED, b""
        header, mac, payload = frames
        if len(header) != HEADER.size or len(mac) != MAC_BYTES:
            return MALFORMED, b""
        version, session, seq, stamp = HEADER.unpack(header)
        if version != VERSION:
            return MALFORMED, b""
        expected = self._keyed.copy()
        expected.update(header)
        expected.update(payload)
        if not hmac.compare_digest(expected.digest(), mac):
            return BAD_MAC, b""
        reason = self.guard.check(session, seq, stamp)
        if reason is not None:
            return reason, b""
        return None, payload
