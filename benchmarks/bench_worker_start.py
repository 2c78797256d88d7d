"""What a worker's start costs, forked by its supervisor's fork server against exec'd afresh.

Run: ``.venv/bin/python -m benchmarks.bench_worker_start [--rounds R] [--workers W]``

One ZooKeeper and, per mode, a dev cluster of one supervisor with ``W`` slots
(``supervisor.worker.fork.server`` true, then false; the order alternates by round pair). Each round
submits the word count deactivated (``--inactive``: its workers start, heartbeat and idle) with
``topology.workers`` = ``W`` and ``--wait``, reads the CPU every worker process has used (``/proc``,
every thread) two seconds after the submit returned, kills one worker (``kill -9``) and times its
replacement, and kills the topology. Prints, per mode:

* ``worker_start_submit_to_running_secs[mode]``: ``nimbus submit --wait`` until every executor runs
  (scheduling, the launch, the worker's start and its first heartbeat to ZooKeeper), mean and range;
* ``worker_start_cpu_secs[mode]``: a worker's CPU from its process's birth to two idle seconds after
  it runs (an idle deactivated worker uses well under 1% of a core), mean and range;
* ``worker_start_kill_to_replacement_heartbeat_secs[mode]``: then ``kill -9`` of one of the workers,
  until its replacement has written its first heartbeat (the supervisor's slot check, at most a
  second, the launch and the worker's start), median and range; and
  ``worker_start_launch_to_first_heartbeat_secs[mode]``, the part of it from the supervisor's launch;
* ``worker_start_fork_server_cpu_secs``: what the fork server itself used (its import of the worker,
  once per supervisor, and its forks).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import time
from datetime import datetime
from pathlib import Path

import psutil

from benchmarks.bench_cluster import cli, dev_cluster, wait, workers_of
from gale.nimbus.client import NimbusClient

ROOT = Path(__file__).resolve().parent.parent
WORD_COUNT = ROOT / "examples" / "word_count.py"
IDLE_SECS = 2.0


def _cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used (every thread)."""
    return sum(psutil.Process(pid).cpu_times()[:2])


def measure(fork: bool, rounds: int, workers: int) -> tuple[list[float], list[float], list[tuple[float, float]],
                                                           float | None]:
    conf = {"supervisor.worker.fork.server": fork}
    secs: list[float] = []
    cpus: list[float] = []
    restarts: list[tuple[float, float]] = []
    fork_server_cpu = None
    with dev_cluster("gale-bench-start-", supervisors=1, slots=workers, conf=conf) as (_, cluster):
        client = NimbusClient(cluster.client_conf())
        for r in range(rounds):
            name = f"start-{r}"
            t0 = time.monotonic()
            cli(cluster, "submit", str(WORD_COUNT), "--name", name, "--inactive", "--wait",
                "-c", f"topology.workers={workers}")
            secs.append(time.monotonic() - t0)
            found = wait(lambda: (lambda ws: ws if len(ws) == workers else None)(workers_of(client, name)), 60)
            time.sleep(IDLE_SECS)  # the figure is "by two idle seconds after running", by definition
            pids = [w["pid"] for w in found]
            cpus.extend(_cpu(p) for p in pids)
            if fork:
                fork_server_cpu = _cpu(psutil.Process(pids[0]).ppid())
            restarts.append(_kill_to_heartbeat(cluster, pids[0]))
            cli(cluster, "kill", name, "--wait", "0", "--wait-removal")
    return secs, cpus, restarts, fork_server_cpu


def _kill_to_heartbeat(cluster, pid: int) -> tuple[float, float]:
    """``kill -9`` of worker ``pid`` until its replacement has written its first LocalState heartbeat,
    and of that the part from the supervisor's launch (its ``worker-launched`` log line) on; the rest
    is the supervisor noticing the exit at its next slot check (at most a second)."""
    local = Path(cluster.supervisor_config(0).storm_local_dir)
    workers = local / "workers"
    before = {d.name for d in workers.iterdir()}
    time.sleep(random.random())  # the kill anywhere in the second between two slot checks, not phase-locked
    os.kill(pid, signal.SIGKILL)
    killed, killed_at = time.monotonic(), time.time()

    def replaced():
        for d in workers.iterdir():
            beats = d / "heartbeats"
            if d.name in before or not beats.is_dir():
                continue
            for f in beats.iterdir():
                if not f.name.startswith("."):  # LocalState's complete files, not one being written
                    return d.name, f.stat().st_mtime
        return None

    worker_id, first_beat = wait(replaced, 60, 0.005)
    took = time.monotonic() - killed
    launched = None
    for line in (local / "logs" / "supervisor.log").read_text().splitlines():
        if '"worker-launched"' in line and worker_id in line:
            launched = datetime.fromisoformat(json.loads(line)["timestamp"].replace("Z", "+00:00")).timestamp()
    assert launched is not None and launched >= killed_at, f"no launch of {worker_id} logged after the kill"
    return took, first_beat - launched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="topologies submitted per mode and pass")
    parser.add_argument("--workers", type=int, default=2, help="workers a topology has (slots of the supervisor)")
    parser.add_argument("--passes", type=int, default=2, help="passes over both modes, alternating their order")
    args = parser.parse_args()
    got: dict[str, tuple[list, list, list]] = {"fork": ([], [], []), "exec": ([], [], [])}
    fork_server = []
    for p in range(args.passes):
        for mode in (("fork", "exec") if p % 2 == 0 else ("exec", "fork")):
            secs, cpus, restarts, fs_cpu = measure(mode == "fork", args.rounds, args.workers)
            got[mode][0].extend(secs)
            got[mode][1].extend(cpus)
            got[mode][2].extend(restarts)
            if fs_cpu is not None:
                fork_server.append(fs_cpu)
            print(f"pass {p + 1}, {mode}: submit to running {' '.join(f'{s:.2f}' for s in secs)} s; "
                  f"worker CPU {' '.join(f'{c:.2f}' for c in cpus)} s; kill to replacement's heartbeat "
                  f"{' '.join(f'{r:.2f} ({b:.2f} from its launch)' for r, b in restarts)} s", flush=True)
    for mode, (secs, cpus, restarts) in got.items():
        print(f"worker_start_submit_to_running_secs[{mode}]: {statistics.mean(secs):.2f} s "
              f"({min(secs):.2f} to {max(secs):.2f}, {len(secs)} submits)")
        print(f"worker_start_cpu_secs[{mode}]: {statistics.mean(cpus):.3f} s "
              f"({min(cpus):.3f} to {max(cpus):.3f}, {len(cpus)} workers)")
        whole, launch = [r for r, _ in restarts], [b for _, b in restarts]
        print(f"worker_start_kill_to_replacement_heartbeat_secs[{mode}]: {statistics.median(whole):.2f} s median "
              f"({min(whole):.2f} to {max(whole):.2f}, {len(whole)} kills)")
        print(f"worker_start_launch_to_first_heartbeat_secs[{mode}]: {statistics.median(launch):.3f} s median "
              f"({min(launch):.3f} to {max(launch):.3f})")
    if fork_server:
        print(f"worker_start_fork_server_cpu_secs: {' '.join(f'{c:.2f}' for c in fork_server)} s "
              "(each fork server, after all its rounds)")


if __name__ == "__main__":
    main()
