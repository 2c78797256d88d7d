"""``make demo``: submit the flagship topology to the dev cluster and show its results live."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from common import config as gconfig
from common.bundle import make_bundle
from common.topology.loader import load_topology_file
from nimbus.client import NimbusClient

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def submit_file(client: NimbusClient, path: Path, name: str, conf: dict[str, Any]) -> str:
    topology = load_topology_file(path, conf)
    topo_conf = {**topology.conf, **conf}
    bundle = make_bundle(path.parent, topology.to_json(), topo_conf)
    return client.submit(name, bundle)


def run_demo(cluster, config_path: Path, duration: float, stop: dict) -> int:
    conf = gconfig.daemon_config(config_path)
    client = NimbusClient(conf)
    path = EXAMPLES / "word_count.py"
    tid = submit_file(client, path, "wordcount", {"topology.workers": 2})
    click.echo(f"submitted {path.name} as {tid}; live stats every 3 s (Ctrl-C stops)")
    started = time.monotonic()
    while not stop["flag"] and (not duration or time.monotonic() - started < duration):
        time.sleep(3)
        detail = client.topology(tid, window="600")
        line = [f"[{time.monotonic() - started:5.0f}s] {detail['executors_running']}/{detail['executors']} executors"]
        for comp, c in detail["components"].items():
            s = c["stats"] or {}
            if comp.startswith("__"):
                continue
            line.append(f"{comp}: emitted {s.get('emitted', 0)} acked {s.get('acked', 0)} failed {s.get('failed', 0)}")
        click.echo(" | ".join(line))
    return 0
