"""Storm REST shapes built from a synthetic snapshot (no I/O), and the live API's edges with an
in-process nimbus: correlation ids on log lines, bad input refused with 4xx JSON, the OpenAPI
document covering every route, the API token."""

from __future__ import annotations

import io
import json

import httpx
import pytest

from gale import log as glog
from gale.bundle import make_bundle
from gale.config import defaults
from gale.records import Assignment, ErrorInfo, ExecutorStats, StormBase, TopologyStatus
from gale.topology.builder import TopologyBuilder
from gale.topology.definition import TopologyTasks, component_parallelism
from gale.topology.loader import load_topology_file
from gale.nimbus.storm_api import build
from gale.config_keys import Config
from tests.cluster import DURABLE_WC
from tests.topologies import Identity, ListSpout
from tests.waiting import eventually, until

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

NOW = 1_800_000_000.0


# ----------------------------------------------------------------------------- pure builders


def w(**by_window):
    """{"600": {...}, ":all-time": {...}} from keyword windows w600= / all=."""
    return {("600" if k == "w600" else ":all-time"): v for k, v in by_window.items()}


def snapshot() -> build.TopologySnapshot:
    b = TopologyBuilder()
    b.set_spout("words", ListSpout, 2)
    b.set_bolt("split", Identity, 2).shuffle_grouping("words")
    conf = {**defaults(), "topology.workers": 2, "topology.acker.executors": 1}
    defn = b.create_topology(name="t", conf={"topology.workers": 2}).definition
    parallelism = component_parallelism(defn, conf, 2)
    layout = TopologyTasks(defn, conf, 2, parallelism)
    # tasks: __acker 1, split 2-3, words 4-5 (sorted component ids, numbered from 1)
    assert layout.component_executors == {"__acker": [(1, 1)], "split": [(2, 2), (3, 3)], "words": [(4, 4), (5, 5)]}
    placements = {(1, 1): ("n1", 6700), (2, 2): ("n1", 6700), (4, 4): ("n1", 6700), (3, 3): ("n2", 6701),
                  (5, 5): ("n2", 6701)}
    assignment = Assignment.build(master_code_dir="/x", code_checksum="0" * 64, node_host={"n1": "h1", "n2": "h2"},
                                  executor_node_port=placements,
                                  executor_start_time_secs={ex: int(NOW) - 65 for ex in placements})
    worker1 = {"host": "h1", "port": 6700, "pid": 11, "worker_id": "w1", "uptime_secs": 64, "log": "/logs/6700/worker.log",
               "heartbeat_secs": NOW - 1, "metrics_port": 7700}
    spout = dict(
        component="words", kind="spout",
        emitted=w(w600={"default": 100}, all={"default": 300}),
        transferred=w(w600={"default": 100}, all={"default": 300}),
        acked=w(w600={"default": 90}, all={"default": 280}), failed=w(w600={"default": 4}, all={"default": 10}),
        complete_ms_avg=w(w600={"default": 10.0}, all={"default": 12.0}), pending=6, extra={"timed_out": 1},
    )
    stats = {
        "4-4": (ExecutorStats(**spout), "n1", 6700, worker1),
        "5-5": (ExecutorStats(**{**spout, "complete_ms_avg": w(w600={"default": 20.0}, all={"default": 12.0}),
                                 "acked": w(w600={"default": 30}, all={"default": 280})}), "n2", 6701,
                {**worker1, "host": "h2", "port": 6701, "pid": 12, "log": "/logs/6701/worker.log"}),
        "2-2": (ExecutorStats(
            component="split", kind="bolt",
            emitted=w(w600={"default": 50, "__tick": 3}, all={"default": 150}),
            transferred=w(w600={"default": 0}, all={"default": 0}),
            executed=w(w600={"words:default": 50, "__system:__tick": 2}, all={"words:default": 150}),
            acked=w(w600={"words:default": 48}, all={"words:default": 148}),
            failed=w(w600={"words:default": 2}, all={"words:default": 2}),
            execute_ms_avg=w(w600={"words:default": 1.0}, all={"words:default": 1.0}),
            process_ms_avg=w(w600={"words:default": 2.0}, all={"words:default": 2.0}),
            capacity=0.25, queue_depth=7), "n1", 6700, worker1),
        "1-1": (ExecutorStats(component="__acker", kind="bolt", executed=w(w600={"__acker:messages": 500})),
                "n1", 6700, worker1),
    }
    base = StormBase(name="t", status=TopologyStatus.ACTIVE, num_workers=2, component_executors=parallelism,
                     launch_time_secs=int(NOW) - 125)
    errors = {"split": [ErrorInfo(error="Traceback...\nValueError: newest", error_time_secs=int(NOW) - 5,
                                  host="h1", port=6700),
                        ErrorInfo(error="ValueError: older", error_time_secs=int(NOW) - 50, host="h1", port=6700)]}
    return build.TopologySnapshot(id="t-1-1", base=base, assignment=assignment, defn=defn, config=Config.resolve(conf, allow_user_keys=True), layout=layout,
                                  stats=stats, errors=errors, now=NOW)


