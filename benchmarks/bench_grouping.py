"""The groupers alone: nanoseconds a ``choose`` (issue 15).

Run: ``.venv/bin/python -m benchmarks.bench_grouping [--calls N] [--repeat R]``

Every emit to a subscription with more than one target task asks its grouper which task gets the
tuple: a fields grouping once per word in the word count, a shuffle once per sentence. Each case
calls ``choose`` on 64 different value lists in a loop, ``--calls`` times in all; the loop alone is
timed the same way and taken off. One process, no threads: the best of ``--repeat`` passes.

Prints ``grouping_ns_per_choose[case]: <ns> ns`` per case and which build ran (``hot_path``:
compiled or python; ``GALE_PURE_PYTHON=1`` runs the source).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from gale.compiled import hot_path
from gale.topology.tuple import Fields
from gale.worker.runtime.grouping import FieldsGrouper, ShuffleGrouper

VALUES = 64
TASKS = [3, 4, 5, 6]


def cases() -> dict[str, tuple[Callable, list[list]]]:
    fields = Fields(["word", "n"], "split:default")
    words = [[f"word{i}", i] for i in range(VALUES)]
    return {
        # one worker, or workers sharing PYTHONHASHSEED (supervisors set it): str's cached hash
        "fields_one_str_builtin_hash": (FieldsGrouper(TASKS, fields, ["word"], True).choose, words),
        # workers without a shared hash seed: CRC-32 of the word's UTF-8
        "fields_one_str_stable_hash": (FieldsGrouper(TASKS, fields, ["word"], False).choose, words),
        "fields_two_builtin_hash": (FieldsGrouper(TASKS, fields, ["word", "n"], True).choose, words),
        "shuffle": (ShuffleGrouper(TASKS, random.Random(7)).choose, words),
    }


def per_call(choose: Callable, values: list[list], calls: int, repeat: int) -> float:
    """ns a call, the loop's own cost taken off (the best of ``repeat`` passes of each)."""
    rounds = max(1, calls // len(values))

    def timed(fn: Callable | None) -> float:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            if fn is None:
                for _ in range(rounds):
                    for v in values:
                        pass
            else:
                for _ in range(rounds):
                    for v in values:
                        fn(v)
            best = min(best, time.perf_counter() - t0)
        return best

    return (timed(choose) - timed(None)) / (rounds * len(values)) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"grouping_hot_path: {hot_path()}")
    for name, (choose, values) in cases().items():
        print(f"grouping_ns_per_choose[{name}]: {per_call(choose, values, args.calls, args.repeat):.1f} ns")


if __name__ == "__main__":
    main()
