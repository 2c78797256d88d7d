"""Run the chaos suite from the command line (as root, from the repository root)::

    .venv/bin/python -m tests.chaos --bounded --report docs/reliability.md
    .venv/bin/python -m tests.chaos --duration 600 --seed 1 --report docs/reliability.md
    .venv/bin/python -m tests.chaos --bounded --zookeepers 3 --report docs/reliability.md
    .venv/bin/python -m tests.chaos --workload kafka-eo --bounded --report docs/reliability.md

Exit status 0 when nothing was lost (nor, with ``kafka-eo``, over-counted), the run converged and every fault demonstrably took effect;
1 otherwise. ``--json`` writes the full record (every fault's times and evidence).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from tests.chaos.report import append_markdown, write_json
from tests.chaos.eo_workload import KafkaEOWorkload
from tests.chaos.pg_workload import PostgresEOWorkload
from tests.chaos.run import run_chaos
from tests.chaos.workload import RabbitWorkload


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bounded", action="store_true", help="every fault kind once (the CI run) instead of a soak")
    parser.add_argument("--duration", type=float, default=600.0, help="soak: seconds of random faults")
    parser.add_argument("--seed", type=int, default=1, help="soak: random seed (fault kinds, parameters, targets)")
    parser.add_argument("--workload", choices=("rabbitmq", "kafka-eo", "postgres-eo"), default="rabbitmq",
                        help="rabbitmq: ids through RabbitMQ, at-least-once (lost, duplicates); kafka-eo: keyed "
                             "records through Kafka into a count with exactly-once state in Redis (lost, over-counted); "
                             "postgres-eo: the same count written on by a PostgreSQL sink (the table's lost, over-counted)")
    parser.add_argument("--rate", type=float, default=None,
                        help="inputs per second while faults run (default 40 for rabbitmq, 100 for kafka-eo)")
    parser.add_argument("--zookeepers", type=int, default=1,
                        help="ZooKeeper servers: 3 runs on an ensemble, with its faults (leader, follower, all)")
    parser.add_argument("--report", type=Path, help="append a results section to this Markdown file")
    parser.add_argument("--json", type=Path, help="write the full record of the run here")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory (logs, sink files)")
    args = parser.parse_args(argv)
    if args.workload in ("kafka-eo", "postgres-eo") and args.zookeepers != 1:
        parser.error(f"the {args.workload} workload runs on one ZooKeeper server")
    if os.geteuid() != 0:
        parser.error("needs root (network namespaces)")
    # SIGTERM (a CI timeout, kill) unwinds like Ctrl-C, so every process, the namespace and the
    # run directory are still cleaned up
    signal.signal(signal.SIGTERM, _interrupt)
    command = ".venv/bin/python -m tests.chaos " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    base = Path(tempfile.mkdtemp(prefix="gale-chaos-"))
    try:
        workload = (KafkaEOWorkload(args.rate or 100.0) if args.workload == "kafka-eo"
                    else PostgresEOWorkload(args.rate or 100.0) if args.workload == "postgres-eo"
                    else RabbitWorkload(args.rate or 40.0))
        result = run_chaos(base, mode="bounded" if args.bounded else "soak", duration=args.duration,
                           seed=args.seed, rate=workload.rate, zookeepers=args.zookeepers, workload=workload)
    finally:
        if args.keep:
            print(f"run directory kept: {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        write_json(result, args.json, command)
    if args.report:
        append_markdown(result, args.report, command)
    print(f"N={result.n} lost={result.lost} duplicates={result.duplicates} over_counted={result.over_counted} converged={result.converged} "
          f"convergence={result.convergence_secs}s faults={len(result.faults)} "
          f"injected={sum(f.injected for f in result.faults)} -> {'PASS' if result.ok else 'FAIL'}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
