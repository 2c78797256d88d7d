"""A tuple's whole cost when its consumer is pinned in another worker, against the same tuple whose
consumer is pinned in its own worker (the target: at most 1.3×; it was 2× before).

Run: ``.venv/bin/python -m benchmarks.bench_crossing [--tuples N] [--rounds R] [-c KEY=VALUE ...]
[--instructions]``

One topology, ``src`` (a spout: one-word tuples with message ids) → ``sink`` (a bolt that acks each
one), acking on, run by real worker runtimes with their real transfers (ZeroMQ over loopback,
sealed batches), each worker a process of its own as in a cluster. The spout and the acker are
pinned in worker A (this process); the sink is pinned in worker A (*local*: no other worker) or in
worker B, a child process (*crossing*: every tuple crosses to B, its ack crosses back to A's
acker). A run counts the CPU of both processes (every thread) in its steady state: from the moment the
first ``--warmup`` share of the tuples (10%) has been acked until every tuple is acked, per tuple
acked in that span. The first fraction of a second of a crossing run costs up to twice what
follows (B connects and takes its first batches while the spout fills its pending limit), and
is a start-up cost, not a tuple's. Prints, best of ``--rounds`` alternating runs, microseconds of
CPU per tuple:

* ``crossing_{local,remote}_runN_tuple_cpu_us``: every run, and for a crossing run the share of
  it spent by each worker (``a``, ``b``); for every run, how much of each worker's was the kernel's
  (system time: ZeroMQ's TCP, the threads' sleeps and wakes) and how often its threads slept (and
  were woken) a thousand tuples;
* ``crossing_local_tuple_cpu_us`` and ``crossing_remote_tuple_cpu_us``: the two pinnings;
* ``crossing_vs_local``: their ratio (target: at most 1.3);
* ``crossing_host_pair_cost_by_round``: what the host charged for two busy processes right before
  each crossing run (:mod:`benchmarks.host_pair`; 1.0 is two full cores). The crossing run keeps
  both cores busy, the local one only one.

``-c`` sets topology configuration for both workers (``topology.transfer.flush.millis=5``: fuller
batches). Each crossing run also prints how many tuples A's batches carried and how many acks B's did.

``--instructions`` counts instead of timing: each pinning runs under callgrind (``valgrind``, every
process of the run: A, B and multiprocessing's helper) with ``--small`` and ``--large`` tuples, and
the difference of the totals over the difference of the tuples is a tuple's instructions
(``crossing_{local,remote}_instructions_per_tuple``, ``crossing_instructions_vs_local``): a figure a
noisy host does not move. It is user space only — the kernel's side of the system calls (ZeroMQ's
TCP over loopback, the threads' sleeps and wakes) is not in it — so it is a floor under the CPU ratio.
Both runs set a message timeout of an hour: under valgrind a run lasts minutes, and a timeout's
rotations of the acker's table (a number that depends on the run's length) moved the difference.

``--pin two`` puts each worker process on a core of its own (A on the first CPU it may use, B on
the second), ``--pin one`` both on the first: a diagnostic of whether the kernel's placement of
the threads matters. On the 2-vCPU machine of ``docs/benchmarks.md`` it did not: pinned crossing
runs varied as much as unpinned ones, with the host's price for two busy cores.

Until stop 29 both workers ran in this one process: their executor threads then took turns at one
interpreter lock, which no two workers of a cluster do, and that contention was counted as the
cost of crossing. ``benchmarks.bench_transfer`` splits the crossing path into its stages.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import shutil
import threading
import time

import psutil

from benchmarks.bench_instructions import callgrind_total
from benchmarks.host_pair import pair_cost
from gale import Bolt, Spout, TopologyBuilder
from gale.config import parse_overrides
from gale.topology.definition import ACKER_COMPONENT, TopologyTasks
from gale.worker.daemon import attach
from gale.worker.local import local_conf
from gale.worker.runtime.runtime import WorkerRuntime
from gale.worker.transfer import Transfer
from gale.zkserver import free_port

#: ``--instructions``: the message timeout of both runs (no rotation of the acker's table in either)
INSTRUCTIONS_TIMEOUT_SECS = 3600

WORDS = ["the", "cow", "jumped", "over", "moon", "an", "apple", "a", "day", "keeps", "doctor", "away"]
SECRET = b"crossing-benchmark-secret-0123456"

#: the spout's progress, read by the benchmark (the spout runs in this process)
_go = threading.Event()
_acked = [0]


class Source(Spout):
    output_fields = ["word"]

    def __init__(self, n: int):
        self.n = n

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0

    def next_tuple(self):
        if self.i < self.n and _go.is_set():
            self.collector.emit([WORDS[self.i % len(WORDS)]], msg_id=self.i)
            self.i += 1

    def ack(self, msg_id):
        _acked[0] += 1

    def fail(self, msg_id):
        raise RuntimeError(f"tuple {msg_id} failed")


class Sink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


class _Worker:
    """A worker runtime and its transfer, wired as ``gale.worker.daemon.Worker`` wires them."""

    def __init__(self, topo, conf, layout, executors, port: int | None = None):
        self.port = port or free_port()
        self.runtime: WorkerRuntime | None = None
        self.transfer = Transfer(
            bind_host="127.0.0.1", port=self.port, secret=SECRET,
            deliver=lambda task, payload: self.runtime.deliver(task, payload),
            deliver_many=lambda task, payloads: self.runtime.deliver_many(task, payloads),
            fields_for=lambda c, s: self.runtime._stream_fields.get((c, s)),
            batch_size=int(conf["topology.transfer.batch.size"]),
            flush_secs=float(conf["topology.transfer.flush.millis"]) / 1000.0)
        self.runtime = WorkerRuntime(topo, topology_id="crossing", conf=conf, layout=layout, executors=executors,
                                     remote=self.transfer, io=self.transfer)
        self.tasks = [t for start, end in executors for t in range(start, end + 1)]

    def start(self) -> None:
        self.transfer.start()
        self.runtime.start(active=True)

    def stop(self) -> None:
        self.runtime.stop()
        self.transfer.close(0.5)


def _topology(n: int, extra: dict | None = None):
    builder = TopologyBuilder()
    builder.set_spout("src", Source, 1, args=(n,))
    builder.set_bolt("sink", Sink, 1).shuffle_grouping("src")
    topo = builder.create_topology()
    conf = local_conf(topo, {"topology.workers": 2, "topology.acker.executors": 1,
                             "topology.max.spout.pending": 5000, "topology.worker.executor.threads": 1,
                             **(extra or {})})
    return topo, conf, TopologyTasks(topo.definition, conf, 2)


def _worker_b(n: int, port: int, a_port: int, a_tasks: list[int], extra: dict, pipe) -> None:
    """Worker B in a process of its own: the sink, until the parent says stop; then its transfer's
    sent messages go back through ``pipe``."""
    topo, conf, layout = _topology(n, extra)
    b = _Worker(topo, conf, layout, layout.component_executors["sink"], port=port)
    b.transfer.set_routes({t: f"127.0.0.1:{a_port}" for t in a_tasks})
    attach(b.transfer, b.runtime)
    b.start()
    pipe.send("ready")
    pipe.recv()  # stop
    b.stop()
    pipe.send((b.transfer.stats["sent_messages"], b.transfer.stats["sent_batches"]))


def _pin(pid: int, cpu: int) -> None:
    """Every thread of the process ``pid`` (and those it starts later) on ``cpu``."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})


