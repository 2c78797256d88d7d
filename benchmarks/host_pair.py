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
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time

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


def _run(copies: int) -> list[float]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=job, args=(out,), daemon=True) for _ in range(copies)]
    for p in procs:
        p.start()
    got = [out.get(timeout=120) for _ in procs]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    print(f"host_pair_cost: {pair_cost(args.trials):.2f} x")


if __name__ == "__main__":
    main()
