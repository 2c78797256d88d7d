"""Logs and worker debugging on a real cluster with an API token, through nimbus's API and the CLI:
supervisors publish their log servers in ZooKeeper; pages, search and traversal attempts (every
form, through the whole stack); every action refused without the token; thread dumps, py-spy
profiles (and a worker killed mid-profile); event sampling on and off; a timed log level set and
put back; ``nimbus logs`` with ``--component`` and ``--follow``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import psutil
import pytest
from kazoo.client import KazooClient

from gale.cluster_state import ClusterState
from gale.layout import Layout
from gale.supervisor.profiler import py_spy_binary
from tests.cluster import ROOT, Topologies, cli, make_cluster, next_heartbeats
from tests.components import requires
from tests.test_storm_api import write_flaky
from tests.waiting import eventually, until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300),
              requires(py_spy_binary() is not None, "py-spy is not installed (a Gale dependency)")]

TOKEN = "logs-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    cluster = make_cluster(zk_server, tmp_path_factory.mktemp("logs"), supervisors=2, slots=2,
                           conf={"nimbus.api.token": TOKEN, "nimbus.host": "127.0.0.1", "logviewer.host": "127.0.0.1"})
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture(scope="module")
def running(cluster, tmp_path_factory):
    with Topologies(cluster) as topologies:
        name, tid = topologies.submit(write_flaky(tmp_path_factory.mktemp("topo")), "flaky")
        yield cluster, tid, name


def get(cluster, path, status=200, **kw):
    resp = httpx.get(cluster.nimbus_url() + path, timeout=30, trust_env=False, **kw)
    assert resp.status_code == status, (path, resp.status_code, resp.text[:400])
    return resp


def post(cluster, path, body=None, status=200, auth=True, timeout=60):
    resp = httpx.post(cluster.nimbus_url() + path, json=body if body is not None else {}, timeout=timeout,
                      trust_env=False, headers=AUTH if auth else {})
    assert resp.status_code == status, (path, resp.status_code, resp.text[:400])
    return resp.json()


def workers(cluster, tid):
    return get(cluster, f"/api/v1/topology/{tid}").json()["workers"]


def worker_running(cluster, tid, component):
    ws = [w for w in workers(cluster, tid) if w["running"] and component in w["componentNumTasks"]]
    assert ws, workers(cluster, tid)
    return ws[0]


def supervisor_infos(cluster, zk_server):
    client = KazooClient(hosts=zk_server.address)
    client.start()
    try:
        return ClusterState(client, Layout(cluster.root)).supervisor_infos()
    finally:
        client.stop()
        client.close()


def test_supervisors_publish_their_log_servers_in_zookeeper(cluster, zk_server):
    infos = supervisor_infos(cluster, zk_server)
    assert sorted(infos) == sorted(cluster.supervisor_id(i) for i in range(2))
    for info in infos.values():
        assert info.logviewer_host == "127.0.0.1" and info.logviewer_port and info.version == 1
        health = httpx.get(f"http://127.0.0.1:{info.logviewer_port}/api/v1/health", trust_env=False).json()
        assert health == {"status": "ok", "supervisor": info.assignment_id}


def test_pages_search_and_no_path_outside_the_log_directory(running):
    cluster, tid, _ = running
    # both workers run a count task; only the one counting "moon" logs the bolt's error
    counting = [w for w in workers(cluster, tid) if w["running"] and "count" in w["componentNumTasks"]]
    assert counting, workers(cluster, tid)
    for w in counting:
        listing = get(cluster, f"/api/v1/supervisor/{w['supervisorId']}/logs").json()
        assert w["logFile"] in {f["file"] for f in listing["files"]} and "supervisor.log" in {f["file"] for f in listing["files"]}

    def search(w):
        return get(cluster, f"/api/v1/supervisor/{w['supervisorId']}/log/search",
                   params={"file": w["logFile"], "search": "flaky bolt refuses"}).json()

    def logged():
        found = [(w, r) for w in counting for r in [search(w)] if r["matches"]]
        assert found, f"no error logged yet in {[w['logFile'] for w in counting]}"
        return found[0]

    w, found = eventually(logged, 60)
    sup = w["supervisorId"]
    base = f"/api/v1/supervisor/{sup}/log"
    line = found["matches"][0]
    page = get(cluster, base, params={"file": w["logFile"], "start": line["offset"], "length": 4096}).json()
    assert page["data"].startswith(line["line"]) and page["start"] == line["offset"]
    tail = get(cluster, base, params={"file": w["logFile"]}).json()
    assert tail["end"] == tail["size"] and tail["next"] is None
    # a link into the log dir that leads out of it, planted beside the worker's log
    log_root = Path(cluster.supervisor_config(int(sup[3])).storm_local_dir) / "logs"
    os.symlink("/etc/passwd", log_root / "planted.log")
    attempts = ["../../../etc/passwd", "%2e%2e/%2e%2e/etc/passwd", "..%2f..%2fetc%2fpasswd", "%252e%252e%252fetc",
                "/etc/passwd", "workers-artifacts/../../../../etc/passwd", "planted.log", "..\\..\\etc\\passwd",
                f"{w['logFile']}%00.txt", "supervisor/localstate"]
    for attempt in attempts:
        resp = httpx.get(f"{cluster.nimbus_url()}{base}?file={attempt}", trust_env=False, timeout=30)
        assert resp.status_code == 400 and sup in resp.json()["error"], (attempt, resp.text)
        raw = httpx.get(f"{cluster.nimbus_url()}{base}/raw?file={attempt}", trust_env=False, timeout=30)
        assert raw.status_code == 400 and "root:" not in raw.text, (attempt, raw.text)
    assert get(cluster, base, 404, params={"file": "workers-artifacts/nope/1/worker.log"}).json()["error"]
    assert get(cluster, "/api/v1/supervisor/no-such-sup/logs", 404).json()["error"].startswith("no live supervisor")


def test_every_action_needs_the_token(running, zk_server):
    cluster, tid, _ = running
    w = worker_running(cluster, tid, "count")
    sup, port = w["supervisorId"], w["port"]
    for path, body in ((f"/api/v1/supervisor/{sup}/workers/{port}/threaddump", {}),
                       (f"/api/v1/supervisor/{sup}/workers/{port}/profile", {"duration_secs": 1}),
                       (f"/api/v1/topology/{tid}/component/count/debug/enable/10", {}),
                       (f"/api/v1/topology/{tid}/debug/enable/10", {}),
                       (f"/api/v1/topology/{tid}/logconfig", {"namedLoggerLevels": {}})):
        assert "token" in post(cluster, path, body, status=401, auth=False)["error"]
    # the supervisor's own server refuses too (nimbus is not the only way in); reads need no token
    # (nimbus.api.read.token.required is false)
    direct = f"http://127.0.0.1:{supervisor_infos(cluster, zk_server)[sup].logviewer_port}/api/v1"
    for action in ("threaddump", "profile"):
        resp = httpx.post(f"{direct}/workers/{port}/{action}", json={}, trust_env=False, timeout=30)
        assert resp.status_code == 401 and "token" in resp.json()["error"], resp.text
    assert httpx.get(f"{direct}/logs", trust_env=False, timeout=30).status_code == 200


def test_a_thread_dump_and_a_profile_of_a_worker(running):
    cluster, tid, _ = running
    w = worker_running(cluster, tid, "count")
    sup, port = w["supervisorId"], w["port"]
    dump = post(cluster, f"/api/v1/supervisor/{sup}/workers/{port}/threaddump")
    assert dump["pid"] == w["pid"] and dump["threads"] >= 5
    assert '"executors-0"' in dump["text"] and '"heartbeat"' in dump["text"] and "run_round" in dump["text"]
    saved = get(cluster, f"/api/v1/supervisor/{sup}/log", params={"file": dump["file"], "start": 0}).json()
    assert saved["data"] == dump["text"][:len(saved["data"])]

    def profiled():
        prof = post(cluster, f"/api/v1/supervisor/{sup}/workers/{port}/profile", {"duration_secs": 2, "rate": 50})
        assert prof["samples"] > 0 and prof["file"].endswith(".svg") and prof["durationSecs"] > 1  # ran the asked 2 s (py-spy may stop a few ms short)
        raw = get(cluster, f"/api/v1/supervisor/{sup}/log/raw", params={"file": prof["file"]})
        assert raw.headers["content-type"] == "image/svg+xml" and raw.text.startswith("<?xml"), raw.text[:200]
        # py-spy samples running threads only, and this worker's executor thread runs a few percent
        # of the time (about 8,000 tuples a second): a 2 s profile can miss it, so take another
        assert "run_round" in raw.text, f"no sample of the executor thread in {prof['samples']} samples"

    eventually(profiled, 60)
    for body, why in (({"duration_secs": 0}, "out of range"), ({"duration_secs": 61}, "out of range"),
                      ({"duration_secs": 2, "rate": 251}, "out of range"), ({"duration_secs": "10"}, "whole number")):
        assert why in post(cluster, f"/api/v1/supervisor/{sup}/workers/{port}/profile", body, status=400)["error"]
    assert "no worker runs on port 1" in post(cluster, f"/api/v1/supervisor/{sup}/workers/1/threaddump", status=404)["error"]


def events_of(cluster, tid, component):
    return get(cluster, f"/api/v1/topology/{tid}/component/{component}/events", params={"limit": 500}).json()


def test_sampling_shows_a_components_tuples_until_disabled(running):
    cluster, tid, _ = running
    base = f"/api/v1/topology/{tid}/component/split/debug"
    for bad, why in (("enable/0", "out of range"), ("enable/150", "out of range"), ("enable/abc", "not a number"),
                     ("flip/10", "unknown debug action")):
        assert why in post(cluster, f"{base}/{bad}", status=400)["error"]
    assert "no component 'nope'" in post(cluster, f"/api/v1/topology/{tid}/component/nope/debug/enable/5", status=400)["error"]
    assert post(cluster, f"{base}/enable/50")["samplingPct"] == 50
    assert get(cluster, f"/api/v1/topology/{tid}/component/split").json()["samplingPct"] == 50

    def sampled():
        got = events_of(cluster, tid, "split")
        assert got["sampling"] and len(got["events"]) >= 20, got
        return got["events"]

    events = eventually(sampled, 60)
    assert all(e["component"] == "split" and e["fields"] == ["id", "word"] and isinstance(e["values"][1], str)
               for e in events)
    assert events_of(cluster, tid, "count")["events"] == []  # only what was asked for
    post(cluster, f"{base}/disable/0")

    def all_stopped():  # every split worker logged that it stopped sampling
        logs = [get(cluster, f"/api/v1/supervisor/{w['supervisorId']}/log/search",
                    params={"file": w["logFile"], "search": '"components": {}, "event": "sampling"'}).json()
                for w in workers(cluster, tid) if "split" in w["componentNumTasks"]]
        assert logs and all(log["matches"] for log in logs), logs

    eventually(all_stopped, 60)
    next_heartbeats(cluster, tid)  # the swap on the executor threads and the event log's flush are behind us
    before = len(events_of(cluster, tid, "split")["events"])
    next_heartbeats(cluster, tid)
    next_heartbeats(cluster, tid)
    assert len(events_of(cluster, tid, "split")["events"]) == before


def test_a_timed_log_level_is_set_then_put_back(running):
    cluster, tid, _ = running
    body = {"namedLoggerLevels": {"ROOT": {"target_level": "DEBUG", "timeout": 4, "components": ["count"]}}}
    view = post(cluster, f"/api/v1/topology/{tid}/logconfig", body)
    assert view["namedLoggerLevels"]["ROOT"]["target_level"] == "DEBUG"
    assert get(cluster, f"/api/v1/topology/{tid}/logconfig").json()["namedLoggerLevels"]["ROOT"]["components"] == ["count"]

    def set_then_reset():
        for w in workers(cluster, tid):
            if "count" not in w["componentNumTasks"]:
                continue
            found = get(cluster, f"/api/v1/supervisor/{w['supervisorId']}/log/search",
                        params={"file": w["logFile"], "search": '"event": "log-levels"', "max": 100}).json()
            changes = [json.loads(m["line"])["changed"] for m in found["matches"]]
            assert ["ROOT=DEBUG"] in changes and ["ROOT=INFO (reset)"] in changes, changes

    eventually(set_then_reset, 60)
    assert get(cluster, f"/api/v1/topology/{tid}/logconfig").json()["namedLoggerLevels"] == {}
    bad = {"namedLoggerLevels": {"ROOT": {"target_level": "DEBUG", "timeout": 5, "components": ["nope"]}}}
    assert "unknown components" in post(cluster, f"/api/v1/topology/{tid}/logconfig", bad, status=400)["error"]


def test_nimbus_logs_prints_and_follows_the_workers_of_a_component(running):
    cluster, tid, name = running
    count_workers = {f"{w['host']}:{w['port']}" for w in workers(cluster, tid) if "count" in w["componentNumTasks"]}
    out = cli(cluster, "logs", name, "--component", "count", "-n", "5").stdout.splitlines()
    assert out and {line.split(" | ", 1)[0] for line in out} == count_workers
    assert all(json.loads(line.split(" | ", 1)[1])["worker"] for line in out)
    refused = cli(cluster, "logs", name, "--component", "nope", check=False)
    assert refused.returncode == 1 and "no component 'nope'" in refused.stderr
    env = dict(os.environ, GALE_CONFIG=str(cluster.client_config_path()))
    proc = subprocess.Popen([sys.executable, "-m", "gale.nimbus.cli", "logs", name, "--component", "count", "-n", "1",
                             "--follow"], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        first = until(lambda: len(lines) >= len(count_workers) and len(lines), 30)
        # the flaky bolt logs its refusals all the time: the followed log grows
        until(lambda: len(lines) > first, 60, lambda: f"{len(lines)} lines")
        assert all(" | " in line for line in lines)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


def test_a_profile_of_a_worker_that_exits_midway_says_so(running):
    cluster, tid, _ = running
    w = worker_running(cluster, tid, "sentences")
    result: dict = {}

    def profile():
        result["resp"] = httpx.post(f"{cluster.nimbus_url()}/api/v1/supervisor/{w['supervisorId']}/workers/{w['port']}/profile",
                                    json={"duration_secs": 30, "rate": 20}, headers=AUTH, timeout=90, trust_env=False)

    thread = threading.Thread(target=profile)
    thread.start()

    def spying():
        return [p for p in psutil.process_iter(["cmdline"]) if "py-spy" in " ".join(p.info["cmdline"] or [])
                and str(w["pid"]) in (p.info["cmdline"] or [])]

    until(spying, 30)
    os.kill(w["pid"], signal.SIGKILL)
    thread.join(60)
    resp = result["resp"]
    assert resp.status_code == 409, resp.text
    body = resp.json()
    assert body["workerExited"] is True and f"pid {w['pid']}" in body["error"] and "exited" in body["error"]
