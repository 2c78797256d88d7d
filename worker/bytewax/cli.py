"""``python -m gale.bytewax``: a Bytewax dataflow run on Gale in this process, with the arguments of
``python -m bytewax.run`` that apply to one process.

::

    python -m gale.bytewax wordcount:flow -w 2              # two tasks per step
    python -m gale.bytewax wordcount.py -r state/ -s 5      # recovery: checkpoints every 5 s in state/
    python -m gale.bytewax 'wordcount:get_flow("x")'        # a function returning the dataflow

The import string is ``module[:attribute]`` or ``path/to/file.py[:attribute]`` (the attribute
defaults to ``flow``; a call with literal arguments is made once). It runs until the input ends,
as Bytewax's does; the first error in user code stops it (exit status 1). ``-i``/``-a`` (several
processes) are Bytewax's cluster; on Gale that is ``nimbus submit`` (``-c topology.workers=N``).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from datetime import timedelta
from pathlib import Path

from gale.bytewax.topology import flow_topology
from gale.config import parse_overrides
from gale.errors import GaleError
from gale.worker.bytewax.flows import resolve_flow
from gale.worker.bytewax.run import FlowRun, flow_conf


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gale.bytewax",
                                     description="Run a Bytewax dataflow on Gale in this process.")
    parser.add_argument("import_str", help="module[:attribute] or path/to/file.py[:attribute] (default attribute: flow)")
    parser.add_argument("-w", "--workers-per-process", type=int, default=1, help="tasks per step (default 1)")
    parser.add_argument("-r", "--recovery-directory", type=Path, default=None,
                        help="keep the state in this directory (SQLite) and resume from it")
    parser.add_argument("-s", "--snapshot-interval", type=float, default=None,
                        help="seconds between checkpoints (Bytewax's epoch interval)")
    parser.add_argument("-b", "--backup-interval", type=float, default=None,
                        help="accepted for Bytewax's command line; Gale keeps only committed checkpoints")
    parser.add_argument("-i", "--process-id", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("-a", "--addresses", default=None, help=argparse.SUPPRESS)
    parser.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a topology configuration key (repeatable)")
    return parser


def flow_ref(import_str: str) -> str:
    """``module:attribute`` for an import string; a file path puts its directory on ``sys.path``."""
    target, _, attr = import_str.partition(":")
    if target.endswith(".py") or "/" in target:
        path = Path(target).resolve()
        sys.path.insert(0, str(path.parent))
        target = path.stem if path.suffix == ".py" else path.name
    elif "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    return f"{target}:{attr or 'flow'}"


class _Recovery:
    def __init__(self, db_dir: Path):
        self.db_dir = db_dir


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.addresses or (args.process_id not in (None, 0)):
        print("gale.bytewax: -i/-a run a dataflow over several processes, which on Gale is a topology on its "
              "cluster: nimbus submit <file.py> -c topology.workers=N", file=sys.stderr)
        return 2
    try:
        ref = flow_ref(args.import_str)
        flow = resolve_flow(ref)
        interval = timedelta(seconds=args.snapshot_interval) if args.snapshot_interval is not None else None
        recovery = _Recovery(args.recovery_directory) if args.recovery_directory is not None else None
        conf = flow_conf(args.workers_per_process, interval, recovery, parse_overrides(args.conf))
        run = FlowRun(flow_topology(flow, ref, conf))
    except GaleError as exc:
        print(f"gale.bytewax: {exc}", file=sys.stderr)
        return 2
    try:
        run.start()
        run.wait()
    except RuntimeError:
        traceback.print_exc()
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        run.stop()
    return 0
