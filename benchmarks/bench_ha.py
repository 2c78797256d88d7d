"""Nimbus failover benchmark: ``kill -9`` of the leader until a new leader schedules.

Run: ``.venv/bin/python -m benchmarks.bench_ha [--trials N] [--session-ms MS]``

Starts its own ZooKeeper and two nimbus processes (plus one supervisor) with Storm's
``nimbus.monitor.freq.secs`` (10) and the given ZooKeeper session timeout (default Storm's 20000 ms).
For each trial, kills the leader with SIGKILL and measures until the survivor (a) reports itself
leader and (b) has completed a scheduling round as leader; then restarts the killed nimbus.
Prints ``name: value unit`` lines, with the target ``session timeout + 5 s``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gale.zkserver import ZooKeeperServer
from gale.nimbus.devcluster import DevCluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--session-ms", type=int, default=20000)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gale-bench-ha-"))
    zk = ZooKeeperServer(data_dir=base / "zk").start()
    cluster = DevCluster(base / "cluster", supervisors=1, slots=1, nimbuses=2, zookeeper=zk,
                         conf={"storm.zookeeper.session.timeout": args.session_ms})
    elected, scheduling = [], []
    try:
        cluster.start()
        for _ in range(args.trials):
            lead = cluster.wait_for_leader(120)
            other = 1 - lead
            cluster.nimbus_procs[lead].kill()
            t0 = time.monotonic()
            t_elected = None
            rounds_at_election = None
            while time.monotonic() - t0 < 120:
                h = cluster.health(other) or {}
                if h.get("leader"):
                    if t_elected is None:
                        t_elected = time.monotonic() - t0
                        rounds_at_election = h["scheduling_rounds"]
                    elif h["scheduling_rounds"] > rounds_at_election:
                        scheduling.append(time.monotonic() - t0)
                        break
                time.sleep(0.05)
            elected.append(t_elected)
            cluster.add_nimbus(lead)
            time.sleep(3)
    finally:
        cluster.cleanup()
        zk.cleanup()
    target = args.session_ms / 1000 + 5
    print(f"nimbus_failover_elected_secs: {statistics.mean(elected):.2f} s (trials {', '.join(f'{x:.2f}' for x in elected)})")
    print(f"nimbus_failover_scheduling_secs: {statistics.mean(scheduling):.2f} s "
          f"(trials {', '.join(f'{x:.2f}' for x in scheduling)}; max {max(scheduling):.2f})")
    print(f"nimbus_failover_target_secs: {target:.1f} s (storm.zookeeper.session.timeout {args.session_ms} ms + 5 s)")


if __name__ == "__main__":
    main()
