"""The daemons' HTTP API: how long a request takes, end to end, on a live dev cluster.

Run: ``.venv/bin/python -m benchmarks.bench_http [--requests N]``

Starts its own ZooKeeper and a dev cluster (one nimbus, one supervisor, real processes), then times
``--requests`` GETs of each of a few nimbus endpoints (API reads, a 404, the UI's script; the
supervisors' log viewer runs the same server), over one kept-alive connection (as the UI's page and the command line's waits use it) and with a
new connection each. Every request the UI, the command line and ``curl`` make goes this way.

Prints ``http_<endpoint>_<keepalive|new>_p50_ms`` and ``_p99_ms`` lines.
"""

from __future__ import annotations

import argparse
import http.client
import time
from urllib.parse import urlsplit

import httpx
import numpy as np

from benchmarks.bench_cluster import dev_cluster

ENDPOINTS = {
    "health": "/api/v1/health",
    "cluster": "/api/v1/cluster",
    "topologies": "/api/v1/topologies",
    "not_found": "/api/v1/topologies/no-such-topology",
    "ui_script": "/ui/app.js",
}


def timed(get, url: str, n: int) -> np.ndarray:
    out = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        get(url)
        out[i] = time.perf_counter() - t0
    return out * 1000.0


def get_new_connection(url: str) -> bytes:
    """One GET on a connection of its own (``http.client``: no client set-up of its own to time)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", parts.path)
        return conn.getresponse().read()
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with dev_cluster("gale-bench-http-", supervisors=1) as (_base, cluster):
        nimbus = cluster.nimbus_url()
        urls = {name: nimbus + path for name, path in ENDPOINTS.items()}
        with httpx.Client(trust_env=False, timeout=30) as kept:
            status = {name: kept.get(url).status_code for name, url in urls.items()}
            for name, url in urls.items():
                for mode, get in (("keepalive", lambda u: kept.get(u).read()), ("new", get_new_connection)):
                    ms = timed(get, url, args.requests)
                    print(f"http_{name}_{mode}_p50_ms: {np.percentile(ms, 50):.2f} ms (HTTP {status[name]})")
                    print(f"http_{name}_{mode}_p99_ms: {np.percentile(ms, 99):.2f} ms", flush=True)


if __name__ == "__main__":
    main()
