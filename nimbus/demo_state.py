"""``make demo-state``: word counts that survive ``kill -9`` of the worker holding them, and stay exact
in PostgreSQL.

Uses the dev cluster's Redis and PostgreSQL servers (``nimbus dev-cluster --demo-state`` starts both,
as ``--redis --postgres`` do), submits ``examples/word_count_to_postgres.py`` — sentences → split → a
stateful count (exactly-once state in Redis) → a PostgreSQL sink that commits with the checkpoint —
and every 5 s prints the counts committed in Redis, the table's, and whether the table is exact:
every row's ``seen`` (1 added per count the sink committed) equals its ``count`` (the last count
upserted), which fails if a count were written twice or lost. After ``kill_after`` seconds (0:
never) the demo ``kill -9``s the worker holding the ``count`` tasks — or do it yourself with the pid
shown — and the totals go on from the last checkpoint, the table still exact (docs/state.md,
docs/sinks.md).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import click

from gale import config as gconfig
from gale.nimbus.client import NimbusClient
from gale.nimbus.demo import submit_file

NAME = "word-count-to-postgres"
TABLE = "word_counts"


def example_path() -> Path:
    import gale.examples

    return Path(gale.examples.__file__).resolve().parent / "word_count_to_postgres.py"


def count_pids(detail: dict[str, Any]) -> set[int]:
    comp = detail["components"].get("count", {})
    return {e["worker"]["pid"] for e in comp.get("executor_list", []) if e.get("worker") and e["worker"].get("pid")}


def table_rows(postgres: Any) -> dict[str, tuple[int, int]]:
    """word → (count, seen) in the table (empty before the sink made it)."""
    with postgres.connect(autocommit=True) as conn:
        if conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()[0] is None:
            return {}
        return {w: (c, s) for w, c, s in conn.execute(f"SELECT word, count, seen FROM {TABLE}")}


def inexact(rows: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The rows whose ``seen`` is not their ``count``: a count written twice, or lost."""
    return {w: cs for w, cs in rows.items() if cs[0] != cs[1]}


def run_state_demo(cluster, config_path: Path, duration: float, stop: dict, kill_after: float = 20.0) -> int:
    from gale.worker.state.inspect import read_committed
    from gale.worker.state.redis_provider import RedisStateProvider

    client = NimbusClient(gconfig.load_daemon_config(config_path))
    redis, postgres = cluster.redis, cluster.postgres  # started and stopped with the cluster
    provider = RedisStateProvider(redis.url)
    try:
        tid = submit_file(client, example_path(), NAME, {
            "topology.workers": 2, "topology.state.provider": "redis", "topology.state.redis.url": redis.url,
            "topology.state.checkpoint.interval.ms": 1000, "wordcount.sentences.per.task": 0,
            "postgres.url": postgres.url, "postgres.table": TABLE,
        })
        click.echo(f"submitted word_count_to_postgres.py as {tid}; counts live in Redis and are written on into "
                   f"PostgreSQL table {TABLE}, both committed every second (exactly once)")
        started = time.monotonic()
        killed: int | None = None
        before_kill = 0
        wrong = 0
        while not stop["flag"] and (not duration or time.monotonic() - started < duration):
            time.sleep(5)  # the demo's display period
            try:
                detail = client.topology(tid)
                counts = read_committed(provider, NAME, "count", key_groups=128)
                rows = table_rows(postgres)
            except Exception as exc:  # noqa: BLE001 - keep the demo going through a hiccup
                click.echo(f"(not ready: {exc})")
                continue
            elapsed = time.monotonic() - started
            pids = count_pids(detail)
            total = sum(counts.values())
            in_table = sum(c for c, _ in rows.values())
            bad = inexact(rows)
            wrong += bool(bad)
            cp = detail["components"].get("$checkpointspout", {}).get("stats", {}).get("extra", {})
            top = sorted(rows.items(), key=lambda kv: -kv[1][0])[:5]
            click.echo(f"\n== {elapsed:4.0f}s  words counted: committed in Redis {total:>9}, in PostgreSQL "
                       f"{in_table:>9}  checkpoint txid {int(cp.get('checkpoint_txid_max', 0))}  count worker pid(s) "
                       f"{sorted(pids) or '-'}")
            click.echo("   " + "  ".join(f"{w} {c}" for w, (c, _) in top))
            click.echo(f"   PostgreSQL exact (seen = count on all {len(rows)} rows): "
                       + ("yes" if not bad else f"NO: {dict(list(bad.items())[:5])}"))
            if killed is not None:
                verdict = "resumed from the checkpoint" if in_table >= before_kill else "LOWER than before the kill"
                click.echo(f"   after kill -9 of {killed}: {in_table} in the table, {before_kill} before: {verdict}")
            elif kill_after and elapsed >= kill_after and pids and in_table:
                killed = min(pids)
                before_kill = in_table
                os.kill(killed, signal.SIGKILL)
                click.echo(f"   kill -9 {killed} (the worker holding count): its supervisor restarts it, the topology "
                           "rolls back to the last checkpoint (the sink's prepared rows of an unfinished one are rolled "
                           "back, a committed one's are committed) and goes on from there")
            elif pids and not killed:
                click.echo(f"   try: kill -9 {min(pids)}   (or wait: the demo does it at {kill_after:.0f}s)")
        return 1 if wrong else 0
    finally:
        provider.close()