def test_pretty_durations_and_windows_are_storms():
    assert build.pretty_secs(358) == "5m 58s"
    assert build.pretty_secs(0) == "0s"
    assert [build.window_hint(x) for x in ("600", "10800", "86400", ":all-time")] == [
        "10m 0s", "3h 0m 0s", "1d 0h 0m 0s", "All time"]
    assert build.f3(0.0484) == "0.048" and build.executor_label("2-4") == "[2-4]"


def test_topology_page_sums_spouts_for_trees_and_every_component_for_emits():
    page = build.topology_view(snapshot(), "600")
    stats = {s["window"]: s for s in page["topologyStats"]}
    assert list(stats) == ["600", "10800", "86400", ":all-time"]
    # acked/failed/complete latency: spouts only (tuple trees); emitted: every non-system component
    assert stats["600"]["acked"] == 120 and stats["600"]["failed"] == 8
    assert stats["600"]["emitted"] == 100 + 100 + 50  # the bolt's "__tick" stream is a system stream
    assert stats["600"]["completeLatency"] == f"{(10.0 * 90 + 20.0 * 30) / 120:.3f}"  # weighted by acked
    assert stats["10800"]["emitted"] == 0  # nothing reported for that window
    (spout,) = page["spouts"]
    assert spout["spoutId"] == "words" and spout["executors"] == 2 and spout["tasks"] == 2
    assert spout["lastError"] == "" and spout["errorPort"] is None
    assert [b["boltId"] for b in page["bolts"]] == ["split"]  # __acker only with sys
    bolt = page["bolts"][0]
    assert (bolt["executed"], bolt["acked"], bolt["failed"], bolt["capacity"]) == (50, 48, 2, "0.250")
    assert bolt["executeLatency"] == "1.000" and bolt["processLatency"] == "2.000"
    assert bolt["lastError"].endswith("ValueError: newest") and bolt["errorHost"] == "h1" and bolt["errorPort"] == 6700
    assert bolt["errorTime"] == int(NOW) - 5 and bolt["errorLapsedSecs"] == 5
    assert bolt["errorWorkerLogLink"] == "/logs/6700/worker.log"
    assert page["uptime"] == "2m 5s" and page["workersTotal"] == 2 and page["executorsTotal"] == 5
    workers = {wk["port"]: wk for wk in page["workers"]}
    assert workers[6700]["componentNumTasks"] == {"__acker": 1, "split": 1, "words": 1}
    assert workers[6700]["workerLogLink"] == "/logs/6700/worker.log" and workers[6700]["supervisorId"] == "n1"
    assert sum(sum(wk["componentNumTasks"].values()) for wk in page["workers"]) == page["tasksTotal"]
    assert "__acker" in [b["boltId"] for b in build.topology_view(snapshot(), "600", sys=True)["bolts"]]


