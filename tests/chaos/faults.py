"""Fault injectors: each injects one fault, holds it, removes it, and records what it saw.

An injector is ``fn(ctx, record, **params)``; it fills the :class:`FaultRecord` — the target, times
(seconds since the run started: ``start`` when injected, ``healed`` when removed, ``end`` when the
injector stopped watching), ``injected`` (the fault demonstrably took effect, judged from outside the
daemons: a vanished ephemeral node, a new session id, a new leader, failed tuples) and ``evidence``.
Injectors never raise for a fault that did not take; they say so in the record, and the run fails
on it. They always undo what they did (SIGCONT, link up, restart) in ``finally``.

Kinds (``FAULTS``): ``worker_kill``, ``supervisor_kill``, ``nimbus_leader_kill``, ``zk_restart``,
``supervisor_session_expiry``, ``worker_session_expiry``, ``partition``, ``slow_bolt``; on a
ZooKeeper ensemble also ``zk_leader_kill``, ``zk_follower_kill`` and ``zk_ensemble_restart``; with the
exactly-once workload ``redis_kill`` (its Redis server, ``c.redis``); with the PostgreSQL workload
``postgres_kill`` (``c.postgres``), both in :mod:`tests.chaos.store_faults`. ``worker_kill`` with a
``phase`` kills when the checkpoint record says that phase (the sink's worker mid-prepare, mid-commit).
:class:`FaultRecord` and :class:`Context` live in :mod:`tests.chaos.fault_context`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gale.zkserver import four_letter
from tests.chaos.cluster import CONF, SESSION_TIMEOUT_SECS, Stopping, log, process_alive
from tests.chaos.fault_context import Context, FaultRecord, safe
from tests.chaos.store_faults import postgres_kill, redis_kill, wait_phase
from tests.chaos_topology.pipeline import SLOW_FILE


# ---------------------------------------------------------------------------------- processes


def worker_kill(ctx: Context, rec: FaultRecord, count: int = 1, component: str | None = None,
                phase: str | None = None) -> None:
    """kill -9 of ``count`` random workers (among those running ``component``'s executors, when
    given; when the checkpoint record says ``phase``, when given); the supervisors relaunch them."""
    c = ctx.c
    workers = c.workers()
    if component is not None:
        hosting, _ = ctx.wait(lambda: c.component_workers(component) & set(workers), 30)
        workers = {p: i for p, i in workers.items() if p in (hosting or ())}
    if not workers:
        rec.error = "no live worker to kill" + (f" running {component}" if component else "")
        return
    victims = ctx.rng.sample(sorted(workers), min(count, len(workers)))
    rec.target = ", ".join(f"pid {p} on {c.supervisor_id(workers[p])}" for p in victims)
    seen = wait_phase(ctx, phase) if phase is not None else None
    rec.start = ctx.now()
    killed_at = time.monotonic()
    for pid in victims:
        c.kill_worker(pid)
    rec.healed = ctx.now()
    dead, _ = ctx.wait(lambda: all(not process_alive(p) for p in victims), 10)
    relaunched: dict[str, dict[str, Any]] = {}
    deadline = killed_at + 90
    while len(relaunched) < len(victims) and time.monotonic() < deadline:
        live = c.workers()
        for pid in victims:
            i = workers[pid]
            new = [p for p, j in live.items() if j == i and p not in victims and p not in workers]
            if str(pid) not in relaunched and new:
                relaunched[str(pid)] = {"supervisor": c.supervisor_id(i), "new_pid": new[0],
                                        "after_secs": round(time.monotonic() - killed_at, 2)}
        ctx.sleep(0.1)
    for pid in victims:
        relaunched.setdefault(str(pid), {"supervisor": c.supervisor_id(workers[pid]), "new_pid": None,
                                         "after_secs": None})
    rec.end = ctx.now()
    rec.evidence = {"killed": victims, "dead": bool(dead), "relaunched": relaunched}
    if component is not None:
        rec.evidence["component"] = component
    if phase is not None:
        rec.evidence["phase_at_kill"] = seen or f"{phase} not seen in 30 s (killed between checkpoints)"
    rec.injected = bool(dead)


def supervisor_kill(ctx: Context, rec: FaultRecord, index: int | None = None, down_secs: float = 20.0) -> None:
    """kill -9 of a supervisor and its workers; restarted after ``down_secs`` (or once its work moved)."""
    c = ctx.c
    i = ctx.rng.randrange(c.n_supervisors) if index is None else index
    sid = c.supervisor_id(i)
    pids = [p for p, j in c.workers().items() if j == i]
    before = safe(lambda: c.executors_on(i), 0)
    rec.target = f"{sid} (pid {c.supervisor_pid(i)}) with workers {pids}"
    rec.start = ctx.now()
    c.kill_supervisor(i)
    t0 = time.monotonic()
    gone, vanished_secs = ctx.wait(lambda: c.supervisor_owner(i) is None, SESSION_TIMEOUT_SECS + 20)
    moved_secs = None
    if before:
        limit = max(down_secs, float(CONF["nimbus.task.timeout.secs"]) + 20) - (time.monotonic() - t0)
        moved, _ = ctx.wait(lambda: c.executors_on(i) == 0, max(0.0, limit))
        moved_secs = round(time.monotonic() - t0, 2) if moved else None
    remaining = down_secs - (time.monotonic() - t0)
    if remaining > 0:
        ctx.sleep(remaining)
    c.restart_supervisor(i)
    rec.healed = ctx.now()
    back, back_secs = ctx.wait(lambda: c.supervisor_owner(i) is not None, 60)
    rec.end = ctx.now()
    rec.evidence = {
        "workers_killed": pids, "workers_dead": all(not process_alive(p) for p in pids),
        "executors_before": before, "ephemeral_vanished_after_secs": vanished_secs if gone else None,
        "executors_moved_after_secs": moved_secs, "reregistered_after_restart_secs": back_secs if back else None,
    }
    rec.injected = bool(gone) and rec.evidence["workers_dead"]


def nimbus_leader_kill(ctx: Context, rec: FaultRecord, down_secs: float = 10.0) -> None:
    """kill -9 of the leader nimbus; the standby takes over; the old leader restarts as a standby."""
    c = ctx.c
    lead, _ = ctx.wait(lambda: c.leader_index() is not None and (c.leader_index(),), 60)
    if not lead:
        rec.error = "no leader to kill"
        return
    lead = lead[0]
    epoch0 = safe(c.leader_epoch)
    rec.target = f"nimbus-{lead} (pid {c.dev.nimbus_procs[lead].proc.pid}, epoch {epoch0})"
    rec.start = ctx.now()
    c.kill_nimbus(lead)
    t0 = time.monotonic()
    new, failover = ctx.wait(lambda: (j := c.leader_index()) is not None and j != lead and (j,), 60)
    epoch1 = safe(c.leader_epoch)
    remaining = down_secs - (time.monotonic() - t0)
    if remaining > 0:
        ctx.sleep(remaining)
    c.restart_nimbus(lead)
    rec.healed = ctx.now()
    standby, standby_secs = ctx.wait(lambda: (h := c.dev.health(lead)) is not None and not h.get("leader"), 60)
    rec.end = ctx.now()
    rec.evidence = {"new_leader": f"nimbus-{new[0]}" if new else None, "failover_secs": failover if new else None,
                    "epoch_before": epoch0, "epoch_after": epoch1,
                    "restarted_as_standby_after_secs": standby_secs if standby else None}
    rec.injected = bool(new) and epoch0 is not None and epoch1 is not None and epoch1 > epoch0


def zk_restart(ctx: Context, rec: FaultRecord, down_secs: float = 3.0) -> None:
    """kill -9 of the ZooKeeper server; started again on the same port and data after ``down_secs``."""
    c = ctx.c
    old_pid = c.zk.proc.pid
    rec.target = f"ZooKeeper {c.zk.address} (pid {old_pid})"
    rec.start = ctx.now()
    c.kill_zookeeper()
    try:
        four_letter(c.zk.host, c.zk.port, "ruok", timeout=1.0)
        unreachable = False
    except OSError:
        unreachable = True
    ctx.sleep(down_secs)
    c.start_zookeeper()
    rec.healed = ctx.now()
    new_pid = c.zk.proc.pid
    everyone, secs = ctx.wait(lambda: len(c.registered()) >= c.n_supervisors and c.leader_index() is not None, 60)
    rec.end = ctx.now()
    rec.evidence = {"old_pid": old_pid, "new_pid": new_pid, "unreachable_while_down": unreachable,
                    "old_pid_dead": not process_alive(old_pid),
                    "supervisors_and_leader_back_after_secs": secs if everyone else None}
    rec.injected = unreachable and rec.evidence["old_pid_dead"] and new_pid != old_pid



# ---------------------------------------------------------------------------------- ZooKeeper ensemble


def _ensemble_recovery(ctx: Context, t0: float) -> dict[str, Any]:
    """How long after ``t0`` the cluster was whole again: every supervisor registered, a nimbus
    leading, every executor running (None if not within two minutes)."""
    healthy, _ = ctx.wait(lambda: not ctx.c.health_problems(), 120, interval=0.5)
    return {"cluster_healthy_after_secs": round(time.monotonic() - t0, 2) if healthy else None}


def zk_leader_kill(ctx: Context, rec: FaultRecord, down_secs: float = 10.0) -> None:
    """kill -9 of the ensemble's leader; the followers elect a new one; the old leader starts
    again after ``down_secs`` and rejoins as a follower."""
    c = ctx.c
    lead, _ = ctx.wait(lambda: (i := c.zk_leader()) is not None and (i,), 60)
    if not lead:
        rec.error = "the ensemble has no leader"
        return
    i = lead[0]
    member = c.zk_members()[i]
    old_pid = member.proc.pid
    rec.target = f"ZooKeeper leader zk{i + 1} {member.address} (pid {old_pid})"
    rec.start = ctx.now()
    t0 = time.monotonic()
    c.kill_zk_member(i)
    new, elected_secs = ctx.wait(lambda: (j := c.zk_leader()) is not None and j != i and (j,), 60)
    recovery = _ensemble_recovery(ctx, t0)
    remaining = down_secs - (time.monotonic() - t0)
    if remaining > 0:
        ctx.sleep(remaining)
    c.start_zk_member(i)
    rec.healed = ctx.now()
    rejoined, rejoined_secs = ctx.wait(lambda: member.mode() == "follower", 60)
    rec.end = ctx.now()
    rec.evidence = {"old_leader": f"zk{i + 1}", "new_leader": f"zk{new[0] + 1}" if new else None,
                    "new_leader_after_secs": elected_secs if new else None, "old_pid_dead": not process_alive(old_pid),
                    **recovery, "rejoined_as_follower_after_restart_secs": rejoined_secs if rejoined else None}
    rec.injected = bool(new) and rec.evidence["old_pid_dead"]


def zk_follower_kill(ctx: Context, rec: FaultRecord, down_secs: float = 10.0) -> None:
    """kill -9 of a follower: the quorum (two of three) holds, the leader stays; the follower
    starts again after ``down_secs`` and rejoins."""
    c = ctx.c
    lead = c.zk_leader()
    followers = [j for j, m in enumerate(c.zk_members()) if m.running() and m.mode() == "follower"]
    if lead is None or not followers:
        rec.error = f"no follower to kill (leader {lead}, followers {followers})"
        return
    i = ctx.rng.choice(followers)
    member = c.zk_members()[i]
    old_pid = member.proc.pid
    rec.target = f"ZooKeeper follower zk{i + 1} {member.address} (pid {old_pid})"
    rec.start = ctx.now()
    t0 = time.monotonic()
    c.kill_zk_member(i)
    ctx.sleep(1.0)
    kept = c.zk_leader() == lead  # the same leader serves: no election
    recovery = _ensemble_recovery(ctx, t0)
    remaining = down_secs - (time.monotonic() - t0)
    if remaining > 0:
        ctx.sleep(remaining)
    c.start_zk_member(i)
    rec.healed = ctx.now()
    rejoined, rejoined_secs = ctx.wait(lambda: member.mode() == "follower", 60)
    rec.end = ctx.now()
    rec.evidence = {"follower": f"zk{i + 1}", "leader_kept": kept, "old_pid_dead": not process_alive(old_pid),
                    **recovery, "rejoined_after_restart_secs": rejoined_secs if rejoined else None}
    rec.injected = kept and rec.evidence["old_pid_dead"]


def zk_ensemble_restart(ctx: Context, rec: FaultRecord, down_secs: float = 3.0) -> None:
    """kill -9 of every member; all start again after ``down_secs`` (same ports and data), elect a
    leader, and the daemons' sessions resume (a restart shorter than the session timeout keeps them)."""
    c = ctx.c
    members = c.zk_members()
    old_pids = [m.proc.pid for m in members if m.running()]
    rec.target = f"ZooKeeper ensemble {c.zk.address} (pids {old_pids})"
    rec.start = ctx.now()
    t0 = time.monotonic()
    for i in range(len(members)):
        c.kill_zk_member(i)
    unreachable = all(not m.running() for m in members)
    ctx.sleep(down_secs)
    c.guard()
    c.zk.start()  # all members at once, then the quorum
    rec.healed = ctx.now()
    quorum, quorum_secs = ctx.wait(lambda: c.zk_leader() is not None, 60)
    everyone, back_secs = ctx.wait(lambda: len(c.registered()) >= c.n_supervisors and c.leader_index() is not None, 60)
    recovery = _ensemble_recovery(ctx, t0)
    rec.end = ctx.now()
    new_pids = [m.proc.pid for m in members if m.running()]
    rec.evidence = {"old_pids": old_pids, "new_pids": new_pids, "unreachable_while_down": unreachable,
                    "quorum_after_restart_secs": quorum_secs if quorum else None,
                    "supervisors_and_leader_back_after_secs": back_secs if everyone else None, **recovery}
    rec.injected = unreachable and bool(quorum) and not set(old_pids) & set(new_pids)


