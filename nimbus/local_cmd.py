"""``nimbus local``: run a topology file in this process and print its stats."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import click

from gale.bytewax.topology import is_flow_definition
from gale.log import configure
from gale.stats_summary import format_table
from gale.topology.loader import load_topology_file
from gale.worker.local import LocalCluster


def run_local(topology_file: str, duration: float, overrides: dict[str, Any], as_json: bool, name: str | None) -> int:
    # INFO, as a worker logs (worker/daemon.py): what a topology's components log at info — a
    # shell child's `log` messages at level 2 among them — is part of what a local run shows
    configure(fmt="console", level="INFO")
    topology = load_topology_file(topology_file, overrides)
    name = name or topology.name or Path(topology_file).stem
    stop = threading.Event()
    old = signal.signal(signal.SIGINT, lambda *_: stop.set())
    if is_flow_definition(topology.definition):
        try:
            return _run_flow(topology, name, duration, overrides, as_json, stop)
        finally:
            signal.signal(signal.SIGINT, old)
    try:
        with LocalCluster() as cluster:
            running = cluster.submit_topology(name, overrides, topology)
            started = time.monotonic()
            if not as_json:
                click.echo(f"running {name} locally for {duration:g}s (Ctrl-C stops early)", err=True)
            stop.wait(duration)
            elapsed = time.monotonic() - started
            running.deactivate()
            time.sleep(0.2)
            stats = running.component_stats()
            errors = {c: errs[-3:] for c, errs in running.errors.items()}
    finally:
        signal.signal(signal.SIGINT, old)
    if as_json:
        click.echo(json.dumps({"name": name, "seconds": round(elapsed, 3), "components": stats, "errors": errors},
                              indent=2))
    else:
        click.echo(format_table(stats))
        spouts = [c for c in stats.values() if c["kind"] == "spout"]
        acked = sum(c["acked"] for c in spouts)
        click.echo(f"\n{acked} spout tuples acked in {elapsed:.1f}s ({acked / elapsed:.0f}/s)")
        for comp, errs in errors.items():
            click.echo(f"errors in {comp}: {errs[-1].strip().splitlines()[-1]}")
    return 0


def _run_flow(topology: Any, name: str, duration: float, overrides: dict[str, Any], as_json: bool,
              stop: threading.Event) -> int:
    """A Bytewax dataflow runs until its input ends (as ``python -m bytewax.run`` does), ``duration``
    passes or Ctrl-C; the first error in user code stops it (exit status 1, the traceback printed)."""
    from gale.worker.bytewax.run import FlowRun

    run = FlowRun(topology, name, overrides)
    started = time.monotonic()
    if not as_json:
        click.echo(f"running dataflow {name} locally until its input ends (at most {duration:g}s; Ctrl-C stops "
                   "early)", err=True)
    failed = None
    try:
        run.start()
        try:
            ended = run.wait(duration, stop)
        except RuntimeError as exc:
            ended, failed = True, exc
        elapsed = time.monotonic() - started
        stats = run.running.component_stats()
        errors = {c: errs[-3:] for c, errs in run.running.errors.items()}
    finally:
        run.stop()
    if as_json:
        click.echo(json.dumps({"name": name, "seconds": round(elapsed, 3), "ended": ended, "components": stats,
                               "errors": errors}, indent=2))
    else:
        click.echo(format_table(stats))
        click.echo(f"\n{'input ended' if ended else 'stopped'} after {elapsed:.1f}s")
        for comp, errs in errors.items():
            click.echo(f"errors in {comp}:\n{errs[-1].strip()}")
    return 1 if failed is not None else 0
