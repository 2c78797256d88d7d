"""The ``nimbus`` commands that show: ``list``, ``status``, ``cluster``, ``workers`` (text, or JSON with
``--json``); :mod:`gale.nimbus.cli` adds them to its group."""

from __future__ import annotations

import json
import time

import click

from gale.nimbus.cli_common import call, client_for, config_option, json_option, window_option
from gale.topology.state import CHECKPOINT_COMPONENT


@click.command("list")
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


@click.command()
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


@click.command()
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


@click.command()
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
