"""``make demo``: the flagship Spark word count on the dev cluster, with results shown live.

Submits the flagship example ``spark_word_count.py`` (sentences → split → a Spark stage counting
words per micro-batch → running totals → top-N, and a Spark sink archiving sentences to Parquet), then every
few seconds prints the live top-N table (written by the topology's ``top`` bolt), the Spark stage's
batch figures and where the Parquet output is. The example ships inside the package
(``gale.examples``, the repository's ``examples/``), so the demo runs from an installed wheel too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from gale import config as gconfig
from gale.bundle import make_bundle
from gale.topology.loader import load_topology_file
from gale.nimbus.client import NimbusClient


def flagship_path() -> Path:
    """The flagship example's file, from the installed package (or the checkout, when editable)."""
    import gale.examples

    return Path(gale.examples.__file__).resolve().parent / "spark_word_count.py"


def submit_file(client: NimbusClient, path: Path, name: str, conf: dict[str, Any]) -> str:
    topology = load_topology_file(path, conf)
    topo_conf = {**topology.conf, **conf}
    bundle = make_bundle(path.parent, topology.to_json(), topo_conf)
    return client.submit(name, bundle)


def _table(detail: dict[str, Any], top: list, elapsed: float, parquet: Path) -> str:
    comps = detail["components"]
    spark = comps.get("spark-count", {}).get("stats", {}).get("extra", {})
    sink = comps.get("archive", {}).get("stats", {}).get("extra", {})
    spout = comps.get("sentences", {}).get("stats", {})
    lines = [
        f"\n== {elapsed:5.0f}s  executors {detail['executors_running']}/{detail['executors']}  "
        f"sentences acked {spout.get('acked', 0)} failed {spout.get('failed', 0)}  "
        f"complete latency {spout.get('complete_latency_ms', 0):.0f} ms",
    ]
    if spark.get("spark_ready"):
        lines.append(f"   Spark: {int(spark.get('spark_batches', 0))} batches, avg "
                     f"{spark.get('spark_batch_latency_ms_avg', 0):.0f} ms, rows in {int(spark.get('spark_batch_rows_in', 0))}"
                     f"; Parquet rows written {int(sink.get('spark_sink_rows_written', 0))} → {parquet}")
    else:
        lines.append("   Spark is starting in the worker (15-60 s); tuples queue meanwhile")
    if top:
        lines.append("   top words:")
        for rank, (word, total) in enumerate(top, 1):
            lines.append(f"   {rank:2d}. {word:<10} {total:>9}")
    return "\n".join(lines)


def run_demo(cluster, config_path: Path, duration: float, stop: dict) -> int:
    client = NimbusClient(gconfig.load_daemon_config(config_path))
    out = cluster.base / "spark-word-count"
    top_file = out / "top.json"
    out.mkdir(parents=True, exist_ok=True)
    path = flagship_path()
    tid = submit_file(client, path, "spark-word-count", {
        "topology.workers": 1, "sparkwc.output.dir": str(out), "sparkwc.top.file": str(top_file),
        "sparkwc.sentences.per.sec": 1000,
    })
    parquet = out / "sentences"
    click.echo(f"submitted {path.name} as {tid}")
    click.echo(f"Parquet output: {parquet}   (read it with pyarrow or spark.read.parquet)")
    click.echo("live results every 5 s; Ctrl-C stops the demo and the cluster")
    started = time.monotonic()
    while not stop["flag"] and (not duration or time.monotonic() - started < duration):
        time.sleep(5)
        try:
            detail = client.topology(tid, window="600")
        except Exception as exc:  # noqa: BLE001 - keep the demo going through a hiccup
            click.echo(f"(nimbus: {exc})")
            continue
        top = []
        try:
            top = json.loads(top_file.read_text())["top"]
        except (FileNotFoundError, ValueError, KeyError):
            pass
        click.echo(_table(detail, top, time.monotonic() - started, parquet))
    return 0
