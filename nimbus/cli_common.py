"""What the ``nimbus`` commands share: the one-line failure (exit code 1), the config and ``-c``
loading, the client, the API error's explanation, and the common options."""

from __future__ import annotations

import sys
from typing import Any

import click

from gale import config as gconfig
from gale.config_keys import Config
from gale.errors import GaleError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
#: how often ``--wait`` asks nimbus again (a topology read: a few milliseconds of nimbus's time); the
#: wait ends at most this long after what it waits for happened
WAIT_POLL_SECS = 0.2


def fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def load_config(config: str | None) -> Config:
    try:
        return gconfig.load_daemon_config(config)
    except GaleError as exc:
        fail(str(exc))
        raise  # unreachable


def topology_overrides(pairs: tuple[str, ...]) -> dict[str, Any]:
    try:
        overrides = gconfig.parse_overrides(pairs)
        gconfig.validate(overrides, where="-c options", allow_user_keys=True)
        return overrides
    except GaleError as exc:
        fail(str(exc))
        raise


def client_for(config: str | None):
    from gale.nimbus.client import NimbusClient

    return NimbusClient(load_config(config))


#: what to do about an API error, by HTTP status, when nimbus's message does not say it already
FIXES = {
    404: "'nimbus list' shows the topologies",
    413: "the limit is nimbus.max.request.bytes in nimbus's config",
}


def call(fn, *args, **kwargs):
    """Run a client call; turn every Gale error into a one-line message and exit code 1."""
    from gale.nimbus.client import ApiCallError

    try:
        return fn(*args, **kwargs)
    except ApiCallError as exc:
        message = str(exc)
        if exc.status == 409 and "leader" in message:
            message += " (retry in a few seconds, once the election is over)"
        elif exc.status in FIXES:
            message += f" ({FIXES[exc.status]})"
        fail(message)
    except GaleError as exc:
        fail(str(exc))


config_option = click.option("--config", "config", type=click.Path(dir_okay=False), default=None,
                             envvar="GALE_CONFIG", help="YAML config file (default: $GALE_CONFIG or built-in defaults).")
conf_option = click.option("-c", "overrides", multiple=True, metavar="KEY=VALUE",
                           help="Topology config override, repeatable (e.g. -c topology.workers=2).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
window_option = click.option("--window", type=click.Choice(["600", "10800", "86400", ":all-time"]), default=":all-time",
                             show_default=True, help="Stats window in seconds.")
