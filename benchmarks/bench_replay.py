"""How soon the tuple trees cut by ``kill -9`` of a worker replay: at the replacement's hello
(``topology.replay.on.restart``, the default) against Storm's way, at the message timeout.

Run: ``.venv/bin/python -m benchmarks.bench_replay [--kills N] [--n IDS]``

Starts its own ZooKeeper and a dev cluster of 2 supervisors (processes, as in production) with
Storm's default ``topology.message.timeout.secs`` (30). The topology is the durable word count of
the cluster tests (``tests/cluster_topologies/durable_wc.py``: two spout tasks, one per worker, each
emitting its own ids in order from a file and logging each id it is told is acked; max spout pending
200; a sink bounded to ~2,000 ids/s so the input outlasts the kills). Per mode (replay on, off) it
submits the topology, and ``--kills`` times: waits for progress, ``kill -9`` the worker of the first
spout task, and times

* ``kill → replacement``: until the supervisor's replacement worker process exists (``/proc``);
* ``kill → in flight acked``: until the surviving spout has been told ``ack`` for every id of its own
  it may have emitted at the kill (up to the highest it had acked + twice max spout pending: it
  emits its ids in order) — every tree it had in flight then, those the dead worker held included
  (lost trees are acked only once they were replayed).

Prints a line per kill, then ``replay_{on,off}_kill_to_replacement_secs_p50`` and
``replay_{on,off}_kill_to_in_flight_acked_secs_{p50,max}``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time
from pathlib import Path

from benchmarks.bench_cluster import cli, dev_cluster, wait
from benchmarks.bench_recovery import uptime, worker_processes
from gale.nimbus.client import NimbusClient
from gale.nimbus.devcluster import DevCluster
from tests.cluster import DURABLE_WC, SLOW_SINK, DurableInput

MODES = {"on": True, "off": False}
#: the topology's ``topology.max.spout.pending`` (per spout task)
MAX_PENDING = 200


def acked_of(work: DurableInput, index: int) -> set[int]:
    """The ids spout task ``index`` logged as acked."""
    path = work.state / f"acked-{index}.log"
    return {int(x) for x in path.read_text().split()} if path.exists() else set()


def first_spout_worker(client: NimbusClient, name: str) -> int | None:
    """The pid of the worker that runs the first spout executor (task index 0), once it reported."""
    execs = client.topology(name)["components"]["source"]["executor_list"]
    worker = execs[0]["worker"] if execs else None
    return worker["pid"] if worker and worker.get("pid") else None


def run_mode(cluster: DevCluster, client: NimbusClient, base: Path, mode: str, kills: int, n: int) -> list:
    name = f"replay-{mode}"
    work = DurableInput(base / name, n)
    args = work.overrides(**SLOW_SINK, **{"topology.replay.on.restart": str(MODES[mode]).lower()})
    topology_id = cli(cluster, "submit", str(DURABLE_WC), "--name", name, "--wait", *args).strip()
    rows = []
    try:
        for i in range(kills):
            progress = len(work.acked())
            wait(lambda: len(work.acked()) > progress + 2000, 180, 0.05)
            victim = wait(lambda: first_spout_worker(client, name), 60, 0.1)
            procs = worker_processes(topology_id)
            survivor = acked_of(work, 1)
            top = max(survivor)
            # task 1 emits the odd ids in order, at most MAX_PENDING unacked: all it has emitted are
            # below the highest acked + 2 × MAX_PENDING (those not yet emitted soon will be)
            in_flight = {x for x in range(1, top + 2 * MAX_PENDING + 1, 2) if x not in survivor}
            os.kill(victim, signal.SIGKILL)
            killed, t0 = uptime(), time.monotonic()
            replacement = wait(lambda: [t for p, t in worker_processes(topology_id).items() if p not in procs], 120, 0.02)
            wait(lambda: not (in_flight - acked_of(work, 1)), 180, 0.02)
            row = (replacement[0] - killed, time.monotonic() - t0, len(in_flight))
            rows.append(row)
            print(f"replay {mode}, kill {i + 1}: kill → replacement {row[0]:.2f} s, kill → in flight acked "
                  f"{row[1]:.2f} s ({row[2]} ids of the surviving spout in flight at the kill)", flush=True)
            wait(lambda: first_spout_worker(client, name) not in (None, victim), 60, 0.1)
        if len(work.acked()) >= n:
            print(f"# replay {mode}: the input ran out before the last kill; raise --n", flush=True)
    finally:
        try:
            cli(cluster, "kill", name, "--wait", "0")
        except RuntimeError as exc:
            print(f"# kill {name}: {exc}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3, help="kills per mode")
    parser.add_argument("--n", type=int, default=200_000, help="ids in the input (at ~2,000/s)")
    parser.add_argument("--modes", default="on,off", help="on (replay at the restart), off (at the timeout)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            parser.error(f"--modes: on and/or off, not {m!r}")
    with dev_cluster("gale-bench-replay-", conf={"task.heartbeat.frequency.secs": 1}) as (base, cluster):
        client = NimbusClient(cluster.client_conf())
        print("message timeout 30 s (Storm's default), max spout pending 200, 2 workers", flush=True)
        for mode in modes:
            rows = run_mode(cluster, client, base, mode, args.kills, args.n)
            print(f"replay_{mode}_kill_to_replacement_secs_p50: {statistics.median(r[0] for r in rows):.2f} s")
            acked = [r[1] for r in rows]
            print(f"replay_{mode}_kill_to_in_flight_acked_secs_p50: {statistics.median(acked):.2f} s")
            print(f"replay_{mode}_kill_to_in_flight_acked_secs_max: {max(acked):.2f} s", flush=True)

if __name__ == "__main__":
    main()
