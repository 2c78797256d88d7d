"""Reports of chaos runs: the full record as JSON, a Markdown section appended to docs/reliability.md."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from tests.chaos.fault_context import FaultRecord
from tests.chaos.run import RunResult

#: docs/reliability.md: runs are appended after this line
RESULTS_MARKER = "<!-- chaos results: runs are appended below this line by tests/chaos -->"


def write_json(result: RunResult, path: Path, command: str) -> None:
    data = result.to_json()
    data["command"] = command
    data["machine"] = machine()
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def machine() -> dict[str, object]:
    load = os.getloadavg()
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_1_5_15": [round(x, 2) for x in load]}


def _evidence(f: FaultRecord) -> str:
    e = f.evidence
    pick = {
        "worker_kill": lambda: ((f"the worker running {e['component']}: " if e.get("component") else "")
                                + (f"killed in {e['phase_at_kill']}, " if e.get("phase_at_kill") else "")
                                + f"relaunched after {[v.get('after_secs') for v in e.get('relaunched', {}).values()]} s"),
        "redis_kill": lambda: (f"killed in {e.get('phase_at_kill')}, pid {e.get('old_pid')}→{e.get('new_pid')}, "
                               f"PING answered {e.get('answers_ping_after_restart_secs')} s after restart, "
                               f"checkpoint failures {e.get('checkpoint_failures_before')}→"
                               f"{e.get('checkpoint_failures_after')}"),
        "postgres_kill": lambda: (f"killed in {e.get('phase_at_kill')}, pid {e.get('old_pid')}→{e.get('new_pid')}, "
                                  f"answered a query {e.get('answers_ping_after_restart_secs')} s after restart, "
                                  f"checkpoint failures {e.get('checkpoint_failures_before')}→"
                                  f"{e.get('checkpoint_failures_after')}"),
        "supervisor_kill": lambda: (f"node gone from ZK after {e.get('ephemeral_vanished_after_secs')} s, "
                                    f"{e.get('executors_before')} executors moved after "
                                    f"{e.get('executors_moved_after_secs')} s"),
        "nimbus_leader_kill": lambda: (f"{e.get('new_leader')} leads after {e.get('failover_secs')} s, "
                                       f"epoch {e.get('epoch_before')}→{e.get('epoch_after')}"),
        "zk_restart": lambda: (f"pid {e.get('old_pid')}→{e.get('new_pid')}, all back after "
                               f"{e.get('supervisors_and_leader_back_after_secs')} s"),
        "supervisor_session_expiry": lambda: (f"node gone after {e.get('ephemeral_vanished_after_secs')} s, "
                                              f"new session {e.get('new_session')}"),
        "worker_session_expiry": lambda: (f"session expired after {e.get('session_expired_after_secs')} s, "
                                          f"new {e.get('new_session')}, survived={e.get('worker_survived')}"),
        "partition": lambda: (f"node gone after {e.get('ephemeral_vanished_after_secs')} s, "
                              f"{e.get('executors_before')} executors moved after "
                              f"{e.get('executors_moved_after_secs')} s"),
        "slow_bolt": lambda: f"spout failed {e.get('spout_failed_before')}→{e.get('spout_failed_after')}",
        "zk_leader_kill": lambda: (f"{e.get('new_leader')} leads after {e.get('new_leader_after_secs')} s, "
                                   f"cluster whole after {e.get('cluster_healthy_after_secs')} s, old leader "
                                   f"back as follower {e.get('rejoined_as_follower_after_restart_secs')} s after restart"),
        "zk_follower_kill": lambda: (f"leader kept: {e.get('leader_kept')}, cluster whole after "
                                     f"{e.get('cluster_healthy_after_secs')} s, rejoined "
                                     f"{e.get('rejoined_after_restart_secs')} s after restart"),
        "zk_ensemble_restart": lambda: (f"quorum {e.get('quorum_after_restart_secs')} s after the restart, daemons back "
                                        f"after {e.get('supervisors_and_leader_back_after_secs')} s, cluster whole "
                                        f"{e.get('cluster_healthy_after_secs')} s after the kill"),
    }.get(f.kind)
    text = pick() if pick else json.dumps(e)
    return text + (f"; error: {f.error}" if f.error else "")


def markdown(result: RunResult, command: str) -> str:
    m = machine()
    title = f"### {result.started_at} — {result.mode}" + (f", {result.duration:.0f} s, seed {result.seed}"
                                                            if result.mode == "soak" else "")
    if result.zookeepers > 1:
        title += f", ZooKeeper ensemble of {result.zookeepers}"
    if result.workload != "rabbitmq":
        title += f", workload {result.workload}"
    exactly_once = result.workload == "kafka-eo"
    lines = [
        title,
        "",
        f"Command: `{command}`  ",
        f"Machine: {m['cpus']} cores, load average {m['load_avg_1_5_15']} at the end, Python {m['python']}.",
        "",
        ("| N | lost | over-counted | unexpected keys | converged after last fault | faults (injected) | "
         if exactly_once else
         "| N | lost | duplicates (ids) | unexpected | converged after last fault | faults (injected) | ")
        + "fault phase | total | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {result.n} | {result.lost} | "
        + (f"{result.over_counted}" if exactly_once else f"{result.duplicates} ({result.duplicated_ids})")
        + f" | {result.unexpected} | "
        f"{(str(result.convergence_secs) + ' s') if result.converged else 'no'} | "
        f"{len(result.faults)} ({sum(f.injected for f in result.faults)}) | {result.fault_phase_secs} s | "
        f"{result.total_secs} s | {'PASS' if result.ok else 'FAIL'} |",
        "",
        ("| # | t start (s) | fault | target | held (s) | injected | evidence | longest commit stall (s) | "
         "first count after heal (s) |" if exactly_once else
         "| # | t start (s) | fault | target | held (s) | injected | evidence | longest sink stall (s) | "
         "first id after heal (s) |"),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, f in enumerate(result.faults, 1):
        held = round(f.healed - f.start, 1) if f.healed is not None else "-"
        kind = f.kind + (f" (while {', '.join(f.overlapped)} ran)" if f.overlapped else "")
        lines.append(f"| {n} | {f.start} | {kind} | {f.target} | {held} | {'yes' if f.injected else 'NO'} | "
                     f"{_evidence(f)} | {f.max_stall_secs} | {f.resumed_secs} |")
    if result.error:
        lines += ["", f"Run error: `{result.error}`"]
    if result.lost_ids:
        lines += ["", f"Lost ids (first 100): {result.lost_ids}"]
    if result.lost_keys or result.over_counted_keys:
        lines += ["", f"Per key: lost {result.lost_keys}, over-counted {result.over_counted_keys}"]
    if exactly_once:
        lines += ["", f"Committed checkpoints checked as consistent cuts (state sum = position sum): "
                      f"{result.cuts_checked}, inconsistent: {len(result.inconsistent_cuts)}"]
        lines += [f"- {cut}" for cut in result.inconsistent_cuts[:10]]
    return "\n".join(lines) + "\n"


def append_markdown(result: RunResult, path: Path, command: str) -> None:
    """Append the run's section at the end of the results (before the next ``## `` section after
    the marker, if the document goes on)."""
    text = path.read_text() if path.exists() else ""
    if RESULTS_MARKER not in text:
        text = text.rstrip("\n") + ("\n\n" if text else "") + "## Results\n\n" + RESULTS_MARKER + "\n"
    after = text.index(RESULTS_MARKER) + len(RESULTS_MARKER)
    nxt = text.find("\n## ", after)
    head, tail = (text, "") if nxt < 0 else (text[:nxt + 1], text[nxt + 1:])
    text = head.rstrip("\n") + "\n\n" + markdown(result, command)
    path.write_text(text + ("\n" + tail if tail else ""))