def test_component_page_inputs_outputs_executors_and_errors():
    snap = snapshot()
    bolt = build.component_view(snap, "split", "600")
    assert bolt["componentType"] == "bolt" and [s["window"] for s in bolt["boltStats"]][-1] == ":all-time"
    assert bolt["inputStats"] == [{"component": "words", "encodedComponentId": "words", "stream": "default",
                                   "executed": 50, "acked": 48, "failed": 2, "executeLatency": "1.000",
                                   "processLatency": "2.000"}]
    assert [o["stream"] for o in bolt["outputStats"]] == ["default"]  # __tick hidden
    ex = {e["id"]: e for e in bolt["executorStats"]}
    assert set(ex) == {"[2-2]", "[3-3]"}
    assert ex["[2-2]"]["running"] and ex["[2-2]"]["uptimeSeconds"] == 65 and ex["[2-2]"]["uptime"] == "1m 5s"
    assert ex["[2-2]"]["host"] == "h1" and ex["[2-2]"]["port"] == 6700 and ex["[2-2]"]["queueDepth"] == 7
    assert not ex["[3-3]"]["running"] and ex["[3-3]"]["host"] == "h2" and ex["[3-3]"]["uptimeSeconds"] == 0
    errors = bolt["componentErrors"]
    assert [e["errorTime"] for e in errors] == [int(NOW) - 5, int(NOW) - 50]  # newest first
    assert set(errors[0]) >= {"errorTime", "errorHost", "errorPort", "error", "errorLapsedSecs", "errorWorkerLogLink"}
    spout = build.component_view(snap, "words", "600")
    assert spout["outputStats"] == [{"stream": "default", "emitted": 200, "transferred": 200, "acked": 120,
                                     "failed": 8, "completeLatency": f"{(10.0 * 90 + 20.0 * 30) / 120:.3f}"}]
    assert {e["id"]: e["pending"] for e in spout["executorStats"]} == {"[4-4]": 6, "[5-5]": 6}
    with pytest.raises(Exception, match="has no component 'nope'"):
        build.component_view(snap, "nope", "600")


def test_metrics_per_stream_and_gale_workers():
    snap = snapshot()
    m = build.topology_metrics_view(snap, "600")
    (bolt,) = m["bolts"]
    assert bolt["executed"] == [{"component_id": "words", "stream_id": "default", "value": 50}]
    assert bolt["executed_ms_avg"] == [{"component_id": "words", "stream_id": "default", "value": "1.000"}]
    assert m["spouts"][0]["acked"] == [{"stream_id": "default", "value": 120}]
    workers = {wk["port"]: wk for wk in build.gale_workers(snap, "600")}
    assert workers[6700]["stats"]["emitted"] == 100 + 50 + 3  # Gale's view includes system streams
    assert workers[6700]["stats"]["spout_acked"] == 90 and workers[6701]["stats"]["spout_acked"] == 30
    assert workers[6701]["executors"] == ["3-3", "5-5"] and workers[6701]["log"] == "/logs/6701/worker.log"


# ----------------------------------------------------------------------------- the live API, in-process


@pytest.fixture
def nimbus_server(conf):
    from gale.nimbus.serve import NimbusServer

    c = dict(conf)
    c.update({"nimbus.http.port": 0, "nimbus.host": "127.0.0.1", "storm.local.hostname": "127.0.0.1",
              "nimbus.monitor.freq.secs": 1})
    buf = io.StringIO()
    glog.configure(fmt="json", stream=buf)
    server = NimbusServer(Config.resolve(c, allow_user_keys=False))
    server.start()
    server.log = buf
    until(server.nimbus.is_leader, 20, "in-process nimbus did not become leader")
    try:
        yield server
    finally:
        server.stop()
        glog.configure(fmt="console")


def submit_durable_wc(base: str, name: str = "wc") -> str:
    topo = load_topology_file(DURABLE_WC, defaults())
    bundle = make_bundle(DURABLE_WC.parent, topo.to_json(), {"topology.workers": 1})
    resp = httpx.post(f"{base}/api/v1/topologies", params={"name": name}, content=bundle, timeout=30,
                      headers={"Content-Type": "application/gzip"})
    assert resp.status_code == 200, resp.text
    return resp.json()["id"]


def log_lines(server) -> list[dict]:
    return [json.loads(line) for line in server.log.getvalue().splitlines() if line.startswith("{")]