def _process_cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _sleeps(pid: int) -> int:
    """How often the threads of the process ``pid`` have waited so far (their voluntary context
    switches: each is a sleep the thread is woken from)."""
    n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                n += next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            pass  # a thread that ended meanwhile
    return n


def _kernel_and_sleeps(pids: dict[str, int]) -> dict[str, float]:
    """Each process's kernel CPU seconds and sleeps so far (``{name}_sys``, ``{name}_sleeps``)."""
    out = {}
    for name, pid in pids.items():
        out[f"{name}_sys"] = psutil.Process(pid).cpu_times().system
        out[f"{name}_sleeps"] = _sleeps(pid)
    return out


def run(n: int, remote: bool, warmup: float = 0.1, pin: str | None = None, extra: dict | None = None
        ) -> tuple[float, dict[str, float], dict[str, int]]:
    """Microseconds of CPU of the workers' processes a tuple, emitted, executed and acked, after the
    first ``warmup`` share of ``n`` tuples; each worker's part of it (``a``, ``b``), of which in the
    kernel (``a_sys``, ``b_sys``: whole clock ticks), and its threads' sleeps a thousand tuples
    (``a_sleeps``, ``b_sleeps``: voluntary context switches, each a wake); and the messages each
    worker's transfer sent over the whole run (``a``, ``b``) and in how many batches (``a_batches``,
    ``b_batches``). ``extra``: topology configuration over the benchmark's own (both workers)."""
    extra = extra or {}
    topo, conf, layout = _topology(n, extra)
    of = layout.component_executors
    a = _Worker(topo, conf, layout, of["src"] + of[ACKER_COMPONENT] + ([] if remote else of["sink"]))
    child = pipe = None
    if remote:
        b_port = free_port()
        b_tasks = [t for start, end in of["sink"] for t in range(start, end + 1)]
        a.transfer.set_routes({t: f"127.0.0.1:{b_port}" for t in b_tasks})
        pipe, theirs = multiprocessing.Pipe()
        child = multiprocessing.get_context("spawn").Process(
            target=_worker_b, args=(n, b_port, a.port, a.tasks, extra, theirs), daemon=True)
        child.start()
        if not pipe.poll(120) or pipe.recv() != "ready":
            raise RuntimeError("worker B did not start")
    attach(a.transfer, a.runtime)
    _go.clear()
    _acked[0] = 0
    a.start()
    sent = {"a": 0, "b": 0, "a_batches": 0, "b_batches": 0}
    if pin:
        cpus = sorted(os.sched_getaffinity(0))
        _pin(os.getpid(), cpus[0])
        if child is not None:
            _pin(child.pid, cpus[0] if pin == "one" else cpus[1 % len(cpus)])
    try:
        gc.collect()
        # counted from the first emit, until the warm-up share is seen acked (a run too short to
        # see it is counted whole)
        pids = {"a": os.getpid(), **({"b": child.pid} if child else {})}
        start = (0, time.process_time(), _process_cpu(child.pid) if child else 0.0)
        other = _kernel_and_sleeps(pids)
        warm = warmup <= 0
        _go.set()
        deadline = time.monotonic() + 600
        while _acked[0] < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {_acked[0]} of {n} tuples acked in 600 s")
            if not warm and _acked[0] >= warmup * n:
                warm = True  # the steady state begins: CPU and tuples counted from here
                start = (_acked[0], time.process_time(), _process_cpu(child.pid) if child else 0.0)
                other = _kernel_and_sleeps(pids)
            time.sleep(0.005)  # the benchmark's own polling (its CPU is counted, and small)
        done, cpu_a, cpu_b = n - start[0], time.process_time() - start[1], \
            (_process_cpu(child.pid) - start[2]) if child else 0.0
        other = {k: v - other[k] for k, v in _kernel_and_sleeps(pids).items()}
        sent["a"], sent["a_batches"] = a.transfer.stats["sent_messages"], a.transfer.stats["sent_batches"]
    finally:
        a.stop()
        if child is not None:
            pipe.send("stop")
            if pipe.poll(60):
                sent["b"], sent["b_batches"] = pipe.recv()
            child.join(30)
            if child.is_alive():
                child.kill()
    parts = {"a": cpu_a / done * 1e6, "b": cpu_b / done * 1e6}
    for name in pids:
        parts[f"{name}_sys"] = other[f"{name}_sys"] / done * 1e6
        parts[f"{name}_sleeps"] = other[f"{name}_sleeps"] / done * 1000
    return (cpu_a + cpu_b) / done * 1e6, parts, sent


