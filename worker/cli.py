"""The ``worker`` command (started by a supervisor, not by people)."""

from __future__ import annotations

import sys

import click

from gale import config as gconfig
from gale.errors import GaleError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def main() -> None:
    """Gale worker process. Supervisors start workers; you do not need to run this by hand."""


@main.command()
@click.argument("topology_id")
@click.argument("supervisor_id")
@click.argument("port", type=click.IntRange(1, 65535))
@click.argument("worker_id")
@click.option("--config", "config", type=click.Path(dir_okay=False), default=None,
              help="The supervisor's config file (written to <storm.local.dir>/supervisor/worker-conf.yaml).")
def run(topology_id: str, supervisor_id: str, port: int, worker_id: str, config: str | None) -> None:
    """Run the executors assigned to SUPERVISOR_ID:PORT for TOPOLOGY_ID as worker WORKER_ID.

    \b
    Example (what a supervisor runs):
      worker run wordcount-1-1700000000 5f0c...-host 6700 0b8e... --config storm-local/supervisor/worker-conf.yaml
    """
    from gale.worker.daemon import run_worker

    try:
        loaded = gconfig.load_daemon_config(config)
    except GaleError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    sys.exit(run_worker(loaded, topology_id, supervisor_id, port, worker_id))


if __name__ == "__main__":  # python -m gale.worker.cli
    main()
