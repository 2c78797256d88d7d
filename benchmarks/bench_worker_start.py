"""What a worker's start costs, forked by its supervisor's fork server against exec'd afresh.

Run: ``.venv/bin/python -m benchmarks.bench_worker_start [--rounds R] [--workers W]``

One ZooKeeper and, per mode, a dev cluster of one supervisor with ``W`` slots
(``supervisor.worker.fork.server`` true, then false; the order alternates by round pair). Each round
submits the word count deactivated (``--inactive``: its workers start, heartbeat and idle) with
``topology.workers`` = ``W`` and ``--wait``, reads the CPU every worker process has used (``/proc``,
every thread) two seconds after the submit returned, and kills it. Prints, per mode:

* ``worker_start_submit_to_running_secs[mode]``: ``nimbus submit --wait`` until every executor runs
  (scheduling, the launch, the worker's start and its first heartbeat to ZooKeeper), mean and range;
* ``worker_start_cpu_secs[mode]``: a worker's CPU from its process's birth to two idle seconds after
  it runs (an idle deactivated worker uses well under 1% of a core), mean and range;
* ``worker_start_fork_server_cpu_secs``: what the fork server itself used (its import of the worker,
  once per supervisor, and its forks).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from benchmarks.bench_cluster import cli, dev_cluster, wait, workers_of
from gale.nimbus.client import NimbusClient

ROOT = Path(__file__).resolve().parent.parent
WORD_COUNT = ROOT / "examples" / "word_count.py"
IDLE_SECS = 2.0


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[1])


def measure(fork: bool, rounds: int, workers: int) -> tuple[list[float], list[float], float | None]:
    conf = {"supervisor.worker.fork.server": fork}
    secs: list[float] = []
    cpus: list[float] = []
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
                fork_server_cpu = _cpu(_parent(pids[0]))
            cli(cluster, "kill", name, "--wait", "0", "--wait-removal")
    return secs, cpus, fork_server_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="topologies submitted per mode and pass")
    parser.add_argument("--workers", type=int, default=2, help="workers a topology has (slots of the supervisor)")
    parser.add_argument("--passes", type=int, default=2, help="passes over both modes, alternating their order")
    args = parser.parse_args()
    got: dict[str, tuple[list[float], list[float]]] = {"fork": ([], []), "exec": ([], [])}
    fork_server = []
    for p in range(args.passes):
        for mode in (("fork", "exec") if p % 2 == 0 else ("exec", "fork")):
            secs, cpus, fs_cpu = measure(mode == "fork", args.rounds, args.workers)
            got[mode][0].extend(secs)
            got[mode][1].extend(cpus)
            if fs_cpu is not None:
                fork_server.append(fs_cpu)
            print(f"pass {p + 1}, {mode}: submit to running {' '.join(f'{s:.2f}' for s in secs)} s; "
                  f"worker CPU {' '.join(f'{c:.2f}' for c in cpus)} s", flush=True)
    for mode, (secs, cpus) in got.items():
        print(f"worker_start_submit_to_running_secs[{mode}]: {statistics.mean(secs):.2f} s "
              f"({min(secs):.2f} to {max(secs):.2f}, {len(secs)} submits)")
        print(f"worker_start_cpu_secs[{mode}]: {statistics.mean(cpus):.3f} s "
              f"({min(cpus):.3f} to {max(cpus):.3f}, {len(cpus)} workers)")
    if fork_server:
        print(f"worker_start_fork_server_cpu_secs: {' '.join(f'{c:.2f}' for c in fork_server)} s "
              "(each fork server, after all its rounds)")


if __name__ == "__main__":
    main()