# ---------------------------------------------------------------------------------- sessions


def supervisor_session_expiry(ctx: Context, rec: FaultRecord, index: int | None = None) -> None:
    """SIGSTOP a supervisor until ZooKeeper expires its session (its ephemeral node vanishes), then SIGCONT."""
    c = ctx.c
    i = ctx.rng.randrange(c.n_supervisors) if index is None else index
    pid = c.supervisor_pid(i)
    owner0 = safe(lambda: c.supervisor_owner(i))
    if pid is None or owner0 is None:
        rec.error = f"supervisor {i} not running or not registered"
        return
    rec.target = f"{c.supervisor_id(i)} (pid {pid}, session {hex(owner0)})"
    before = safe(lambda: c.executors_on(i))
    rec.start = ctx.now()
    c.suspend(pid)
    try:
        gone, vanished_secs = ctx.wait(lambda: c.supervisor_owner(i) is None, SESSION_TIMEOUT_SECS + 20)
        ctx.sleep(1.0)  # part of the fault: the supervisor stays frozen a moment past its expiry
    finally:
        c.resume(pid)
    rec.healed = ctx.now()
    owner1, back_secs = ctx.wait(lambda: (o := c.supervisor_owner(i)) not in (None, owner0) and o, 60)
    rec.end = ctx.now()
    rec.evidence = {"stopped_secs": round(rec.healed - rec.start, 2),
                    "ephemeral_vanished_after_secs": vanished_secs if gone else None,
                    "new_session": hex(owner1) if owner1 else None,
                    "reregistered_after_secs": back_secs if owner1 else None,
                    "supervisor_alive": process_alive(pid), "executors_before": before,
                    "executors_after": safe(lambda: c.executors_on(i))}
    rec.injected = bool(gone) and bool(owner1)


