"""What an idle cluster costs: the CPU of each daemon and worker while a topology has nothing to do.

Run: ``.venv/bin/python -m benchmarks.bench_idle [--secs S] [--conf KEY=VALUE ...]``

Starts its own ZooKeeper and a dev cluster of 2 supervisors (processes, as in production), submits
the durable word count of the cluster tests (``tests/cluster_topologies/durable_wc.py``: two spout
tasks, one per worker, reading 100 ids from a file), waits until every id is acked, lets it idle for
a second, then reads each process's CPU time (``psutil``) over ``--secs`` (default 15). ``--conf``
sets topology keys on the submit (``topology.spout.wait.idle.max.sleep.millis=1``: Storm's constant
1 ms spout wait).

Prints ``idle_<role>_cpu_pct: P %`` for ``worker`` (the mean of the two), ``nimbus``,
``supervisor`` (the mean) and ``zookeeper``: percent of one core.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import psutil

from benchmarks.bench_cluster import cli, dev_cluster, wait
from tests.cluster import DURABLE_WC, DurableInput

ROLES = {"gale.worker.cli": "worker", "gale.nimbus.cli": "nimbus", "gale.supervisor.cli": "supervisor",
         "zookeeper": "zookeeper"}


def role_of(cmdline: list[str], base: Path) -> str | None:
    """Which of this run's processes ``cmdline`` is (None: not one of them)."""
    text = " ".join(cmdline)
    if str(base) not in text:
        return None
    for marker, role in ROLES.items():
        if marker in text:
            return role
    return None


def cpu_by_role(base: Path, secs: float) -> dict[str, list[float]]:
    """role → percent of a core of each of its processes, over ``secs``."""
    procs = []
    for p in psutil.process_iter(["cmdline"]):
        role = role_of(p.info["cmdline"] or [], base)
        if role is not None:
            try:
                procs.append((role, p, sum(p.cpu_times()[:2])))
            except psutil.NoSuchProcess:
                continue
    time.sleep(secs)
    out: dict[str, list[float]] = {}
    for role, p, before in procs:
        try:
            out.setdefault(role, []).append((sum(p.cpu_times()[:2]) - before) / secs * 100)
        except psutil.NoSuchProcess:
            continue
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secs", type=float, default=15.0)
    parser.add_argument("--conf", action="append", default=[], help="KEY=VALUE for the topology's submit")
    args = parser.parse_args()
    with dev_cluster("gale-bench-idle-") as (base, cluster):
        work = DurableInput(base / "work", 100)
        extra = [x for kv in args.conf for x in ("-c", kv)]
        cli(cluster, "submit", str(DURABLE_WC), "--name", "idle", "--wait", *work.overrides(), *extra)
        wait(lambda: len(work.acked()) >= 100, 120, 0.1)
        time.sleep(1.0)
        cpu = cpu_by_role(base, args.secs)
        print(f"idle for {args.secs:g} s after 100 ids; topology conf {args.conf or 'defaults'}", flush=True)
        for role in ("worker", "nimbus", "supervisor", "zookeeper"):
            values = cpu.get(role, [])
            if values:
                print(f"idle_{role}_cpu_pct: {statistics.mean(values):.2f} % "
                      f"({len(values)} process{'es' if len(values) > 1 else ''}: "
                      f"{', '.join(f'{v:.2f}' for v in values)})", flush=True)

if __name__ == "__main__":
    main()
