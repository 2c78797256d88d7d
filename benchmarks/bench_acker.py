"""The acker table alone: nanoseconds a message while trees wait for their acks (issue 15).

Run: ``.venv/bin/python -m benchmarks.bench_acker [--in-flight N ...] [--messages M] [--repeat R]``

A stream shaped like a crossing run: batches of 500 new trees' INITs, and with each batch the ACKs
that complete the trees begun ``N`` trees earlier, so about ``N`` trees are pending throughout (the
young dict, as between workers: the spout's INIT now, the far bolt's ack a few milliseconds later).
One process, no threads: CPU seconds over messages applied, the best of ``--repeat`` passes.

Prints ``acker_ns_per_message[in_flight=N]: <ns> ns`` per ``N`` and which build ran
(``hot_path``: compiled or python; ``GALE_PURE_PYTHON=1`` runs the source).
"""

from __future__ import annotations

import argparse
import random
import time

from gale.compiled import hot_path
from gale.worker.runtime.acker import ACK, INIT, AckerTable

BATCH = 500


def stream(in_flight: int, messages: int, seed: int = 7) -> list[list[tuple]]:
    """Batches of INITs for new trees and ACKs completing the trees ``in_flight`` earlier."""
    rng = random.Random(seed)
    trees = messages // 2
    roots = [rng.getrandbits(64) | 2 for _ in range(trees)]
    vals = [rng.getrandbits(64) | 1 for _ in range(trees)]
    batches = []
    for i in range(0, trees, BATCH):
        batch = [(INIT, roots[j], vals[j], 1) for j in range(i, min(i + BATCH, trees))]
        k = i - in_flight
        batch += [(ACK, roots[j], vals[j], 0) for j in range(max(k, 0), min(k + BATCH, trees))]
        batches.append(batch)
    return batches


def run(in_flight: int, messages: int = 400_000, repeat: int = 5) -> tuple[float, int, int]:
    """(ns a message, the best of ``repeat`` passes; trees completed; trees left pending)."""
    batches = stream(in_flight, messages)
    n = sum(len(b) for b in batches)
    best = float("inf")
    completed = left = 0
    for _ in range(repeat):
        table = AckerTable()
        t0 = time.process_time()
        completed = sum(len(table.apply(b)) for b in batches)
        best = min(best, time.process_time() - t0)
        left = len(table)
    return best / n * 1e9, completed, left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, nargs="+", default=[200, 5000])
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"acker_hot_path: {hot_path()}")
    for in_flight in args.in_flight:
        ns, _, left = run(in_flight, args.messages, args.repeat)
        print(f"acker_ns_per_message[in_flight={in_flight}]: {ns:.1f} ns ({left} trees pending at the end)")


if __name__ == "__main__":
    main()