def _with_event(lines: list[dict], event: str) -> list[dict]:
    assert [ln for ln in lines if ln["event"] == event], f"no {event} line yet"
    return lines


def test_request_and_round_ids_correlate_every_line_of_an_action(nimbus_server):
    base = f"http://127.0.0.1:{nimbus_server.http.port}"
    tid = submit_durable_wc(base)
    resp = httpx.post(f"{base}/api/v1/topology/{tid}/deactivate", headers={"X-Request-Id": "req-deact-1", **JSON})
    assert resp.status_code == 200 and resp.headers["x-request-id"] == "req-deact-1"
    assert resp.json() == {"topologyOperation": "deactivate", "topologyId": tid, "status": "success"}
    generated = httpx.get(f"{base}/api/v1/topology/summary").headers["x-request-id"]
    assert len(generated) == 16  # a fresh id when the caller sends none (or a malformed one)
    assert httpx.get(f"{base}/api/v1/health", headers={"X-Request-Id": "bad id with spaces"}).headers[
        "x-request-id"] != "bad id with spaces"
    assert httpx.post(f"{base}/api/v1/topology/{tid}/kill/0", headers={"X-Request-Id": "req-kill-1", **JSON}).status_code == 200
    until(lambda: not httpx.get(f"{base}/api/v1/topology/summary").json()["topologies"], 15,
          "the killed topology was not removed")
    # the removal's log line is written by the round that removed it, around the removal itself
    lines = eventually(lambda: _with_event(log_lines(nimbus_server), "topology-removed"), 10)
    action = [ln for ln in lines if ln.get("request_id") == "req-deact-1"]
    assert {ln["event"] for ln in action} >= {"topology-deactivated", "http-request"}
    assert all(ln.get("topology") == tid for ln in action if ln["event"] == "topology-deactivated")
    submit_lines = [ln for ln in lines if ln["event"] in ("topology-submitted", "assignment-written")
                    and ln.get("request_id")]
    assert submit_lines and len({ln["request_id"] for ln in submit_lines}) == 1  # submit + its first schedule
    # the removal happens in a scheduling round: its lines carry that round's id, not a request's
    (removed,) = [ln for ln in lines if ln["event"] == "topology-removed"]
    assert removed["topology"] == tid and len(removed["round_id"]) == 12 and "request_id" not in removed
    assert [ln for ln in lines if ln["event"] == "topology-killed"][0]["request_id"] == "req-kill-1"


JSON = {"Content-Type": "application/json"}  # what the CLI and the web UI send with every action