def worker_session_expiry(ctx: Context, rec: FaultRecord) -> None:
    """SIGSTOP a worker until ZooKeeper expires its session, then SIGCONT (before its supervisor's
    heartbeat timeout, so the same process resumes with a new session)."""
    c = ctx.c
    candidates = {pid: sid for pid in c.workers() if (sid := c.zk_session_of(pid))}
    if not candidates:
        rec.error = "no worker with a ZooKeeper session"
        return
    pid = ctx.rng.choice(sorted(candidates))
    sid0 = candidates[pid]
    rec.target = f"worker pid {pid} (session {sid0})"
    limit = float(CONF["supervisor.worker.timeout.secs"]) - 1.5
    rec.start = ctx.now()
    c.suspend(pid)
    try:
        gone, gone_secs = ctx.wait(lambda: sid0 not in c.zk_sessions().values(), limit)
    finally:
        c.resume(pid)
    rec.healed = ctx.now()
    new, new_secs = ctx.wait(lambda: (s := c.zk_session_of(pid)) not in (None, sid0) and s, 30)
    # survived: the same process goes on heartbeating after its new session (twice, so a supervisor
    # loop had a fresh heartbeat to judge), instead of "still alive 2 s later"
    marks = c.heartbeats()
    beat, _ = ctx.wait(lambda: pid in marks and c.heartbeats_after(marks, {pid}), 30)
    if beat:
        marks = c.heartbeats()
        beat, _ = ctx.wait(lambda: c.heartbeats_after(marks, {pid}), 30)
    rec.end = ctx.now()
    rec.evidence = {"stopped_secs": round(rec.healed - rec.start, 2),
                    "session_expired_after_secs": gone_secs if gone else None,
                    "new_session": new, "new_session_after_secs": new_secs if new else None,
                    "worker_survived": bool(beat) and process_alive(pid)}
    rec.injected = bool(gone) and bool(new)


