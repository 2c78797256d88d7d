"""Waiting in tests: retry the assertion itself until a deadline, never sleep and hope.

``eventually(check, timeout)`` calls ``check`` — a block of plain ``assert`` statements that reads
the system's current state — until it returns without raising :class:`AssertionError`, and returns
what it returned. When the deadline passes it fails with the *last* assertion error, so the report
says which part of the condition was still false and with what values::

    def counts_exact():
        stats = read_stats()
        assert stats["acked"] == 1000, stats
        return stats

    stats = eventually(counts_exact, timeout=60)

Wait for exactly the condition the test asserts: not for one signal before asserting another
that arrives later (a heartbeat's counters arrive after the error that caused them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T], timeout: float, interval: float = 0.1,
               retry_on: tuple[type[BaseException], ...] = (AssertionError,)) -> T:
    """Call ``check`` until it stops raising ``retry_on`` (default AssertionError); return its result.

    ``retry_on`` may add exceptions that mean "not yet" (``NoNodeError`` while a znode is being
    created, ``ConnectionError`` while a server starts). Anything else propagates at once.
    """
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        attempts += 1
        try:
            return check()
        except retry_on as exc:
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"still false after {timeout:.1f}s ({attempts} attempts): {type(exc).__name__}: {exc}"
                ) from exc
        time.sleep(interval)


def until(predicate: Callable[[], T], timeout: float, describe: Callable[[], str] | str = "",
          interval: float = 0.1) -> T:
    """``eventually`` for a predicate: wait until it returns a truthy value and return that value.
    ``describe`` (a string, or a function called at each miss) says what was awaited."""

    def check() -> T:
        value = predicate()
        assert value, (describe() if callable(describe) else describe) or "predicate still false"
        return value

    return eventually(check, timeout, interval)


def poll_until(check: Callable[[], T], deadline: float, interval: float = 0.5) -> T | None:
    """:func:`until` for a run that reports a verdict instead of failing a test (the chaos runs'
    convergence): ``check``'s first truthy value, or ``None`` once ``time.monotonic()`` passes
    ``deadline``. The caller decides what a miss means. ``check`` is called at least once."""
    try:
        return until(check, max(0.0, deadline - time.monotonic()), interval=interval)
    except AssertionError:
        return None
