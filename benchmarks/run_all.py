"""Run every benchmark (``make bench``): each prints ``name: value unit`` lines."""

from __future__ import annotations

import subprocess
import sys

BENCHMARKS = [
    "host_pair", "bench_local", "bench_acker", "bench_grouping", "bench_peers", "bench_latency", "bench_transfer", "bench_crossing", "bench_cluster", "bench_ha", "bench_http",
    "bench_kafka", "bench_spark", "bench_multilang", "bench_windows", "bench_recovery", "bench_replay", "bench_idle", "bench_worker_start",
    "bench_sinks", "bench_state", "bench_cluster --state --no-recovery",
]


def main() -> int:
    failed = []
    for name in BENCHMARKS:
        print(f"# benchmarks.{name}", flush=True)
        module, *args = name.split()
        rc = subprocess.call([sys.executable, "-m", f"benchmarks.{module}", *args])
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"# failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
