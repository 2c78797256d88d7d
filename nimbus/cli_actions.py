"""The ``nimbus`` commands that act on a topology: ``kill``, ``activate``, ``deactivate``,
``rebalance``, and the waits (with progress and an ETA) of ``--wait-removal`` and ``--wait-running``;
:mod:`gale.nimbus.cli` adds them to its group."""

from __future__ import annotations

import json
import time

import click

from gale.errors import GaleError
from gale.nimbus.cli_common import WAIT_POLL_SECS, call, client_for, config_option, fail, json_option


def _action_done(tid: str, action: str, as_json: bool) -> None:
    click.echo(json.dumps({"id": tid, "action": action}) if as_json else tid)


@click.command()
@click.argument("name")
@click.option("--wait", "wait_secs", type=click.IntRange(0, 86400), default=None,
              help="Seconds between deactivating spouts and removing the topology (default: its message timeout).")
@click.option("--wait-removal", is_flag=True, help="Wait, showing progress and an ETA, until the topology is removed.")
@click.option("--timeout", "removal_timeout", type=float, default=600.0, show_default=True,
              help="Seconds --wait-removal waits at most.")
@config_option
@json_option
def kill(name: str, wait_secs: int | None, wait_removal: bool, removal_timeout: float, config: str | None,
         as_json: bool) -> None:
    """Kill a topology: spouts stop at once, workers go after the wait.

    \b
    Examples:
      nimbus kill wordcount --wait 5
      nimbus kill wordcount --wait 30 --wait-removal     # returns once it is gone
    """
    client = client_for(config)
    tid = call(client.kill, name, wait_secs)
    _action_done(tid, "kill", as_json)
    if wait_removal:
        _wait_removed(client, tid, removal_timeout)


def _progress(line: str, last: list[str]) -> None:
    if not last or last[-1] != line:
        click.echo(line, err=True)
        last.append(line)


def _countdown(detail: dict, what: str) -> str | None:
    pending = detail.get("pending_action") or {}
    deadline = pending.get("deadline_secs")
    if deadline is None:
        return None
    remaining = deadline - time.time()
    return f"{what} in {remaining:.0f}s (ETA)" if remaining > 0 else f"{what} now"


def _wait_removed(client, tid: str, timeout: float) -> None:
    from gale.nimbus.client import ApiCallError

    start = time.monotonic()
    last: list[str] = []
    while True:
        try:
            detail = client.topology(tid)
        except ApiCallError as exc:
            if exc.status == 404:
                click.echo(f"{tid}: removed ({time.monotonic() - start:.1f}s)", err=True)
                return
            fail(str(exc))
        except GaleError as exc:
            fail(str(exc))
        line = f"{tid}: {detail['status']}, {detail['executors_running']} executors still running; " + (
            _countdown(detail, "workers removed") or "waiting for nimbus to remove it")
        _progress(line, last)
        if time.monotonic() - start > timeout:
            fail(f"{tid} still exists after {timeout:.0f}s; check 'nimbus status {tid}' and the nimbus log")
        time.sleep(WAIT_POLL_SECS)


@click.command()
@click.argument("name")
@config_option
@json_option
def activate(name: str, config: str | None, as_json: bool) -> None:
    """Activate a topology's spouts.

    \b
    Example:
      nimbus activate wordcount
    """
    _action_done(call(client_for(config).activate, name), "activate", as_json)


@click.command()
@click.argument("name")
@config_option
@json_option
def deactivate(name: str, config: str | None, as_json: bool) -> None:
    """Deactivate a topology's spouts (bolts keep draining in-flight tuples).

    \b
    Example:
      nimbus deactivate wordcount
    """
    _action_done(call(client_for(config).deactivate, name), "deactivate", as_json)


@click.command()
@click.argument("name")
@click.option("-n", "--num-workers", type=int, help="New number of workers.")
@click.option("-e", "--executors", "executors", multiple=True, metavar="COMPONENT=N",
              help="New executor count for a component, repeatable; above its task count, the task count too (Gale).")
@click.option("-t", "--tasks", "tasks", multiple=True, metavar="COMPONENT=N",
              help="New task count for a component (Gale; keyed state moves by key groups), repeatable.")
@click.option("--wait", "wait_secs", type=click.IntRange(0, 86400), default=None,
              help="Seconds spouts are paused before re-planning.")
@click.option("--wait-running", is_flag=True,
              help="Wait, showing progress and an ETA, until the new plan runs (every executor heartbeats).")
@click.option("--timeout", "run_timeout", type=float, default=600.0, show_default=True,
              help="Seconds --wait-running waits at most.")
@config_option
@json_option
def rebalance(name: str, num_workers: int | None, executors: tuple[str, ...], tasks: tuple[str, ...],
              wait_secs: int | None, wait_running: bool, run_timeout: float, config: str | None,
              as_json: bool) -> None:
    """Re-plan a topology with new worker/executor/task counts.

    -e COMPONENT=N within the component's task count changes its executors (Storm); above it, or
    with -t COMPONENT=N, the component gets N tasks (Gale: keyed state moves by key groups; a
    component with per-task state is refused).

    \b
    Examples:
      nimbus rebalance wordcount -n 2 -e split=4 --wait 5
      nimbus rebalance wordcount -e count=8 --wait 5      # count had 4 tasks: now 8
      nimbus rebalance wordcount -t count=1 --wait 5      # down to one task
      nimbus rebalance wordcount -n 3 --wait 0 --wait-running
    """
    def counts(items: tuple[str, ...], flag: str) -> dict[str, int]:
        parsed = {}
        for item in items:
            comp, sep, n = item.partition("=")
            if not sep or not n.strip().isdigit() or int(n) < 1:
                fail(f"{flag} expects COMPONENT=N with N a positive integer, got {item!r}")
            parsed[comp.strip()] = int(n)
        return parsed

    parsed, parsed_tasks = counts(executors, "-e"), counts(tasks, "-t")
    if num_workers is not None and num_workers < 1:
        fail(f"-n/--num-workers must be at least 1, got {num_workers}")
    client = client_for(config)
    tid = call(client.rebalance, name, wait_secs, num_workers, parsed, parsed_tasks)
    _action_done(tid, "rebalance", as_json)
    if wait_running:
        _wait_rebalanced(client, tid, run_timeout)


def _wait_rebalanced(client, tid: str, timeout: float) -> None:
    start = time.monotonic()
    last: list[str] = []
    while True:
        detail = call(client.topology, tid)
        running, total = detail["executors_running"], detail["executors"]
        if detail["status"] != "REBALANCING" and total and running >= total:
            click.echo(f"{tid}: {detail['status']}, {running}/{total} executors running in {detail['workers']} "
                       f"workers ({time.monotonic() - start:.1f}s)", err=True)
            return
        if detail["status"] == "REBALANCING":
            line = f"{tid}: REBALANCING, spouts paused; " + (_countdown(detail, "re-planning") or "re-planning")
        else:
            line = f"{tid}: {running}/{total} executors running in the new plan"
        _progress(line, last)
        if time.monotonic() - start > timeout:
            fail(f"{tid}: the new plan is not running after {timeout:.0f}s ({running}/{total} executors); "
                 "check 'nimbus status' and the supervisors' logs")
        time.sleep(WAIT_POLL_SECS)