def count_instructions(small: int, large: int, conf: list[str]) -> None:
    """Print a tuple's instructions in each pinning (both workers, user space) and their ratio."""
    if shutil.which("valgrind") is None:
        raise SystemExit("bench_crossing: valgrind is not installed (apt-get install -y valgrind)")
    # under valgrind a run lasts minutes: a 30 s message timeout would rotate the acker's table a
    # different number of times in the two runs (moving young trees to the compact table), which
    # moved the difference by up to 2,000 instructions a tuple; no tuple times out here either way
    extra = [x for kv in [f"topology.message.timeout.secs={INSTRUCTIONS_TIMEOUT_SECS}", *conf] for x in ("-c", kv)]
    per = {}
    for kind in ("local", "remote"):
        totals = [callgrind_total("-m", "benchmarks.bench_crossing", "--once", str(n), kind, *extra, children=True)
                  for n in (small, large)]
        per[kind] = (totals[1] - totals[0]) / (large - small)
        print(f"crossing_{kind}_instructions_per_tuple: {per[kind]:,.0f} instructions", flush=True)
    print(f"crossing_instructions_vs_local: {per['remote'] / per['local']:.2f} x (user space only)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=0.1,
                        help="share of the tuples acked before CPU is counted (default 0.1)")
    parser.add_argument("--pin", choices=("two", "one"),
                        help="each worker process on a core of its own (two), or both on one core (one)")
    parser.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                        help="topology configuration for both workers, e.g. topology.transfer.flush.millis=5")
    parser.add_argument("--instructions", action="store_true",
                        help="count a tuple's instructions under callgrind instead of timing its CPU")
    parser.add_argument("--small", type=int, default=20_000, help="--instructions: the shorter run's tuples")
    parser.add_argument("--large", type=int, default=120_000, help="--instructions: the longer run's tuples")
    parser.add_argument("--once", nargs=2, metavar=("N", "KIND"), help=argparse.SUPPRESS)  # KIND: local, remote
    args = parser.parse_args()
    extra = parse_overrides(args.conf)
    if args.once:
        _, _, sent = run(int(args.once[0]), args.once[1] == "remote", 0.0, None, extra)
        if sent["a_batches"]:
            print(f"batches of {sent['a'] / sent['a_batches']:.0f} tuples from a, "
                  f"{sent['b'] / max(sent['b_batches'], 1):.0f} acks from b")
        return
    if args.instructions:
        count_instructions(args.small, args.large, args.conf)
        return
    if not 0 <= args.warmup < 1:
        parser.error("--warmup is a share of the tuples: at least 0, under 1")
    best = {"local": float("inf"), "remote": float("inf")}
    host = []
    for r in range(args.rounds):
        for kind in ("local", "remote"):
            if kind == "remote":
                host.append(pair_cost(2))
            per, parts, sent = run(args.tuples, kind == "remote", args.warmup, args.pin, extra)
            kernel = (f"in the kernel a {parts['a_sys']:.2f}" + (f", b {parts['b_sys']:.2f}" if kind == "remote" else "")
                      + f"; sleeps a thousand tuples a {parts['a_sleeps']:.1f}"
                      + (f", b {parts['b_sleeps']:.1f}" if kind == "remote" else ""))
            split = (f" (a {parts['a']:.2f}, b {parts['b']:.2f}; {kernel}; batches of "
                     f"{sent['a'] / max(sent['a_batches'], 1):.0f} tuples from a, "
                     f"{sent['b'] / max(sent['b_batches'], 1):.0f} acks from b)") if kind == "remote" else f" ({kernel})"
            print(f"crossing_{kind}_run{r + 1}_tuple_cpu_us: {per:.2f} us{split}")
            best[kind] = min(best[kind], per)
    print(f"crossing_local_tuple_cpu_us: {best['local']:.2f} us")
    print(f"crossing_remote_tuple_cpu_us: {best['remote']:.2f} us")
    print(f"crossing_vs_local: {best['remote'] / best['local']:.2f} x (target <= 1.3)")
    print(f"crossing_host_pair_cost_by_round: {' '.join(f'{h:.2f}' for h in host)}")


if __name__ == "__main__":
    main()