# ---------------------------------------------------------------------------------- network


def partition(ctx: Context, rec: FaultRecord, hold_secs: float = 20.0) -> None:
    """Cut the namespaced node (its supervisor and workers) off from ZooKeeper, nimbus, RabbitMQ and
    the other workers for ``hold_secs`` (longer if its work has not moved yet), then reconnect it."""
    c = ctx.c
    i = c.ns_index
    before = safe(lambda: c.executors_on(i), 0)
    ns_workers = [p for p, j in c.workers().items() if j == i]
    rec.target = f"{c.supervisor_id(i)} ({c.ns.ns_ip}) with workers {ns_workers}"
    rec.start = ctx.now()
    c.partition()
    t0 = time.monotonic()
    try:
        gone, vanished_secs = ctx.wait(lambda: c.supervisor_owner(i) is None, SESSION_TIMEOUT_SECS + 20)
        moved_secs = None
        if before:
            limit = max(hold_secs, float(CONF["nimbus.task.timeout.secs"]) + 20) - (time.monotonic() - t0)
            moved, _ = ctx.wait(lambda: c.executors_on(i) == 0, max(0.0, limit))
            moved_secs = round(time.monotonic() - t0, 2) if moved else None
        remaining = hold_secs - (time.monotonic() - t0)
        if remaining > 0:
            ctx.sleep(remaining)
    finally:
        c.heal()
    rec.healed = ctx.now()
    healed_at = time.monotonic()
    back, back_secs = ctx.wait(lambda: c.supervisor_owner(i) is not None, 60)
    old_exited, _ = ctx.wait(lambda: all(not process_alive(p) for p in ns_workers), 60) \
        if moved_secs is not None else (None, None)
    exit_secs = round(time.monotonic() - healed_at, 2)
    rec.end = ctx.now()
    rec.evidence = {"held_secs": round(rec.healed - rec.start, 2), "executors_before": before,
                    "ephemeral_vanished_after_secs": vanished_secs if gone else None,
                    "executors_moved_after_secs": moved_secs,
                    "reregistered_after_heal_secs": back_secs if back else None,
                    "old_workers_exited_after_heal_secs": exit_secs if old_exited else None}
    rec.injected = bool(gone)


