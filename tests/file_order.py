"""The order test files start in: the longest first, so the xdist workers finish together.

``make test`` runs files in pytest-xdist workers (``--dist loadfile``); a worker takes the next
file in collection order when it runs out of work. Started last, a long file is the tail the other
worker waits for; started first, the short ones fill the gaps around it (longest-processing-time
first). :data:`SECONDS` holds each long file's time in a full run on the two-core CI machine
(``--durations``; files not listed take under ~20 s). Refresh it when a file's time changes a lot;
a stale figure only costs balance, never correctness.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

#: seconds per file (setup + call + teardown of its tests) in a full compiled run, longest first
SECONDS: dict[str, float] = {
    "test_chaos.py": 214,
    "test_state_cluster.py": 205,
    "test_cluster.py": 112,
    "test_ui.py": 102,
    "test_spark_standalone.py": 102,
    "test_chaos_eo.py": 94,
    "test_chaos_pg.py": 92,
    "test_api_fuzz.py": 81,
    "test_combinations_cluster.py": 78,
    "test_spark_cluster.py": 59,
    "test_spark_process.py": 57,
    "test_windows_cluster.py": 56,
    "test_exactly_once_cluster.py": 54,
    "test_windows_state_cluster.py": 53,
    "test_bad_input.py": 51,
    "test_packaging.py": 50,
    "test_cluster_faults.py": 47,
    "test_zk_ensemble.py": 42,
    "test_spark.py": 39,
    "test_multilang_cluster.py": 34,
    "test_nimbus_ha.py": 34,
    "test_spark_commit.py": 33,
    "test_bytewax_cluster.py": 31,
    "test_spark_connect.py": 30,
    "test_logs_cluster.py": 28,
    "test_combinations_spark.py": 27,
    "test_spark_batches.py": 26,
    "test_storm_api.py": 26,
    "test_security.py": 25,
    "test_windowed_examples.py": 21,
    "test_rabbitmq_spout.py": 20,
}


def longest_first(items: Sequence[T], file_of) -> list[T]:
    """``items`` with each file's items kept together and in their order, the files by
    :data:`SECONDS` (longest first), then the unlisted files by their number of items (most first,
    as xdist orders them by default), then by their first position."""
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for n, item in enumerate(items):
        f = file_of(item)
        first.setdefault(f, n)
        count[f] = count.get(f, 0) + 1

    def key(f: str) -> tuple[float, int, int]:
        return (-SECONDS.get(f.rsplit("/", 1)[-1], 0.0), -count[f], first[f])

    rank = {f: r for r, f in enumerate(sorted(first, key=key))}
    return sorted(items, key=lambda item: rank[file_of(item)])
