"""Faults of the exactly-once workloads' stores: ``redis_kill`` (the Redis of
:mod:`tests.chaos.eo_workload`) and ``postgres_kill`` (the PostgreSQL of
:mod:`tests.chaos.pg_workload`), each a kill -9 while a checkpoint is in flight; and
:func:`wait_phase`, the watch on the checkpoint record those and ``worker_kill`` time their kill by.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gale.redisserver import _command as redis_command
from gale.worker.state.exactly_once import read_epoch
from gale.worker.state.redis_provider import RedisStateProvider
from tests.chaos.cluster import TOPOLOGY_NAME, process_alive
from tests.chaos.fault_context import Context, FaultRecord, safe


def _redis_pong(server: Any) -> bool:
    try:
        return redis_command(server.host, server.port, "PING", timeout=0.5).startswith(b"+PONG")
    except OSError:
        return False


#: the phases of a checkpoint in flight (docs/state.md "Exactly-once"): PREPARE sent to the stateful
#: tasks (they stage), or past the commit point with COMMIT going out (they commit)
IN_FLIGHT = ("PREPARING", "COMMITTING")


def redis_kill(ctx: Context, rec: FaultRecord, down_secs: float = 5.0, phase: str | None = None) -> None:
    """kill -9 of the workload's Redis while a checkpoint is in flight — the epoch record (polled
    every 5 ms) says ``phase`` (PREPARING: the stateful tasks stage; COMMITTING: past the commit
    point, they commit), or either when ``phase`` is None; at any moment if that is not seen within
    30 s — started again on the same port and append-only file after ``down_secs``. Evidence: the
    pid gone, PING unanswered while down, a new pid answering PING, the phase at the kill, and the
    checkpoints that failed."""
    c = ctx.c
    server = c.redis
    if server is None or not server.running():
        rec.error = "this workload has no running Redis"
        return
    rec.target = f"Redis {server.host}:{server.port} (pid {server.proc.pid})"
    _kill_store(ctx, rec, server, phase, down_secs, _redis_pong)


def wait_phase(ctx: Context, phase: str | None) -> str | None:
    """Wait (30 s at most, polling every 5 ms) until the checkpoint record, in the workload's Redis,
    says ``phase`` (either phase in flight when None); the phase seen, or None."""
    watcher = RedisStateProvider(ctx.c.redis.url, timeout=1.0)
    try:
        wanted = IN_FLIGHT if phase is None else (phase,)
        seen, _ = ctx.wait(lambda: (p := read_epoch(watcher, TOPOLOGY_NAME).phase) in wanted and p, 30,
                           interval=0.005)
        return seen or None
    finally:
        safe(watcher.close)


def _pg_answers(server: Any) -> bool:
    try:
        with server.connect(autocommit=True) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except Exception:  # noqa: BLE001 - down
        return False


def postgres_kill(ctx: Context, rec: FaultRecord, down_secs: float = 5.0, phase: str | None = None) -> None:
    """kill -9 of the workload's PostgreSQL (the postmaster and its backends) while a checkpoint is
    in flight (``phase`` as for ``redis_kill``), started again on the same port and data directory
    after ``down_secs``: the sink's prepared transactions survive it (or its staged rows). Evidence
    as for ``redis_kill``, with a query in place of PING."""
    server = ctx.c.postgres
    if server is None or not server.running():
        rec.error = "this workload has no running PostgreSQL"
        return
    rec.target = f"PostgreSQL {server.host}:{server.port} (pid {server.proc.pid})"
    _kill_store(ctx, rec, server, phase, down_secs, _pg_answers)


def _kill_store(ctx: Context, rec: FaultRecord, server: Any, phase: str | None, down_secs: float,
                answers: Callable[[Any], bool]) -> None:
    c = ctx.c
    old_pid = server.proc.pid
    failures0 = safe(lambda: c.component_stat("$checkpointspout", "checkpoint_failures"))
    seen = wait_phase(ctx, phase)
    rec.start = ctx.now()
    c.guard()
    server.kill()
    t0 = time.monotonic()
    unanswered = not answers(server)
    old_dead = not process_alive(old_pid)
    ctx.sleep(down_secs - (time.monotonic() - t0))
    c.guard()
    server.start()
    rec.healed = ctx.now()
    pong, pong_secs = ctx.wait(lambda: answers(server), 30)
    # the checkpoint spout's failure counter reaches nimbus with its heartbeats: read it after
    failed, failed_secs = ctx.wait(
        lambda: (f := c.component_stat("$checkpointspout", "checkpoint_failures")) is not None
        and failures0 is not None and f > failures0 and f, 30.0, interval=0.5)
    rec.end = ctx.now()
    new_pid = server.proc.pid if server.running() else None
    rec.evidence = {"old_pid": old_pid, "new_pid": new_pid, "old_pid_dead": old_dead,
                    "ping_unanswered_while_down": unanswered, "answers_ping_after_restart_secs": pong_secs if pong else None,
                    "phase_at_kill": seen or f"{phase or 'a checkpoint'} not seen in 30 s (killed between checkpoints)",
                    "checkpoint_failures_before": failures0, "checkpoint_failures_after": failed or None,
                    "checkpoint_failure_seen_after_restart_secs": failed_secs if failed else None}
    rec.injected = old_dead and unanswered and bool(pong) and new_pid not in (None, old_pid)