# ---------------------------------------------------------------------------------- user code


def slow_bolt(ctx: Context, rec: FaultRecord, hold_secs: float = 25.0, delay_secs: float = 1.0) -> None:
    """Make the ``work`` bolt sleep ``delay_secs`` per tuple for ``hold_secs``: pending tuples time out.

    ``hold_secs`` should exceed twice ``topology.message.timeout.secs``: a pending tuple expires
    between one and two timeouts after it was emitted."""
    c = ctx.c
    control = c.state_dir / SLOW_FILE
    # a baseline that no earlier fault is still moving (replays of its timeouts): the same count
    # across a newer heartbeat of every worker (the marker that time passed in the cluster)
    def unchanged_across_heartbeats():
        a, marks = c.spout_failed(), c.heartbeats()
        if a is None or not marks:
            return None
        moved, _ = ctx.wait(lambda: c.heartbeats_after(marks), 15, interval=0.25)
        return moved and c.spout_failed() == a and (a,)

    stable, _ = ctx.wait(unchanged_across_heartbeats, 30, interval=0.5)
    failed0 = stable[0] if stable else c.spout_failed()
    rec.target = f"work bolt, {delay_secs}s per tuple"
    rec.start = ctx.now()
    tmp = control.with_suffix(".tmp")
    tmp.write_text(str(delay_secs))
    os.replace(tmp, control)
    try:
        ctx.sleep(hold_secs)
    finally:
        control.unlink(missing_ok=True)
    rec.healed = ctx.now()
    timeout = float(CONF["topology.message.timeout.secs"])
    failed, secs = ctx.wait(lambda: (f := c.spout_failed()) is not None and failed0 is not None and f > failed0 and f,
                              timeout * 3 + 10, interval=1.0)
    rec.end = ctx.now()
    rec.evidence = {"spout_failed_before": failed0, "spout_failed_after": failed,
                    "timeouts_seen_after_heal_secs": secs if failed else None}
    rec.injected = bool(failed)


