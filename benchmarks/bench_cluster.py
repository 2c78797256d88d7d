"""Cluster benchmark: word count on 1 and 2 workers, and recovery times after faults.

Run: ``.venv/bin/python -m benchmarks.bench_cluster [--seconds S] [--rounds R] [--workers 1,2]
[--spouts N] [-c key=value ...] [--no-recovery] [--per-second] [--state]`` (``--spouts``: the word count's spout
tasks, default 1; ``-c``: topology configuration for the word count runs, e.g.
``topology.disable.loadaware.messaging=true``; ``--per-second``: a line for each second of each
window, :func:`print_seconds`; ``--state``: instead, ``bench_state``'s word count on 2 workers stateless
against exactly-once state in Redis, :func:`compare_state`, the order swapped every round, with the
host's pair cost before each window (``cluster_state_host_pair_cost_by_window``), the rates' and the
CPU's ratios; use 6 rounds or more, a 2-worker window's rate is that noisy here)

Starts its own ZooKeeper, a nimbus and 2 supervisors (processes, as in production) with Storm's
default timeouts except where printed. The word count (``examples/word_count.py`` as shipped: acking
on, ``topology.max.spout.pending`` 2,000; ``-c`` overrides) runs on each worker count in turn, ``--rounds`` times (default 3), each a fresh submission
measured over a ``--seconds`` window (default 15) after a warm-up; counts come from the workers'
own ``/metrics``, CPU from ``/proc``. Alternating puts both worker counts under the same drift of
the machine's speed. Prints ``name: value unit`` lines:

* a line per window, then the means: ``cluster_wordcount_spout_tuples_per_sec`` /
  ``cluster_wordcount_tuples_per_sec`` — sentences acked and bolt tuples executed per second with
  ``topology.workers`` = 2 (one worker per supervisor, 2 cores in all); the same with one worker
  (``…[workers=1]``);
* ``cluster_wordcount_cpu_us_per_tuple`` (and ``…[workers=1]``) — CPU of the topology's worker
  processes (every thread) per bolt-executed tuple: what crossing between workers costs, a figure
  that moves less than the rates when other work shares the machine;
* ``cluster_two_workers_vs_one_by_round`` and ``cluster_two_workers_vs_one``: the 2-worker rate
  over the 1-worker rate, per round and of the means (the target: at least 1.7 on two cores);
* ``cluster_host_pair_cost_by_round``: before and after each 2-worker window, what the host
  charged for two busy processes (:mod:`benchmarks.host_pair`: a fixed Python job's CPU beside a
  copy of itself over alone; 1.0 is two full cores) — a 2-worker window taken at 1.4× is not
  comparable with one at 1.0×;
* ``worker_kill_to_processing_secs`` — ``kill -9`` of the worker running a spout task, until that
  spout task acks again (the supervisor sees the process exit and relaunches at once);
* ``supervisor_loss_to_running_elsewhere_secs`` — ``kill -9`` of a supervisor and its workers,
  until every executor runs on the other supervisor; printed with its bound
  ``storm.zookeeper.session.timeout + nimbus.monitor.freq.secs``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.host_pair import pair_cost
from gale.zkserver import ZooKeeperServer
from gale.nimbus.client import NimbusClient
from gale.nimbus.devcluster import DevCluster

ROOT = Path(__file__).resolve().parent.parent
WORD_COUNT = ROOT / "examples" / "word_count.py"
DURABLE_WC = ROOT / "tests" / "cluster_topologies" / "durable_wc.py"
STATE_TOPOLOGY = ROOT / "benchmarks" / "state_topology.py"
SESSION_MS = 20000
MONITOR_SECS = 10
#: after submitting, before a window opens: workers connect and the load-aware shuffle settles
WARMUP_SECS = 8
#: the word count's bolts and the acker, whose executions a window counts per worker
BOLTS = ("split", "count", "__acker")


def cli(cluster: DevCluster, *args: str) -> str:
    env = dict(os.environ, GALE_CONFIG=str(cluster.client_config_path()))
    proc = subprocess.run([sys.executable, "-m", "gale.nimbus.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"nimbus {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


@contextmanager
def dev_cluster(prefix: str, *, supervisors: int = 2, slots: int = 1, conf: dict | None = None
                ) -> Iterator[tuple[Path, DevCluster]]:
    """A ZooKeeper and a started dev cluster in a new temporary directory (``prefix``): yields
    (that directory, the cluster); both are stopped afterwards, whatever happened."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    zk = ZooKeeperServer(data_dir=base / "zk").start()
    cluster = DevCluster(base / "cluster", supervisors=supervisors, slots=slots, zookeeper=zk, conf=conf or {})
    try:
        cluster.start()
        yield base, cluster
    finally:
        cluster.cleanup()
        zk.cleanup()


