"""``nimbus logs NAME [--component C] [--follow]``: a topology's worker logs, through nimbus.

Nimbus relays to the supervisors' log servers (``gale.nimbus.logs_api``), so the command needs only
nimbus's address and the API token, like every other. Each line is prefixed with the worker it
comes from (``host:port``). ``--follow`` polls every second for what the workers wrote since, picks
up workers that started meanwhile (a restart, a rebalance) and starts a rotated file from its top.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import click

from gale.errors import GaleError
from gale.nimbus.cli_common import call, client_for, config_option

#: bytes read per poll of a followed log (the log server's page limit)
FOLLOW_BYTES = 1024 * 1024
#: how often --follow looks for workers that started since
REDISCOVER_SECS = 10.0


def worker_logs(topology: dict[str, Any], component: str | None) -> list[dict[str, Any]]:
    """The workers whose logs to show: all, or those running ``component``."""
    if component is not None:
        known = {s["spoutId"] for s in topology.get("spouts", [])} | {b["boltId"] for b in topology.get("bolts", [])}
        if component not in known:
            raise GaleError(f"topology {topology['name']} has no component {component!r}; its components: "
                            f"{', '.join(sorted(known))}")
    return [w for w in topology.get("workers", [])
            if w.get("logFile") and (component is None or component in w.get("componentNumTasks", {}))]


def last_lines(text: str, n: int, at_start: bool) -> list[str]:
    """The last ``n`` whole lines of a page (its first line is cut unless the page starts the file)."""
    lines = text.splitlines()
    if not at_start and lines:
        lines = lines[1:]
    return lines[-n:] if n else []


class Follower:
    """Where each worker's log was read up to; prints what is new (whole lines only)."""

    def __init__(self, client: Any, out: Callable[[str], None]):
        self.client = client
        self.out = out
        self.at: dict[tuple[str, str], int] = {}
        self.rest: dict[tuple[str, str], str] = {}

    def read(self, w: dict[str, Any], tail_lines: int | None = None) -> None:
        key = (w["supervisorId"], w["logFile"])
        params: dict[str, Any] = {"file": w["logFile"]}
        if key in self.at:
            params.update(start=self.at[key], length=FOLLOW_BYTES)
        else:
            params["length"] = 64 * 1024
        page = self.client.get(f"/api/v1/supervisor/{w['supervisorId']}/log", params=params)
        if key in self.at and page["size"] < self.at[key]:  # rotated: the new file from its top
            self.at[key] = 0
            self.rest[key] = ""
            return self.read(w)
        prefix = f"{w['host']}:{w['port']} | "
        if key not in self.at:
            lines = last_lines(page["data"], tail_lines or 0, page["start"] == 0)
        else:
            text = self.rest.get(key, "") + page["data"]
            lines = text.split("\n")
            self.rest[key] = lines.pop()  # a line still being written
        for line in lines:
            self.out(prefix + line)
        self.at[key] = page["end"]


def run_logs(client: Any, name: str, component: str | None, follow: bool, lines: int,
             out: Callable[[str], None] = click.echo, polls: int | None = None, poll_secs: float = 1.0,
             stop: threading.Event | None = None) -> None:
    """Print the workers' last ``lines``; with ``follow``, then what they write, every ``poll_secs``
    (``polls`` times, or until ``stop`` is set)."""
    stop = stop or threading.Event()
    topology = client.get(f"/api/v1/topology/{name}")
    workers = worker_logs(topology, component)
    if not workers:
        raise GaleError(f"topology {topology['name']} has no workers{' running ' + component if component else ''} yet")
    follower = Follower(client, out)
    for w in workers:
        follower.read(w, tail_lines=lines)
    found_at = time.monotonic()
    n = 0
    while follow and (polls is None or n < polls):
        if stop.wait(poll_secs):  # the follow period
            return
        n += 1
        if time.monotonic() - found_at >= REDISCOVER_SECS:
            found_at = time.monotonic()
            workers = worker_logs(client.get(f"/api/v1/topology/{name}"), component) or workers
        for w in workers:
            if stop.is_set():
                return
            key = (w["supervisorId"], w["logFile"])
            follower.read(w, tail_lines=0 if key not in follower.at else None)


@click.command("logs")
@click.argument("name")
@click.option("--component", default=None, help="Only the workers running this component.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing what the workers log (Ctrl-C stops).")
@click.option("--lines", "-n", type=click.IntRange(0, 10000), default=20, show_default=True,
              help="Lines of each worker's log to print first.")
@config_option
def logs(name: str, component: str | None, follow: bool, lines: int, config: str | None) -> None:
    """Print a topology's worker logs (the last lines of each; --follow for more), through nimbus.

    \b
    Examples:
      nimbus logs wordcount
      nimbus logs wordcount --component count --follow
    """
    # Ctrl-C sets a flag the follow loop waits on, instead of raising KeyboardInterrupt wherever the
    # loop is (one raised inside a finalizer is printed and dropped, and the loop would go on)
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set()) if follow else None
    try:
        call(run_logs, client_for(config), name, component, follow, lines, stop=stop)
    except KeyboardInterrupt:
        pass  # Ctrl-C without --follow: the reads in progress stop
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
