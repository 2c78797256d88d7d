"""Fuzzing the live API from its own OpenAPI document with schemathesis: every operation (Gale's,
Storm's, UI pages, /metrics, service discovery) with generated and boundary inputs — sometimes the
id of a real topology — gets no 5xx, and the daemon keeps serving afterwards."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gale import log as glog
from gale.config_keys import Config
from tests.components import requires
from tests.test_storm_api_units import submit_durable_wc
from tests.waiting import until

SCHEMATHESIS = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")

pytestmark = requires(Path(SCHEMATHESIS).exists(), "schemathesis is not installed (pip install -e '.[test]')")


@pytest.fixture
def live_nimbus(conf):
    from gale.nimbus.serve import NimbusServer

    c = dict(conf)
    c.update({"nimbus.http.port": 0, "nimbus.host": "127.0.0.1", "storm.local.hostname": "127.0.0.1",
              "nimbus.monitor.freq.secs": 1})
    buf = io.StringIO()
    glog.configure(fmt="json", stream=buf)
    server = NimbusServer(Config.resolve(c, allow_user_keys=False))
    server.start()
    until(server.nimbus.is_leader, 20, "in-process nimbus did not become leader")
    try:
        yield server, buf
    finally:
        server.stop()
        glog.configure(fmt="console")


@pytest.mark.build_independent  # an in-process nimbus's API: no tuple passes the hot path
@pytest.mark.timeout(300)
def test_fuzzing_the_openapi_schema_finds_no_server_errors(live_nimbus, tmp_path):
    server, log = live_nimbus
    base = f"http://127.0.0.1:{server.http.port}"
    tid = submit_durable_wc(base, "fuzzed")
    (tmp_path / "schemathesis.toml").write_text(f"""
[dictionaries.topologies]
values = ["{tid}", "fuzzed"]

[parameters]
"path.id" = {{ dictionary = "topologies", probability = 0.5 }}
"path.name" = {{ dictionary = "topologies", probability = 0.5 }}
""")
    started = time.monotonic()
    # one worker thread: CPython 3.11's ast.parse is not safe in two threads at once (hypothesis
    # parses its strategies' lambdas; two schemathesis workers ended in 'SystemError: AST
    # constructor recursion depth mismatch')
    proc = subprocess.run(
        [SCHEMATHESIS, "--config-file", str(tmp_path / "schemathesis.toml"), "run", f"{base}/openapi.json",
         "--checks", "not_a_server_error", "--max-examples", "15", "--workers", "1", "--request-timeout", "20",
         "--seed", "20261122", "--generation-database", "none", "--no-color",
         "--report", "ndjson", "--report-dir", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=270, cwd=tmp_path)
    elapsed = time.monotonic() - started
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    assert "Server error" not in out and "ST101" not in out, out[-8000:]
    tested = [line for line in out.splitlines() if line.strip().startswith("Tested:")]
    assert tested and tested[0].split()[-1].isdigit() and int(tested[0].split()[-1]) >= 30, out[-3000:]
    print(f"schemathesis: {tested[0].strip()} in {elapsed:.0f}s")
    # the daemon is still whole: it serves, leads, and logged no unexpected error
    assert httpx.get(f"{base}/api/v1/health").json()["leader"] is True
    assert httpx.get(f"{base}/api/v1/topology/summary").status_code == 200
    lines = [json.loads(x) for x in log.getvalue().splitlines() if x.startswith("{")]
    assert not [ln for ln in lines if ln.get("event") == "api-unexpected-error"]
    requests = [ln for ln in lines if ln.get("event") == "http-request"]
    assert len(requests) > 300
    # the fuzzer reached the real topology too, not only 404s
    assert [ln for ln in requests if tid in ln["path"] and ln["status"] == 200]
    print(f"{len(requests)} requests: " + ", ".join(
        f"{code}×{sum(1 for ln in requests if ln['status'] == code)}" for code in sorted({ln['status'] for ln in requests})))
