"""The ``nimbus`` command."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Gale nimbus: the master daemon and the client commands that talk to it."""


@main.command("dev-cluster")
@click.option("--demo", is_flag=True, help="Run the flagship demo topology on the cluster.")
def dev_cluster(demo: bool) -> None:
    """Start a real ZooKeeper and write/read the /storm skeleton (daemons: not yet built)."""
    from nimbus.devcluster_skeleton import run_skeleton

    sys.exit(run_skeleton())


@main.command()
def serve() -> None:
    """[placeholder] Run the nimbus daemon. Not implemented yet (issue 4); exits non-zero."""
    click.echo("nimbus serve: not implemented yet (see issue 4)", err=True)
    sys.exit(2)
