"""Starting third-party servers on a port chosen before they start, without port races.

A server that cannot bind port 0 and report the port (RabbitMQ, epmd, Tansu, Prometheus, the Spark
Connect server) gets a port from :func:`gale.ports.reserve_port` (outside the kernel's ephemeral
range, locked against other Gale clusters and test runs). :func:`wait_listening` then waits until
*the started process* (or one of its children) listens on that port — not merely until something
answers there, which a foreign server on the same port would — and raises :class:`PortInUse` when
the process exits having logged "address in use", so that :func:`start_on_free_port` retries with a
new reservation.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from typing import TypeVar

from gale.localserver import listening_on
from gale.ports import PortReservation, reserve_port

from tests.waiting import eventually

T = TypeVar("T")

#: how servers say so: Java's BindException, Erlang's eaddrinuse, Go's and Rust's messages
IN_USE = re.compile(r"address already in use|eaddrinuse|addrinuse|address in use|BindException|Failed to bind",
                    re.IGNORECASE)


class PortInUse(RuntimeError):
    """The server exited because another program holds its port."""


def wait_listening(proc: subprocess.Popen, port: int, timeout: float, what: str,
                   log: Callable[[], str] = lambda: "") -> None:
    """Until ``proc`` (or a child) listens on ``port``. Raises :class:`PortInUse` when it exits
    having logged that the address is in use, RuntimeError when it exits otherwise or never listens."""
    def listening() -> None:
        if proc.poll() is not None:  # not "not yet": raised at once, not retried
            text = log()
            if IN_USE.search(text):
                raise PortInUse(f"{what} could not bind port {port}: address in use")
            raise RuntimeError(f"{what} exited with code {proc.returncode} before listening on {port}:\n{text[-3000:]}")
        assert listening_on(proc.pid, port), f"{what} does not listen on port {port} yet:\n{log()[-3000:]}"

    eventually(listening, timeout, interval=0.05)


def start_on_free_port(start: Callable[[PortReservation], T], attempts: int = 5) -> T:
    """``start(reservation)`` with a newly reserved port until it does not raise :class:`PortInUse`.
    ``start`` owns the reservation it succeeds with (and releases it when its server is gone)."""
    for attempt in range(1, attempts + 1):
        reservation = reserve_port()
        try:
            return start(reservation)
        except PortInUse:
            reservation.release()
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def read_tail(*paths, limit: int = 200_000) -> str:
    """The ends of the given log files (missing ones skipped), for error messages and IN_USE checks."""
    out = []
    for path in paths:
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - limit))
                out.append(fh.read().decode(errors="replace"))
        except OSError:
            continue
    return "\n".join(out)
