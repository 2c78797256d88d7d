"""The ``worker``  command."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Gale worker daemon."""


@main.command()
def serve() -> None:
    """[placeholder] Not implemented yet (issue 4); exits non-zero."""
    click.echo("worker: not implemented yet (see issue 4)", err=True)
    sys.exit(2)
