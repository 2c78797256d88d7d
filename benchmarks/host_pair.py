"""The host's control for two-process benchmarks: what a fixed pure-Python job costs when a copy of
it runs on the other core at the same time, against the same job alone.

Run: ``.venv/bin/python -m benchmarks.host_pair [--trials N]``

On the 2-vCPU machines of ``docs/benchmarks.md`` that cost moves between runs: the same job took
1.0× to 1.5× the CPU seconds alone when a copy ran beside it (no steal time was counted). Anything
that keeps both cores busy — two workers, a crossing run — pays it too, so ``bench_cluster`` and
``bench_crossing`` print it next to their two-process windows: a window measured while the host
charged 1.4× for a busy pair is not comparable with one measured at 1.0×.

Prints ``host_pair_cost: <x> x`` (the busier of the pair's CPU seconds over the job alone's; the
median of ``--trials`` alternations, each a new pair of processes).

:func:`speed_dips` is the control for one busy core over time: a word count's loop run in 50 ms
windows, each window's speed against the median window's. A host whose speed dips to 0.6× for a
window leaves a thread paced at 90% of its maximum a backlog it takes ten times as long to drain —
``bench_latency`` prints it around its 90% runs. ``--dips SECS`` prints it here.

:func:`wordcount_pair` is the ceiling for ``bench_cluster``'s two workers against one: ``bench_peers``'
local-mode Gale word count (acking on) in two processes started together against one alone — what
two workers would do if nothing crossed between them and no daemon ran. ``--wordcount-pair
SENTENCES`` prints it (``host_wordcount_pair_scaling_by_trial``, one figure per ``--trials``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from dataclasses import dataclass

#: dict updates per job: about 0.3 s of CPU on the machines above
JOB_STEPS = 3_000_000


def job(out=None) -> float:
    """CPU seconds of a fixed loop of dict updates (the kind of work a worker's Python does)."""
    t0 = time.process_time()
    counts: dict[int, int] = {}
    for i in range(JOB_STEPS):
        k = i & 1023
        counts[k] = counts.get(k, 0) + i
    secs = time.process_time() - t0
    if out is not None:
        out.put(secs)
    return secs


def _run(copies: int, target=None, args: tuple = (), timeout: float = 120) -> list:
    """What ``copies`` new processes of ``target(*args, queue)`` (default: :func:`job`) put on the
    queue, started together."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target or job, args=(*args, out), daemon=True) for _ in range(copies)]
    for p in procs:
        p.start()
    got = [out.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(30)
    return got


def pair_cost(trials: int = 3) -> float:
    """The median, over ``trials``, of the busier of two concurrent copies' CPU seconds over one
    copy's alone (1.0: the host gives two busy processes each a full core)."""
    ratios = []
    for _ in range(trials):
        alone = _run(1)[0]
        ratios.append(max(_run(2)) / alone)
    return statistics.median(ratios)


@dataclass(frozen=True)
class SpeedDips:
    """Speeds of ``windows`` windows of a fixed Python loop, each over the median window's."""

    windows: int
    slowest: float
    p1: float
    below_90: int

    def line(self) -> str:
        return (f"{self.below_90} of {self.windows} 50 ms windows below 0.9x the median speed, the slowest "
                f"{self.slowest:.2f}x, 1st percentile {self.p1:.2f}x")


def speed_dips(seconds: float = 3.0, window: float = 0.05) -> SpeedDips:
    """Count words for ``seconds`` in a new process (nothing of the caller's — its threads, its
    heap — in the way) and compare the speed of each ``window``."""
    return _run(1, _dips, (seconds, window), timeout=seconds + 120)[0]


#: the words the speed check counts: as many as bench_latency's paced runs cycle through, so its
#: loop touches as much memory as a word count's (a loop over a few hundred keys stays in the L1/L2
#: caches and does not see a neighbour's cache traffic that a word count feels)
DIPS_VOCABULARY = 100_008


def _dips(seconds: float, window: float, out) -> None:
    words = [f"w{i}" for i in range(DIPS_VOCABULARY)]
    counts = dict.fromkeys(words, 0)  # every key in: no window pays for the table's growth
    speeds: list[float] = []
    end = time.perf_counter() + seconds
    start, done, i = time.perf_counter(), 0, 0
    while True:
        for _ in range(200):
            w = words[i]
            counts[w] = counts.get(w, 0) + 1
            i = i + 1 if i + 1 < DIPS_VOCABULARY else 0
        done += 200
        now = time.perf_counter()
        if now - start >= window:
            speeds.append(done / (now - start))
            start, done = now, 0
            if now >= end:
                break
    median = statistics.median(speeds)
    rel = sorted(s / median for s in speeds)
    out.put(SpeedDips(len(rel), rel[0], rel[len(rel) // 100], sum(r < 0.9 for r in rel)))


def _wordcount(n: int, out) -> None:
    from benchmarks.bench_peers import run_gale, sentences
    from gale.log import configure

    configure(fmt="console", level="WARNING")
    data = sentences(n)
    out.put(run_gale(data, acking=True)[0])


def wordcount_pair(sentences: int, trials: int = 3) -> list[float]:
    """For each trial: two concurrent word counts' sentences a second over one alone's (2.0: the host
    gives two busy Gale processes each a full core)."""
    ratios = []
    for _ in range(trials):
        alone = sentences / _run(1, _wordcount, (sentences,), timeout=600)[0]
        pair = 2 * sentences / max(_run(2, _wordcount, (sentences,), timeout=600))
        ratios.append(pair / alone)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--dips", type=float, default=0.0, metavar="SECS",
                        help="instead: one core's speed in 50 ms windows for SECS seconds")
    parser.add_argument("--wordcount-pair", type=int, default=0, metavar="SENTENCES",
                        help="instead: two local word counts of SENTENCES each at once against one alone")
    args = parser.parse_args()
    if args.wordcount_pair:
        ratios = wordcount_pair(args.wordcount_pair, args.trials)
        print(f"host_wordcount_pair_scaling_by_trial: {' '.join(f'{x:.2f}' for x in ratios)} (2.0: two full cores)")
        return
    if args.dips:
        print(f"host_speed_dips: {speed_dips(args.dips).line()}")
        return
    print(f"host_pair_cost: {pair_cost(args.trials):.2f} x")


if __name__ == "__main__":
    main()
