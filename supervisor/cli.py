"""The ``supervisor`` command."""

from __future__ import annotations

import sys

import click

from gale import config as gconfig
from gale.errors import GaleError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def main() -> None:
    """Gale supervisor: runs on every worker node, launches and watches worker processes.

    \b
    Example:
      supervisor serve --config /etc/gale/gale.yaml
    """


@main.command()
@click.option("--config", "config", type=click.Path(dir_okay=False), default=None, envvar="GALE_CONFIG",
              help="YAML config file (default: $GALE_CONFIG or built-in defaults).")
@click.option("--kill-workers-on-exit", is_flag=True,
              help="Stop this node's workers when the supervisor stops (default: leave them for re-adoption).")
def serve(config: str | None, kill_workers_on_exit: bool) -> None:
    """Run the supervisor daemon in the foreground (what systemd runs). SIGTERM stops it cleanly;
    its workers keep running and are re-adopted by the next supervisor start.

    \b
    Example:
      supervisor serve --config /etc/gale/gale.yaml
    """
    from gale.supervisor.serve import serve as run

    try:
        loaded = gconfig.load_daemon_config(config)
        sys.exit(run(loaded, kill_workers_on_exit))
    except (GaleError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":  # python -m gale.supervisor.cli
    main()
