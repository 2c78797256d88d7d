"""Deadlines for stop paths: a daemon told to stop exits within its bound, whatever is unreachable.

A stop, kill or cleanup path is a sequence of best-effort steps — delete an ephemeral znode, commit
offsets, close a broker connection, stop Spark — each of which can block for a long time when the
other side is unreachable (kazoo's synchronous calls wait forever for a reconnect). So:

* :class:`Deadline` — one point in monotonic time for the whole stop; each step gets what remains.
* :func:`within` — run one step on a daemon thread and wait for it at most until the deadline; a
  step still running then is abandoned (logged as ``stop-step-abandoned``), the stop goes on. With
  ``zk=client`` the step is skipped at once when the ZooKeeper client is not connected (a request
  would only queue behind the reconnect). Returns whether the step finished.
* :class:`ExitDeadline` — the backstop: armed when the stop begins, it ends the process with
  ``os._exit`` if the stop has not finished by then (a step stuck in C code, a non-daemon thread
  that an ``atexit`` handler joins). Only the daemons' entry points arm one, never library code.
* :func:`begin_stop` — both for a daemon with a stop budget: the steps' deadline at 80% of it,
  the exit deadline at 90%, so the process is gone within the budget (the rest is for the
  kernel to tear it down).

``gale.zk.stop_client`` stops a kazoo client within a deadline (kazoo's own ``stop`` can wait for
its reconnect loop for the session timeout).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from gale.log import get_logger

log = get_logger("deadline")


class Deadline:
    """``secs`` from now (monotonic). ``remaining()`` never goes below 0."""

    def __init__(self, secs: float, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.at = clock() + max(0.0, float(secs))

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.at

    def earlier(self, secs: float) -> Deadline:
        """A deadline ``secs`` before this one (at least now): leaves room for later steps."""
        d = Deadline(0.0, self.clock)
        d.at = max(self.clock(), self.at - secs)
        return d

    def __repr__(self) -> str:
        return f"Deadline(remaining={self.remaining():.3f}s)"


def _zk_connected(client: Any) -> bool:
    try:
        return bool(client.connected)
    except Exception:  # noqa: BLE001 - a closed or half-built client
        return False


def within(deadline: Deadline, what: str, fn: Callable[..., Any], *args: Any, zk: Any = None, **kwargs: Any) -> bool:
    """Run ``fn(*args, **kwargs)`` as a best-effort stop step bounded by ``deadline``.

    True when it returned in time. An exception it raises is logged and counts as done (False);
    still running at the deadline: abandoned on its daemon thread (False). With ``zk`` (a kazoo
    client) the step is skipped when the client is not connected.
    """
    if zk is not None and not _zk_connected(zk):
        log.warning("stop-step-skipped", step=what, reason="ZooKeeper not connected")
        return False
    if deadline.expired():
        log.warning("stop-step-skipped", step=what, reason="stop deadline passed")
        return False
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn(*args, **kwargs)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's thread
            outcome.append(exc)

    thread = threading.Thread(target=run, name=f"stop-{what}", daemon=True)
    thread.start()
    thread.join(deadline.remaining())
    if not outcome:
        log.warning("stop-step-abandoned", step=what, reason="still running at the stop deadline")
        return False
    if outcome[0] is not None:
        log.warning("stop-step-failed", step=what, error=f"{type(outcome[0]).__name__}: {outcome[0]}")
        return False
    return True


#: of a daemon's stop budget: the graceful steps' deadline, and the hard exit
GRACEFUL_SHARE, EXIT_SHARE = 0.8, 0.9


class ExitDeadline:
    """Ends the process with ``os._exit(code())`` at ``secs`` after :meth:`arm` unless disarmed."""

    def __init__(self, secs: float, code: Callable[[], int] = lambda: 0, what: str = "process"):
        self.secs = max(0.0, float(secs))
        self.code = code
        self.what = what
        self._armed = threading.Event()
        self._disarmed = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self) -> None:
        """Start the countdown (idempotent: a second stop request does not extend it)."""
        if self._armed.is_set():
            return
        self._armed.set()
        self._thread = threading.Thread(target=self._run, name="exit-deadline", daemon=True)
        self._thread.start()

    def disarm(self) -> None:
        self._disarmed.set()

    @property
    def armed(self) -> bool:
        return self._armed.is_set() and not self._disarmed.is_set()

    def _run(self) -> None:
        if self._disarmed.wait(self.secs):
            return
        code = self.code()
        log.error("stop-deadline-exceeded", daemon=self.what, secs=self.secs, exit_code=code,
                  threads=sorted(t.name for t in threading.enumerate() if t is not threading.current_thread()))
        try:
            logging.shutdown()  # flush the log files
        except Exception:  # noqa: BLE001
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def begin_stop(budget: float, what: str, code: Callable[[], int] = lambda: 0) -> Deadline:
    """A daemon's stop begins: arm an :class:`ExitDeadline` at ``EXIT_SHARE`` of ``budget`` and
    return the steps' :class:`Deadline` at ``GRACEFUL_SHARE`` of it."""
    ExitDeadline(EXIT_SHARE * budget, code=code, what=what).arm()
    return Deadline(GRACEFUL_SHARE * budget)
