"""Ports for development clusters and tests that the kernel never hands to anyone else.

The usual trick — bind port 0, read the port, close the socket, start the server on that port —
is a race: between the close and the server's bind, the kernel may give the same port to any
socket bound to port 0 or to any outgoing connection, because both draw from
``net.ipv4.ip_local_port_range`` (the ephemeral range). So:

* a server that can bind port 0 itself and report the port should do that (nimbus's HTTP server,
  the supervisor's and worker's /metrics servers: ``nimbus.http.port: 0``, ``supervisor.metrics.port: 0``);
* a server whose port must be known before it starts (ZooKeeper's JVM, a supervisor's slot ports
  that its workers bind much later, RabbitMQ, Tansu, Prometheus) gets a port from
  :func:`reserve_port`: one OUTSIDE the ephemeral range (the kernel never picks those for port 0
  or for a connection), free when probed (on the wildcard address, as workers bind), and held by
  an advisory lock (``flock`` on ``$TMPDIR/gale-ports/<port>.lock``) for as long as the
  :class:`PortReservation` lives (the lock files stay, at most one per candidate port: removing one
  would race with another process locking it), so that other dev clusters and test runs on the machine —
  which use this module too — never pick it. A program outside Gale may still bind the same fixed
  port; callers detect "address in use" from the server's own exit or log and retry with a new
  reservation (:class:`gale.zkserver.ZooKeeperServer` does).
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
from collections.abc import Iterable
from pathlib import Path

#: where the ephemeral range is read; Linux's default when it cannot be
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL = (32768, 60999)
#: the lowest port handed out: well clear of the registered ports most services use by default
LOWEST = 20000
LOCK_DIR = Path(tempfile.gettempdir()) / "gale-ports"


class NoFreePort(RuntimeError):
    pass


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (inclusive)."""
    try:
        lo, hi = (int(x) for x in path.read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def candidate_ports(span: int, ephemeral: tuple[int, int], lowest: int = LOWEST) -> list[int]:
    """Every port p with p .. p + span outside ``ephemeral`` and within [lowest, 65535] (pure)."""
    lo, hi = ephemeral
    below = range(lowest, lo - span) if lo - span > lowest else range(0)
    above = range(max(hi + 1, lowest), 65536 - span)
    return [*below, *above]


class PortReservation:
    """Ports ``port + offset`` for each offset, locked for this object's lifetime (:meth:`release`)."""

    def __init__(self, port: int, offsets: tuple[int, ...], locks: list[int]):
        self.port = port
        self.offsets = offsets
        self._locks = locks

    @property
    def ports(self) -> list[int]:
        return [self.port + off for off in self.offsets]

    def release(self) -> None:
        locks, self._locks = self._locks, []
        for fd in locks:
            os.close(fd)

    def __enter__(self) -> PortReservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"PortReservation({self.ports})"


def _lock_dir() -> Path:
    if not LOCK_DIR.is_dir():
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        try:
            LOCK_DIR.chmod(0o1777)  # shared by every user's clusters on the machine, like /tmp
        except PermissionError:
            pass  # another user created it meanwhile
    return LOCK_DIR


def _lock(port: int) -> int | None:
    path = _lock_dir() / f"{port}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except PermissionError:  # another user's lock file: a port someone reserved (or once did)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def is_free(port: int) -> bool:
    """Nothing bound to ``port`` on any address (TCP), checked by binding the wildcard address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def reserve_port(offsets: Iterable[int] = (0,), *, attempts: int = 500,
                 rng: random.Random | None = None) -> PortReservation:
    """A port p (and p + each offset) outside the ephemeral range, free now and locked for Gale."""
    offs = tuple(sorted(set(offsets) | {0}))
    if offs[0] < 0:
        raise ValueError(f"offsets must not be negative: {offs}")
    candidates = candidate_ports(offs[-1], ephemeral_range())
    if not candidates:
        raise NoFreePort(f"no port with offsets {offs} fits outside the ephemeral range {ephemeral_range()}")
    rng = rng or random.Random()
    for _ in range(attempts):
        port = rng.choice(candidates)
        locks: list[int] = []
        for p in (port + off for off in offs):
            fd = _lock(p)
            if fd is None or not is_free(p):
                if fd is not None:
                    os.close(fd)
                break
            locks.append(fd)
        else:
            return PortReservation(port, offs, locks)
        for fd in locks:
            os.close(fd)
    raise NoFreePort(f"no free port with offsets {offs} outside the ephemeral range {ephemeral_range()} "
                     f"after {attempts} attempts")


_PROCESS_LIFETIME: list[PortReservation] = []


def reserved_port() -> int:
    """:func:`reserve_port` for callers that only take an int: the reservation is kept until this
    process exits (tests that need a port for a server they start themselves)."""
    reservation = reserve_port()
    _PROCESS_LIFETIME.append(reservation)
    return reservation.port
