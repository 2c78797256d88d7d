"""``make demo-state``: word counts that survive ``kill -9`` of the worker holding them.

Uses the dev cluster's Redis server (``nimbus dev-cluster --demo-state`` starts one, as ``--redis``
does), submits
``examples/stateful_word_count.py`` with its state in Redis, and every 5 s prints the counts
committed in Redis and which worker process holds the ``count`` tasks. After ``kill_after`` seconds
(0: never) the demo itself ``kill -9``s that worker — or do it yourself with the pid shown — and the
totals go on from the last checkpoint instead of restarting from zero (docs/state.md).
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

NAME = "stateful-word-count"


def example_path() -> Path:
    import gale.examples

    return Path(gale.examples.__file__).resolve().parent / "stateful_word_count.py"


def count_pids(detail: dict[str, Any]) -> set[int]:
    comp = detail["components"].get("count", {})
    return {e["worker"]["pid"] for e in comp.get("executor_list", []) if e.get("worker") and e["worker"].get("pid")}


def run_state_demo(cluster, config_path: Path, duration: float, stop: dict, kill_after: float = 20.0) -> int:
    from gale.worker.state.inspect import read_committed
    from gale.worker.state.redis_provider import RedisStateProvider

    client = NimbusClient(gconfig.load_daemon_config(config_path))
    redis = cluster.redis  # started and stopped with the cluster
    provider = RedisStateProvider(redis.url)
    try:
        tid = submit_file(client, example_path(), NAME, {
            "topology.workers": 2, "topology.state.provider": "redis", "topology.state.redis.url": redis.url,
            "topology.state.checkpoint.interval.ms": 1000, "wordcount.sentences.per.task": 0,
        })
        click.echo(f"submitted stateful_word_count.py as {tid}; counts live in Redis, committed every second")
        started = time.monotonic()
        killed: int | None = None
        before_kill = 0
        while not stop["flag"] and (not duration or time.monotonic() - started < duration):
            time.sleep(5)  # the demo's display period
            try:
                detail = client.topology(tid)
                counts = read_committed(provider, NAME, "count", key_groups=128)
            except Exception as exc:  # noqa: BLE001 - keep the demo going through a hiccup
                click.echo(f"(not ready: {exc})")
                continue
            elapsed = time.monotonic() - started
            pids = count_pids(detail)
            total = sum(counts.values())
            cp = detail["components"].get("$checkpointspout", {}).get("stats", {}).get("extra", {})
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:5]
            click.echo(f"\n== {elapsed:4.0f}s  words counted (committed in Redis) {total:>9}  checkpoint txid "
                       f"{int(cp.get('checkpoint_txid_max', 0))}  count worker pid(s) {sorted(pids) or '-'}")
            click.echo("   " + "  ".join(f"{w} {c}" for w, c in top))
            if killed is not None:
                verdict = "resumed from the checkpoint" if total >= before_kill else "LOWER than before the kill"
                click.echo(f"   after kill -9 of {killed}: {total} counted, {before_kill} before: {verdict}")
            elif kill_after and elapsed >= kill_after and pids and total:
                killed = min(pids)
                before_kill = total
                os.kill(killed, signal.SIGKILL)
                click.echo(f"   kill -9 {killed} (the worker holding count): its supervisor restarts it, the restarted "
                           "tasks load their counts from Redis, and counting goes on once the tuples lost with the "
                           "worker have timed out and replayed (topology.message.timeout.secs, 30 s)")
            elif pids and not killed:
                click.echo(f"   try: kill -9 {min(pids)}   (or wait: the demo does it at {kill_after:.0f}s)")
        return 0
    finally:
        provider.close()