FAULTS: dict[str, Callable[..., None]] = {
    "partition": partition,
    "worker_kill": worker_kill,
    "supervisor_session_expiry": supervisor_session_expiry,
    "worker_session_expiry": worker_session_expiry,
    "nimbus_leader_kill": nimbus_leader_kill,
    "zk_restart": zk_restart,
    "supervisor_kill": supervisor_kill,
    "slow_bolt": slow_bolt,
    "zk_leader_kill": zk_leader_kill,
    "zk_follower_kill": zk_follower_kill,
    "zk_ensemble_restart": zk_ensemble_restart,
    "redis_kill": redis_kill,
    "postgres_kill": postgres_kill,
}


def inject(ctx: Context, rec: FaultRecord) -> FaultRecord:
    """Run the injector of ``rec.kind`` with ``rec.params``, filling ``rec``."""
    log(f"fault {rec.kind} {rec.params} ...")
    try:
        FAULTS[rec.kind](ctx, rec, **rec.params)
    except Stopping:
        rec.error = "interrupted: the run stopped"
    except Exception as exc:  # noqa: BLE001 - recorded; the run fails on a fault that did not take
        rec.error = f"{type(exc).__name__}: {exc}"
    if rec.end is None:
        rec.end = ctx.now()
    log(f"fault {rec.kind} on {rec.target or '?'}: injected={rec.injected} {rec.evidence} {rec.error or ''}")
    return rec
