"""End to end: a real Prometheus server (Debian's) finds every daemon and worker of a running
cluster through nimbus's HTTP service discovery, scrapes them, and its HTTP API answers rates > 0."""

from __future__ import annotations

import shutil
import subprocess

import httpx
import pytest
import yaml

from tests.cluster import cli, dump_logs, make_cluster
from tests.components import requires
from tests.servers import start_on_free_port, wait_listening
from tests.test_storm_api import write_flaky
from tests.waiting import eventually, until

PROMETHEUS = shutil.which("prometheus")

pytestmark = [
    pytest.mark.cluster, pytest.mark.timeout(240),
    requires(PROMETHEUS is not None, "the Debian prometheus package is not installed (make test installs it)"),
]


@pytest.fixture
def prometheus(tmp_path):
    """Start Prometheus with a given config; stopped (and its data removed) even if the test fails."""
    procs = []

    def start(config: dict) -> str:
        path = tmp_path / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        log_path = tmp_path / "prometheus.log"

        def start_on(reservation) -> str:
            log = open(log_path, "ab")
            offset = log.tell()
            proc = subprocess.Popen([PROMETHEUS, f"--config.file={path}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                     f"--web.listen-address=127.0.0.1:{reservation.port}", "--log.level=warn"],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            procs.append((proc, log, reservation))
            # this Prometheus listens (not another server on the port), then answers ready
            wait_listening(proc, reservation.port, 30, "prometheus", lambda: log_path.read_text()[offset:])
            url = f"http://127.0.0.1:{reservation.port}"

            def ready():
                assert proc.poll() is None, f"prometheus exited: {log_path.read_text()[-2000:]}"
                assert httpx.get(f"{url}/-/ready", timeout=2).status_code == 200

            eventually(ready, 30, retry_on=(AssertionError, httpx.HTTPError))
            return url

        return start_on_free_port(start_on)

    yield start
    for proc, log, reservation in procs:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        reservation.release()


def query(url: str, promql: str) -> list[dict]:
    resp = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert resp["status"] == "success", resp
    return resp["data"]["result"]


def test_prometheus_scrapes_every_daemon_through_service_discovery(zk_server, tmp_path, prometheus):
    cluster = make_cluster(zk_server, tmp_path, supervisors=2, slots=2)
    cluster.start()
    try:
        tid = cli(cluster, "submit", str(write_flaky(tmp_path / "topo")), "--name", "flaky", "--wait").stdout.strip()
        url = prometheus({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{
                "job_name": "gale",
                "http_sd_configs": [{"url": f"{cluster.nimbus_url()}/api/v1/prometheus/targets",
                                     "refresh_interval": "1s"}],
            }],
        })

        def all_up():
            targets = httpx.get(f"{url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
            up = [t["labels"] for t in targets if t["health"] == "up"]
            kinds = sorted(t["daemon"] for t in up)
            return up if kinds == ["nimbus", "supervisor", "supervisor", "worker", "worker"] else None

        up = until(all_up, 60)
        workers = [t for t in up if t["daemon"] == "worker"]
        assert {t["topology"] for t in workers} == {tid}
        assert sorted(t["supervisor"] for t in workers) == sorted(cluster.supervisor_id(i) for i in range(2))

        def rate(promql: str) -> float:
            result = query(url, promql)
            return float(result[0]["value"][1]) if result else 0.0

        # tuples flow: Prometheus computes rates from its own scrapes of the workers; every figure
        # is as of Prometheus's latest scrapes, so each is waited for as asserted
        def tuples_flow():
            assert rate('sum(rate(gale_worker_tuples_acked_total{component="sentences"}[5s]))') > 0
            assert rate('sum(rate(gale_worker_tuples_emitted_total{topology="%s"}[5s]))' % tid) > 0
            assert rate('sum(rate(gale_worker_tuples_failed_total{reason="explicit"}[10s]))') > 0
            mean_latency = rate("sum(rate(gale_worker_complete_latency_seconds_sum[10s])) / "
                                "sum(rate(gale_worker_complete_latency_seconds_count[10s]))")
            assert 0 < mean_latency < 10, mean_latency

        eventually(tuples_flow, 60)

        def daemons():  # nimbus and supervisors
            assert rate("gale_cluster_supervisors") == 2
            assert rate('sum(gale_cluster_slots{state="used"})') == 2
            assert rate('sum(gale_supervisor_slots{state="running"})') == 2
            assert rate("gale_nimbus_is_leader") == 1
            assert rate("increase(gale_nimbus_scheduling_rounds_total[10s])") > 0
            assert rate('sum(gale_supervisor_worker_launches_total{reason="new"})') == 2

        eventually(daemons, 30)
    except BaseException:
        print(dump_logs(cluster))
        raise
    finally:
        cluster.cleanup()