def wait(pred, timeout: float, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise TimeoutError("condition not met")


def workers_of(client: NimbusClient, name: str) -> list[dict]:
    """The topology's workers (host, port, pid) from nimbus's executor list, once all have one."""
    d = client.topology(name)
    found = {(e["worker"]["host"], e["worker"]["port"]): e["worker"] for c in d["components"].values()
             for e in c["executor_list"] if e.get("worker") and e["worker"].get("pid")}
    return list(found.values())


def totals(workers: list[dict], offset: int) -> tuple[int, int, list[dict[str, int]]]:
    """Sentences acked and bolt tuples executed so far, read from every worker's /metrics (exact at
    the moment of reading; nimbus's figures move once a heartbeat), and each worker's executed
    tuples by component (``sentences``: the spout tuples it acked)."""
    acked = executed = 0
    per_worker: list[dict[str, int]] = []
    for w in workers:
        host = "127.0.0.1" if w["host"] in ("localhost", "") else w["host"]
        with urllib.request.urlopen(f"http://{host}:{w['port'] + offset}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        mine = {"sentences": 0, **{c: 0 for c in BOLTS}}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.name.endswith("_total"):
                    continue
                component = sample.labels.get("component")
                if family.name == "gale_worker_tuples_acked" and component == "sentences":
                    acked += int(sample.value)
                    mine["sentences"] += int(sample.value)
                elif family.name == "gale_worker_tuples_executed" and component in BOLTS:
                    mine[component] += int(sample.value)
                    if component in ("split", "count"):
                        executed += int(sample.value)
        per_worker.append(mine)
    return acked, executed, per_worker


def shares(before: list[dict[str, int]], after: list[dict[str, int]]) -> str:
    """Where the work ran over a window: the spout's worker's share of each bolt's executions."""
    done = [{k: a[k] - b[k] for k in a} for b, a in zip(before, after)]
    spout = max(done, key=lambda d: d["sentences"])
    parts = []
    for component in BOLTS:
        total = sum(d[component] for d in done)
        if total:
            parts.append(f"{component} {100 * spout[component] / total:.0f}%")
    return ", ".join(parts)


def cpu_secs(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used (all their threads)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def steal_secs() -> float:
    """CPU seconds the hypervisor has taken from this machine's vCPUs (``/proc/stat``'s steal)."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")


def print_seconds(procs: list[dict], pids: list[int], offset: int, seconds: float) -> None:
    """Sleep out a window, printing each second the sentences acked, the steal, and each worker's
    CPU share and CPU per tuple it executed (split and count, the spout's worker's spout and acker
    work included): which second was dear, and whether one worker or both paid for it. It reads
    every worker's ``/metrics`` each second, which costs the workers a little CPU of their own."""
    def sample():
        _, _, mine = totals(procs, offset)
        return ([m["split"] + m["count"] for m in mine], [m["sentences"] for m in mine],
                [cpu_secs([pid]) for pid in pids], steal_secs(), time.monotonic())

    before = sample()
    end = before[-1] + seconds
    costs: list[float] = []
    while time.monotonic() < end - 0.5:
        time.sleep(min(1.0, end - time.monotonic()))
        after = sample()
        (ex0, ac0, c0, s0, t0), (ex1, ac1, c1, s1, t1) = before, after
        dt = t1 - t0
        cells = []
        for i in range(len(pids)):
            done = ex1[i] - ex0[i]
            who = "spout's worker" if ac1[i] > ac0[i] else "worker"
            cells.append(f"{who} cpu {(c1[i] - c0[i]) / dt:.2f} {1e6 * (c1[i] - c0[i]) / max(done, 1):.2f} us")
        cost = 1e6 * (sum(c1) - sum(c0)) / max(sum(ex1) - sum(ex0), 1)
        costs.append(cost)
        print(f"    {(sum(ac1) - sum(ac0)) / dt:7.0f} sentences/s, {cost:.2f} us a tuple, steal "
              f"{(s1 - s0) / dt:.2f} | " + " | ".join(cells), flush=True)
        before = after
    if costs:
        print(f"    (a second's CPU a tuple: {min(costs):.2f} to {max(costs):.2f} us, median "
              f"{statistics.median(costs):.2f})", flush=True)


def throughput(cluster: DevCluster, seconds: float, workers: int, extra: list[str],
               per_second: bool = False, path: Path = WORD_COUNT, name: str = "",
               bundle_dir: Path | None = None) -> tuple[float, float, float]:
    """Submit the word count (or the topology file ``path``) on ``workers`` workers, measure, kill
    it: sentences/s, bolt-executed tuples/s and CPU seconds of its workers per executed tuple
    (``per_second``: print each second of the window too, :func:`print_seconds`)."""
    client = NimbusClient(cluster.client_conf())
    name = name or f"wcbench{workers}"
    cli(cluster, "submit", str(path), "--name", name, "--wait", "-c", f"topology.workers={workers}",
        *[a for kv in extra for a in ("-c", kv)], *(("--bundle-dir", str(bundle_dir)) if bundle_dir else ()))
    procs = wait(lambda: (lambda ws: ws if len(ws) == workers else None)(workers_of(client, name)), 120, 0.2)
    offset = int(cluster.base_conf().get("worker.metrics.port.offset", 1000))
    time.sleep(WARMUP_SECS)  # the workers connect, the load-aware shuffle settles
    pids = [w["pid"] for w in procs]
    a0, e0, w0 = totals(procs, offset)
    c0, t0 = cpu_secs(pids), time.monotonic()
    if per_second:
        print_seconds(procs, pids, offset, seconds)
    else:
        time.sleep(seconds)
    a1, e1, w1 = totals(procs, offset)
    c1, dt = cpu_secs(pids), time.monotonic() - t0
    cli(cluster, "kill", name, "--wait", "0")
    # its slots are free for the next run once nimbus has dropped it, and the next window must not
    # share the cores with its workers shutting down
    t_kill = time.monotonic()
    wait(lambda: all(t["name"] != name for t in client.topologies()), 120, 0.2)
    wait(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids), 120, 0.1)
    if workers > 1:
        print(f"  ({name}: the spout's worker ran {shares(w0, w1)} of the executions)", flush=True)
    print(f"  ({name}: its workers exited {time.monotonic() - t_kill:.1f} s after the kill)", flush=True)
    return (a1 - a0) / dt, (e1 - e0) / dt, (c1 - c0) / max(e1 - e0, 1)


def in_turn(items, round_index: int) -> list:
    """``items`` in order in even rounds and reversed in odd ones: a drift of the machine's speed
    within a round falls on each item alike over two rounds."""
    return list(items) if round_index % 2 == 0 else list(items)[::-1]


def compare(cluster: DevCluster, seconds: float, counts: list[int], rounds: int, extra: list[str],
            per_second: bool = False) -> None:
    """Measure the word count on each worker count in turn, ``rounds`` times, the order reversed
    every other round, and print each window and the means (the machine's speed drifts: alternating,
    and swapping which goes first, puts both counts under it alike)."""
    runs: dict[int, list[tuple[float, float, float]]] = {w: [] for w in counts}
    host: list[str] = []
    for r in range(rounds):
        for w in in_turn(counts, r):
            before = pair_cost(2) if w > 1 else None
            sentences, executed, cpu = throughput(cluster, seconds, w, extra, per_second)
            runs[w].append((sentences, executed, cpu))
            cost = ""
            if before is not None:
                after = pair_cost(2)
                host.append(f"{before:.2f}/{after:.2f}")
                cost = f" (host: a busy pair cost {before:.2f}x before, {after:.2f}x after)"
            print(f"round {r + 1}, {w} worker{'s' if w > 1 else ''}: {sentences:.0f} sentences/s, {executed:.0f} "
                  f"bolt-executed tuples/s, {cpu * 1e6:.2f} us CPU a tuple{cost}", flush=True)
    for w, got in runs.items():
        # the figures without a suffix are the 2-worker run's (their names predate --workers)
        suffix = "" if w == 2 else f"[workers={w}]"
        print(f"cluster_wordcount_spout_tuples_per_sec{suffix}: {statistics.mean(g[0] for g in got):.0f} tuples/s")
        print(f"cluster_wordcount_tuples_per_sec{suffix}: {statistics.mean(g[1] for g in got):.0f} tuples/s")
        print(f"cluster_wordcount_cpu_us_per_tuple{suffix}: {statistics.mean(g[2] for g in got) * 1e6:.2f} us")
    if 1 in runs and 2 in runs:
        # two workers on two cores against one worker alone
        pairs = [two[1] / one[1] for one, two in zip(runs[1], runs[2])]
        print(f"cluster_two_workers_vs_one_by_round: {' '.join(f'{p:.2f}' for p in pairs)}")
        ratio = statistics.mean(g[1] for g in runs[2]) / statistics.mean(g[1] for g in runs[1])
        print(f"cluster_two_workers_vs_one: {ratio:.2f} x (target >= 1.7)", flush=True)
    if host:
        print(f"cluster_host_pair_cost_by_round: {' '.join(host)} (before/after each 2-worker window)", flush=True)


def compare_state(cluster: DevCluster, seconds: float, workers: int, rounds: int, extra: list[str],
                  redis_url: str) -> None:
    """``bench_state``'s word count (:mod:`benchmarks.state_topology`) on ``workers`` workers,
    stateless and with exactly-once state in Redis (1 s checkpoints), ``rounds`` times, the order
    swapped every round (stateless first, then exactly-once first: a drift of the machine's speed
    within a round falls on both alike): the cost of exactly-once state on a cluster, as
    ``bench_state`` measures it in one process. A 2-worker window's rate moves by a quarter from one
    submission to the next here whatever the topology (docs/benchmarks.md), so the ratio of the
    means over several rounds is the figure; the per-round ratios show the spread."""
    stateful = ["bench.stateful=true", "topology.state.provider=redis", f"topology.state.redis.url={redis_url}",
                "topology.state.guarantee=exactly-once", "topology.state.checkpoint.interval.ms=1000"]
    variants = (("stateless", []), ("exactly_once_redis", stateful))
    rates: dict[str, list[float]] = {variant: [] for variant, _ in variants}
    costs: dict[str, list[float]] = {variant: [] for variant, _ in variants}
    host: list[str] = []
    for r in range(rounds):
        for variant, conf in in_turn(variants, r):
            host.append(f"{variant[:2]} {pair_cost(2):.2f}")
            sentences, _, cpu = throughput(cluster, seconds, workers, [*extra, *conf], path=STATE_TOPOLOGY,
                                           name=f"state{r}{variant.replace('_', '')}", bundle_dir=ROOT / "examples")
            rates[variant].append(sentences)
            costs[variant].append(cpu)
            print(f"round {r + 1}, {variant}, {workers} workers: {sentences:.0f} sentences/s, "
                  f"{cpu * 1e6:.2f} us CPU a bolt tuple", flush=True)
    for variant, got in rates.items():
        print(f"cluster_state_{variant}_spout_tuples_per_sec: {statistics.mean(got):.0f} tuples/s "
              f"(windows {min(got):.0f} to {max(got):.0f})")
        print(f"cluster_state_{variant}_cpu_us_per_bolt_tuple: {statistics.mean(costs[variant]) * 1e6:.2f} us")
    by_round = [eo / plain for plain, eo in zip(rates["stateless"], rates["exactly_once_redis"])]
    print(f"cluster_state_exactly_once_redis_ratio_by_round: {' '.join(f'{x:.2f}' for x in by_round)}")
    print(f"cluster_state_host_pair_cost_by_window: {', '.join(host)} (before each window: st stateless, "
          "ex exactly-once)")
    print(f"cluster_state_exactly_once_redis_cpu_ratio: "
          f"{statistics.mean(costs['stateless']) / statistics.mean(costs['exactly_once_redis']):.2f} "
          "(stateless CPU a bolt tuple over exactly-once's)")
    print(f"cluster_state_exactly_once_redis_ratio: "
          f"{statistics.mean(rates['exactly_once_redis']) / statistics.mean(rates['stateless']):.2f}", flush=True)


def recovery(cluster: DevCluster, base: Path) -> None:
    inp = base / "input.tsv"
    state = base / "state"
    corpus = ["the cow jumped over the moon", "an apple a day keeps the doctor away"]
    inp.write_text("".join(f"{i}\t{corpus[i % 2]}\n" for i in range(300_000)))
    cli(cluster, "submit", str(DURABLE_WC), "--name", "recovery", "--wait", "-c", f"test.input={inp}",
        "-c", f"test.state.dir={state}")
    client = NimbusClient(cluster.client_conf())
    time.sleep(5)
    detail = client.topology("recovery")
    execs = detail["components"]["source"]["executor_list"]
    victim = execs[0]
    task_index = sorted(t for e in execs for t in e["tasks"]).index(victim["tasks"][0])
    log = state / f"acked-{task_index}.log"
    size = log.stat().st_size
    os.kill(victim["worker"]["pid"], signal.SIGKILL)
    killed = time.monotonic()
    time.sleep(0.5)  # in-flight acks of the dead worker are flushed by now
    size = log.stat().st_size
    wait(lambda: log.stat().st_size > size, 120, 0.02)
    print(f"worker_kill_to_processing_secs: {time.monotonic() - killed:.2f} s", flush=True)

    time.sleep(5)
    victim_sup = 0
    dead = cluster.supervisor_id(victim_sup)
    cluster.kill_supervisor(victim_sup, with_workers=True)
    lost = time.monotonic()

    def elsewhere():
        d = client.topology("recovery")
        nodes = {e["node"] for c in d["components"].values() for e in c["executor_list"]}
        return dead not in nodes and d["executors_running"] == d["executors"]

    wait(elsewhere, 180, 0.2)
    took = time.monotonic() - lost
    bound = SESSION_MS / 1000 + MONITOR_SECS
    print(f"supervisor_loss_to_running_elsewhere_secs: {took:.2f} s")
    print(f"supervisor_loss_bound_secs: {bound:.0f} s (storm.zookeeper.session.timeout {SESSION_MS} ms + "
          f"nimbus.monitor.freq.secs {MONITOR_SECS})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="each measurement window")
    parser.add_argument("--rounds", type=int, default=3, help="windows per worker count, alternating")
    parser.add_argument("--workers", default="1,2",
                        help="comma-separated worker counts to measure the word count at, in this order")
    parser.add_argument("--spouts", type=int, default=1, help="spout tasks of the word count (default 1)")
    parser.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                        help="topology configuration for the word count runs (repeatable)")
    parser.add_argument("--no-recovery", action="store_true", help="skip the fault recovery figures")
    parser.add_argument("--state", action="store_true",
                        help="instead of 1 against 2 workers: bench_state's word count on 2 workers, stateless "
                             "against exactly-once state in Redis (a Redis server started here)")
    parser.add_argument("--per-second", action="store_true",
                        help="print each second of each window: rates, steal, each worker's CPU a tuple")
    args = parser.parse_args()
    extra = [f"wordcount.spout.parallelism={args.spouts}", *args.conf]
    print(f"word count configuration: {' '.join(extra)}", flush=True)
    counts = [int(w) for w in args.workers.split(",") if w]
    if not counts or any(not 1 <= w <= 2 for w in counts):
        parser.error(f"--workers: counts of 1 or 2 (the cluster has 2 slots), not {args.workers!r}")
    base = Path(tempfile.mkdtemp(prefix="gale-bench-"))
    conf = {"storm.zookeeper.session.timeout": SESSION_MS, "nimbus.monitor.freq.secs": MONITOR_SECS,
            "task.heartbeat.frequency.secs": 1}
    zk = ZooKeeperServer(data_dir=base / "zk").start()
    cluster = DevCluster(base / "cluster", supervisors=2, slots=1, zookeeper=zk, conf=conf)
    try:
        cluster.start()
        if args.state:
            from gale.redisserver import RedisServer

            redis = RedisServer(data_dir=base / "redis").start()
            try:
                compare_state(cluster, args.seconds, max(counts), args.rounds, args.conf, redis.url)
            finally:
                redis.cleanup()
            return
        compare(cluster, args.seconds, counts, args.rounds, extra, args.per_second)
        if not args.no_recovery:
            recovery(cluster, base)
    finally:
        cluster.cleanup()
        zk.cleanup()


if __name__ == "__main__":
    main()