BAD_REQUESTS = [
    ("GET", "/api/v1/topology/nope", None, {}, 404, "no topology named 'nope'"),
    ("GET", "/api/v1/topology/{tid}?window=7", None, {}, 422, "window"),
    ("GET", "/api/v1/topology/{tid}?sys=maybe", None, {}, 422, "sys"),
    ("GET", "/api/v1/topology/{tid}/component/nope", None, {}, 404, "has no component 'nope'"),
    ("GET", "/api/v1/supervisor", None, {}, 404, "pass ?id="),
    ("GET", "/api/v1/supervisor?id=ghost", None, {}, 404, "no live supervisor"),
    ("GET", "/api/v1/topology/" + "x" * 300, None, {}, 422, "id"),
    ("POST", "/api/v1/topology/{tid}/kill/-1", None, JSON, 422, "wait_time"),
    ("POST", "/api/v1/topology/{tid}/kill/abc", None, JSON, 422, "wait_time"),
    ("POST", "/api/v1/topology/{tid}/rebalance/99999999", None, JSON, 422, "wait_time"),
    ("POST", "/api/v1/topology/{tid}/kill/0", b"a=1", {"Content-Type": "application/x-www-form-urlencoded"}, 415,
     "application/json"),
    ("POST", "/api/v1/topology/{tid}/rebalance/0", b"{not json", {"Content-Type": "application/json"}, 422, "JSON"),
    ("POST", "/api/v1/topology/{tid}/rebalance/0", b'{"rebalanceOptions": {"executors": {"split": 0}}}',
     {"Content-Type": "application/json"}, 422, "executors"),
    ("POST", "/api/v1/topology/{tid}/rebalance/0", b'{"rebalanceOptions": {"executors": {"nope": 2}}}',
     {"Content-Type": "application/json"}, 400, "unknown component 'nope'"),
    ("POST", "/api/v1/topology/{tid}/rebalance/0", b'{"rebalanceOptions": {"numWorkers": "lots"}}',
     {"Content-Type": "application/json"}, 422, "numWorkers"),
    ("POST", "/api/v1/topologies/{tid}/kill", b'{"wait_secs": -5}', {"Content-Type": "application/json"}, 422,
     "wait_secs"),
    ("POST", "/api/v1/topologies/{tid}/kill", b"[1, 2", {"Content-Type": "application/json"}, 422, "JSON"),
    ("POST", "/api/v1/topologies/{tid}/kill", b"x" * (2 * 1024 * 1024), {"Content-Type": "application/json"}, 413,
     "exceeds the limit"),
    ("POST", "/api/v1/topologies?name=big", b"", {"Content-Length": str(10 ** 12), "Content-Type": "application/gzip"},
     413, "exceeds"),
    ("POST", "/api/v1/topologies?name=junk", b"not a gzip", {"Content-Type": "application/gzip"}, 400,
     "invalid code bundle"),
    ("POST", "/api/v1/topologies?name=bad%20name", b"x", {"Content-Type": "application/gzip"}, 400,
     "invalid topology name"),
    ("GET", "/ui/../../etc/passwd", None, {}, 404, ""),
    ("GET", "/ui/app.exe", None, {}, 404, "no UI asset"),
    ("DELETE", "/api/v1/topology/{tid}", None, JSON, 405, ""),
]


def test_bad_requests_get_4xx_json_that_says_what_is_wrong(nimbus_server):
    base = f"http://127.0.0.1:{nimbus_server.http.port}"
    tid = submit_durable_wc(base)
    for method, path, body, headers, status, message in BAD_REQUESTS:
        url = base + path.replace("{tid}", tid)
        if "Content-Length" in headers:  # a declared size alone must be refused before any byte is read
            resp = _raw(nimbus_server.http.port, method, path, headers)
        else:
            resp = httpx.request(method, url, content=body, headers=headers, timeout=30)
        assert resp.status_code == status, (method, path, resp.status_code, resp.text[:300])
        if status != 404 or message:
            assert resp.headers["content-type"].startswith("application/json"), (path, resp.headers)
            assert message in resp.json()["error"], (path, resp.json())
    # a chunked body without Content-Length is cut off at the limit as well
    def chunks():
        for _ in range(40):
            yield b"y" * 65536

    resp = httpx.post(f"{base}/api/v1/topologies/{tid}/kill", content=chunks(),
                      headers={"Content-Type": "application/json"}, timeout=30)
    assert resp.status_code == 413 and "exceeds the limit" in resp.json()["error"]
    # nothing above broke the daemon or the topology
    assert httpx.get(f"{base}/api/v1/health").json()["leader"] is True
    assert httpx.get(f"{base}/api/v1/topology/{tid}").json()["status"] == "ACTIVE"
    # an action the topology's status does not allow: 409 saying which status
    assert httpx.post(f"{base}/api/v1/topology/{tid}/kill/300", json={}).status_code == 200
    resp = httpx.post(f"{base}/api/v1/topology/{tid}/activate", json={})
    assert resp.status_code == 409 and resp.json()["error"] == "cannot activate topology 'wc': it is KILLED"
    assert not [ln for ln in log_lines(nimbus_server) if ln["event"] == "api-unexpected-error"]


def _raw(port: int, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        s.sendall((head + "Connection: close\r\n\r\n").encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    raw_headers, _, body = rest.partition(b"\r\n\r\n")
    hdrs = dict(line.decode().split(": ", 1) for line in raw_headers.split(b"\r\n") if b": " in line)
    return httpx.Response(int(status_line.split()[1]), headers=hdrs, content=body)


def test_openapi_describes_every_route(nimbus_server):
    base = f"http://127.0.0.1:{nimbus_server.http.port}"
    doc = httpx.get(f"{base}/openapi.json").json()
    paths = doc["paths"]
    for path in ["/api/v1/cluster/summary", "/api/v1/cluster/configuration", "/api/v1/nimbus/summary",
                 "/api/v1/supervisor/summary", "/api/v1/supervisor", "/api/v1/topology/summary",
                 "/api/v1/topology/{id}", "/api/v1/topology/{id}/metrics",
                 "/api/v1/topology/{id}/component/{component}", "/api/v1/topology-workers/{id}",
                 "/api/v1/topology/{id}/activate", "/api/v1/topology/{id}/deactivate",
                 "/api/v1/topology/{id}/rebalance/{wait_time}", "/api/v1/topology/{id}/kill/{wait_time}",
                 "/api/v1/topologies", "/api/v1/topologies/{name}", "/api/v1/topologies/{name}/workers",
                 "/api/v1/topologies/{name}/components/{component}", "/api/v1/cluster", "/api/v1/health",
                 "/metrics", "/api/v1/prometheus/targets", "/", "/topology.html", "/component.html",
                 "/supervisor.html"]:
        assert path in paths, path
    page = doc["components"]["schemas"]["TopologyPage"]["properties"]
    assert {"topologyStats", "spouts", "bolts", "workers", "msgTimeout"} <= set(page)
    bolt = doc["components"]["schemas"]["BoltRow"]["properties"]
    assert {"capacity", "executeLatency", "processLatency", "executed", "errorHost", "errorPort"} <= set(bolt)
    # errors are documented as the JSON error body, not FastAPI's default validation shape
    op = paths["/api/v1/topology/{id}"]["get"]
    assert op["responses"]["4XX"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    assert "422" not in op["responses"]


def test_api_token_guards_actions_but_not_reads(conf):
    from gale.nimbus.serve import NimbusServer

    c = dict(conf)
    c.update({"nimbus.http.port": 0, "nimbus.host": "127.0.0.1", "nimbus.api.token": "s3cret"})
    server = NimbusServer(Config.resolve(c, allow_user_keys=False))
    server.start()
    try:
        base = f"http://127.0.0.1:{server.http.port}"
        assert httpx.get(f"{base}/api/v1/topology/summary").status_code == 200
        assert httpx.get(f"{base}/metrics").status_code == 200
        resp = httpx.post(f"{base}/api/v1/topology/x/kill/0", json={})
        assert resp.status_code == 401 and "Authorization: Bearer" in resp.json()["error"]
        resp = httpx.post(f"{base}/api/v1/topology/x/kill/0", headers={"Authorization": "Bearer s3cret", **JSON})
        assert resp.status_code in (404, 409)  # past the token check
        conf_doc = httpx.get(f"{base}/api/v1/cluster/configuration").json()
        assert conf_doc["nimbus.api.token"] == "<hidden>"
    finally:
        server.stop()


def test_topology_page_checkpoints_of_a_stateful_topology():
    assert build.topology_view(snapshot(), "600")["checkpoints"] is None  # no state, no checkpoints
    summaries = {
        "$checkpointspout": {"extra": {"checkpoint_txid_max": 12, "checkpoints_committed": 12,
                                       "checkpoint_failures": 2, "checkpoint_duration_ms": 8.25,
                                       "checkpoint_commit_time_secs": NOW - 3.4, "checkpoint_rollbacks": 1,
                                       "checkpoint_generation": 2}},
        "count": {"extra": {"state_bytes_written": 4096}}, "split": {"extra": {}}, "sentences": {},
    }
    assert build.checkpoint_view(summaries, NOW) == {
        "txid": 12, "committed": 12, "failures": 2, "lastDurationMs": "8.250", "lastCommitTime": NOW - 3.4,
        "lastCommitAgeSecs": 3, "stateBytesWritten": 4096, "rollbacks": 1, "generation": 2}
    fresh = build.checkpoint_view({"$checkpointspout": {"extra": {}}}, NOW)
    assert fresh["lastCommitAgeSecs"] is None and fresh["txid"] == 0
