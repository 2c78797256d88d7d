"""Storm UI's REST API against a real cluster: Storm's paths, field names and meanings, with
numbers that agree with each other (checked while the topology is deactivated, so they hold
still), errors with time/host/port, Storm's POST actions, and Gale's per-worker view.

Every figure comes from worker heartbeats, which arrive after the events they count (a bolt's
``lastError`` is written before the heartbeat carrying its ``failed`` count): each test retries
its whole assertion block with ``eventually`` instead of waiting for one field and reading another.
The read-only tests share one topology nobody changes; the tests that act (deactivate, rebalance,
kill) submit their own and kill it when they end, pass or fail."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.cluster import Topologies, cli, make_cluster, next_heartbeats
from tests.waiting import eventually, until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

#: a reliable word count whose counting bolt fails (raises on) the word "moon" of every 97th sentence
FLAKY_SOURCE = '''
import itertools, time
from gale import BasicBolt, Bolt, Spout, TopologyBuilder

WORDS = "the cow jumped over the moon an apple a day keeps the doctor away".split()


class Sentences(Spout):
    def declare_output_fields(self, d):
        d.declare(["id", "sentence"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.ids = itertools.count()

    def next_tuple(self):
        i = next(self.ids)
        self.collector.emit([i, " ".join(WORDS[(i + k) % len(WORDS)] for k in range(4))], msg_id=i)
        if i % 20 == 19:
            time.sleep(0.01)  # workload pacing, not a wait: about 2000 sentences a second


class Split(BasicBolt):
    def declare_output_fields(self, d):
        d.declare(["id", "word"])

    def execute(self, tup):
        for w in tup["sentence"].split():
            self.collector.emit([tup["id"], w])


class Count(Bolt):
    def declare_output_fields(self, d):
        d.declare(["word", "n"])

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.n = {}

    def execute(self, tup):
        if tup["id"] % 97 == 0 and tup["word"] == "moon":
            raise ValueError(f"flaky bolt refuses sentence {tup['id']}")
        w = tup["word"]
        self.n[w] = self.n.get(w, 0) + 1
        self.collector.emit([w, self.n[w]], anchors=tup)
        self.collector.ack(tup)


def topology(conf=None):
    b = TopologyBuilder()
    b.set_spout("sentences", Sentences, 1)
    b.set_bolt("split", Split, 2).shuffle_grouping("sentences")
    b.set_bolt("count", Count, 2).fields_grouping("split", ["word"])
    return b.create_topology(conf={"topology.workers": 2, "topology.max.spout.pending": 300})
'''


def write_flaky(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "flaky.py"
    path.write_text(FLAKY_SOURCE)
    return path


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory):
    base = tmp_path_factory.mktemp("storm-api")
    cluster = make_cluster(zk_server, base, supervisors=2, slots=2)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture(scope="module")
def running(cluster, tmp_path_factory):
    """The read-only tests' topology: (cluster, id, name); nobody acts on it."""
    with Topologies(cluster) as topologies:
        name, tid = topologies.submit(write_flaky(tmp_path_factory.mktemp("topo")), "flaky")
        yield cluster, tid, name


@pytest.fixture
def topologies(cluster):
    with Topologies(cluster) as t:
        yield t


def get(cluster, path: str, status: int = 200):
    resp = httpx.get(cluster.nimbus_url() + path, timeout=15)
    assert resp.status_code == status, (path, resp.status_code, resp.text[:500])
    return resp.json()


def post(cluster, path: str, json=None):
    resp = httpx.post(cluster.nimbus_url() + path, json=json if json is not None else {}, timeout=15)
    assert resp.status_code == 200, (path, resp.status_code, resp.text[:500])
    return resp.json()


def test_cluster_nimbus_and_supervisor_summaries(running):
    cluster, tid, name = running

    def summaries():
        c = get(cluster, "/api/v1/cluster/summary")
        assert (c["supervisors"], c["topologies"], c["slotsTotal"], c["slotsUsed"], c["slotsFree"]) == (2, 1, 4, 2, 2)
        assert c["executorsTotal"] == 7 and c["tasksTotal"] == 7 and c["stormVersion"]  # 1+2+2 + 2 ackers
        (n,) = get(cluster, "/api/v1/nimbus/summary")["nimbuses"]
        assert n["status"] == "Leader" and n["port"] == cluster.nimbus_ports[0] and n["nimbusUpTimeSeconds"] >= 0
        sups = get(cluster, "/api/v1/supervisor/summary")["supervisors"]
        assert sorted(s["id"] for s in sups) == sorted(cluster.supervisor_id(i) for i in range(2))
        assert all(s["slotsTotal"] == 2 and s["uptime"].endswith("s") and s["metricsPort"] for s in sups)
        assert sum(s["slotsUsed"] for s in sups) == 2
        (t,) = get(cluster, "/api/v1/topology/summary")["topologies"]
        assert (t["id"], t["name"], t["status"], t["workersTotal"], t["executorsTotal"], t["tasksTotal"]) == (
            tid, name, "ACTIVE", 2, 7, 7)
        assert t["replicationCount"] == 1 and t["uptimeSeconds"] >= 0
        page = get(cluster, f"/api/v1/supervisor?id={cluster.supervisor_id(0)}")
        assert [s["id"] for s in page["supervisors"]] == [cluster.supervisor_id(0)]
        (worker,) = page["workers"]
        assert worker["topologyId"] == tid and worker["port"] in cluster.supervisor_confs[0]["supervisor.slots.ports"]
        hp = get(cluster, f"/api/v1/topology-workers/{tid}")["hostPortList"]
        assert sorted(h["port"] for h in hp) == sorted(w["port"] for w in get(cluster, f"/api/v1/topology/{tid}")["workers"])

    eventually(summaries, 60)


def test_topology_page_has_storms_fields_and_errors_with_time_host_port(running):
    cluster, tid, name = running

    def topology_page():
        page = get(cluster, f"/api/v1/topology/{tid}?window=600")
        assert page["window"] == "600" and page["windowHint"] == "10m 0s" and page["msgTimeout"] == 10
        assert [s["window"] for s in page["topologyStats"]] == ["600", "10800", "86400", ":all-time"]
        assert [s["windowPretty"] for s in page["topologyStats"]] == ["10m 0s", "3h 0m 0s", "1d 0h 0m 0s", "All time"]
        (spout,) = page["spouts"]
        assert spout["spoutId"] == "sentences" and spout["emitted"] > 0 and spout["acked"] > 0
        assert float(spout["completeLatency"]) > 0
        bolts = {b["boltId"]: b for b in page["bolts"]}
        assert set(bolts) == {"split", "count"}  # __acker only with sys=1
        for b in bolts.values():
            assert b["executed"] > 0 and 0 <= float(b["capacity"]) < 5
            assert float(b["executeLatency"]) >= 0 and float(b["processLatency"]) >= 0
        count = bolts["count"]
        assert count["failed"] > 0 and "ValueError: flaky bolt refuses sentence" in count["lastError"], count
        worker_ports = {w["port"] for w in page["workers"]}
        assert count["errorHost"] == "127.0.0.1" and count["errorPort"] in worker_ports
        assert page["uptimeSeconds"] + 5 >= count["errorLapsedSecs"] >= 0
        assert abs(time.time() - count["errorLapsedSecs"] - count["errorTime"]) < 5
        assert Path(count["errorWorkerLogLink"]).is_file()
        assert bolts["split"]["lastError"] == "" and bolts["split"]["errorTime"] is None
        assert len(page["workers"]) == 2
        for w in page["workers"]:
            assert w["running"] and w["uptimeSeconds"] >= 0 and Path(w["workerLogPath"]).is_file()
            assert w["workerLogPath"].endswith(f"workers-artifacts/{tid}/{w['port']}/worker.log")
        assert sum(sum(w["componentNumTasks"].values()) for w in page["workers"]) == page["tasksTotal"]
        assert page["configuration"]["topology.max.spout.pending"] == 300
        assert "topology.secret" not in page["configuration"]

    eventually(topology_page, 90)
    with_sys = get(cluster, f"/api/v1/topology/{tid}?sys=1")
    assert "__acker" in {b["boltId"] for b in with_sys["bolts"]}
    # by name works too, and unknown ids are a 404 with the running names
    assert get(cluster, f"/api/v1/topology/{name}")["id"] == tid
    error = get(cluster, "/api/v1/topology/nope", 404)["error"]
    assert "no topology named 'nope'" in error and f"'{name}'" in error, error


def test_component_pages(running):
    cluster, tid, _name = running

    def count_page():
        count = get(cluster, f"/api/v1/topology/{tid}/component/count")
        assert count["componentType"] == "bolt" and count["executors"] == 2 and count["tasks"] == 2
        assert [s["window"] for s in count["boltStats"]] == ["600", "10800", "86400", ":all-time"]
        (inp,) = count["inputStats"]
        assert (inp["component"], inp["stream"]) == ("split", "default") and inp["executed"] > 0 and inp["failed"] > 0
        assert [o["stream"] for o in count["outputStats"]] == ["default"]
        assert count["outputStats"][0]["transferred"] == 0  # nothing subscribes to count
        errors = count["componentErrors"]
        assert 1 <= len(errors) <= 10
        assert [e["errorTime"] for e in errors] == sorted((e["errorTime"] for e in errors), reverse=True)
        assert all(e["errorHost"] == "127.0.0.1" and "ValueError" in e["error"] for e in errors)
        ex = count["executorStats"]
        assert len(ex) == 2 and all(e["id"].startswith("[") and e["running"] and e["host"] == "127.0.0.1" for e in ex)
        assert all(Path(e["workerLogPath"]).is_file() for e in ex)

    def spout_page():
        spout = get(cluster, f"/api/v1/topology/{tid}/component/sentences?window=600")
        assert spout["componentType"] == "spout" and spout["window"] == "600"
        assert spout["spoutSummary"][0]["acked"] > 0 and spout["outputStats"][0]["acked"] > 0
        assert spout["componentErrors"] == []

    eventually(count_page, 90)
    eventually(spout_page, 60)
    metrics = get(cluster, f"/api/v1/topology/{tid}/metrics")
    assert {b["id"] for b in metrics["bolts"]} == {"split", "count"}
    assert get(cluster, f"/api/v1/topology/{tid}/component/nope", 404)["error"].startswith(
        f"topology {tid} has no component 'nope'")


def test_numbers_agree_across_endpoints_while_deactivated_then_actions_work(cluster, topologies, tmp_path):
    # submitted inactive and activated once every executor runs: a worker that emitted before its
    # peer was up would see the peer down and drop what it queued for it (the trees replay, but the
    # words that reached count would no longer add up to the ones split sent)
    name, tid = topologies.submit(write_flaky(tmp_path / "topo"), "agree", "--inactive")
    assert post(cluster, f"/api/v1/topology/{tid}/activate")["status"] == "success"
    # it runs until a word failed (the failure must be in the figures checked below)
    until(lambda: (lambda p: p["bolts"] and p["spouts"][0]["failed"] > 0)(get(cluster, f"/api/v1/topology/{tid}")), 90)
    assert post(cluster, f"/api/v1/topology/{tid}/deactivate") == {
        "topologyOperation": "deactivate", "topologyId": tid, "status": "success"}
    assert get(cluster, f"/api/v1/topology/{tid}")["status"] == "INACTIVE"

    def frozen_and_consistent():
        a = get(cluster, f"/api/v1/topology/{tid}")
        assert a["spouts"][0]["acked"] > 0
        # the marker that time passed in the cluster: every worker wrote a newer heartbeat since
        next_heartbeats(cluster, name)
        page = get(cluster, f"/api/v1/topology/{tid}")
        assert page["topologyStats"] == a["topologyStats"], "the figures still move while INACTIVE"
        spout = page["spouts"][0]
        assert spout["acked"] + spout["failed"] == spout["emitted"], f"trees still pending: {spout}"
        stats = {s["window"]: s for s in page["topologyStats"]}
        assert stats["600"] == {**stats[":all-time"], "window": "600", "windowPretty": "10m 0s"}
        bolts = {b["boltId"]: b for b in page["bolts"]}
        # topology totals: spouts' trees, every component's emits
        assert stats[":all-time"]["acked"] == spout["acked"] and stats[":all-time"]["failed"] == spout["failed"]
        assert stats[":all-time"]["emitted"] == spout["emitted"] + sum(b["emitted"] for b in bolts.values())
        # every sentence reached split once; every word reached count once
        assert bolts["split"]["executed"] == spout["transferred"] == spout["emitted"]
        assert bolts["count"]["executed"] == bolts["split"]["transferred"] == bolts["split"]["emitted"]
        # a failed word fails its whole tree: for spouts acked/failed count trees, for bolts tuples
        assert spout["failed"] == bolts["count"]["failed"] > 0
        assert bolts["count"]["acked"] + bolts["count"]["failed"] == bolts["count"]["executed"]
        # executors, workers and components add up to the same numbers
        for cid in ("split", "count", "sentences"):
            comp = get(cluster, f"/api/v1/topology/{tid}/component/{cid}")
            row = spout if cid == "sentences" else bolts[cid]
            assert sum(e["emitted"] for e in comp["executorStats"]) == row["emitted"]
            assert sum(e["acked"] for e in comp["executorStats"]) == row["acked"]
        workers = get(cluster, f"/api/v1/topologies/{name}/workers")
        assert len(workers) == 2 and all(w["running"] and Path(w["log"]).is_file() for w in workers)
        assert sum(w["stats"]["emitted"] for w in workers) == stats[":all-time"]["emitted"]
        assert sum(w["stats"]["spout_acked"] for w in workers) == spout["acked"]
        gale = get(cluster, f"/api/v1/topologies/{name}")
        assert sorted(e for w in workers for e in w["executors"]) == sorted(
            e["id"] for c in gale["components"].values() for e in c["executor_list"])
        return spout

    spout = eventually(frozen_and_consistent, 90)
    # activate: the counts move again
    assert post(cluster, f"/api/v1/topology/{tid}/activate")["topologyOperation"] == "activate"
    until(lambda: get(cluster, f"/api/v1/topology/{tid}")["spouts"][0]["emitted"] > spout["emitted"] + 100, 30)
    assert get(cluster, f"/api/v1/topology/{tid}")["status"] == "ACTIVE"


def test_rebalance_through_storms_path_then_cli_views_and_kill(cluster, topologies, tmp_path):
    name, tid = topologies.submit(write_flaky(tmp_path / "topo"), "rebal")
    result = post(cluster, f"/api/v1/topology/{tid}/rebalance/1",
                  json={"rebalanceOptions": {"numWorkers": 1, "executors": {"split": "1"}, "tasks": {"split": 3}},
                        "callback": "foo"})
    assert result == {"topologyOperation": "rebalance", "topologyId": tid, "status": "success"}

    def rebalanced():  # Storm's options, and Gale's new task count
        p = get(cluster, f"/api/v1/topology/{tid}")
        split = next(b for b in p["bolts"] if b["boltId"] == "split")
        assert (p["status"], p["workersTotal"], split["executors"], split["tasks"]) == ("ACTIVE", 1, 1, 3)
        assert p["executorsRunning"] == p["executorsTotal"]

    eventually(rebalanced, 90)

    # the CLI's views of the same cluster (JSON where the output is data); a worker relaunched with the
    # old local assignment can be restarted once more right after a rebalance: wait for the one worker
    def cli_views():
        c = json.loads(cli(cluster, "cluster", "--json").stdout)
        (mine,) = [t for t in c["topologies"] if t["id"] == tid]
        assert mine["workers"] == 1
        used = {(s["id"], p) for s in c["supervisors"] for p in s["used_ports"]}
        placed = {(e["node"], e["port"]) for comp in json.loads(cli(cluster, "status", name, "--json").stdout)[
            "components"].values() for e in comp["executor_list"]}
        assert len(placed) == 1 and placed <= used
        (worker,) = json.loads(cli(cluster, "workers", name, "--json").stdout)
        assert worker["running"] and Path(worker["log"]).is_file()
        assert len(worker["executors"]) == get(cluster, f"/api/v1/topology/{tid}")["executorsTotal"]
        return worker

    worker = eventually(cli_views, 30)
    table = cli(cluster, "workers", name).stdout
    assert worker["log"] in table and str(worker["pid"]) in table
    # kill through the CLI, waiting with a countdown until nimbus removed it
    proc = cli(cluster, "kill", name, "--wait", "2", "--wait-removal", "--json")
    assert json.loads(proc.stdout) == {"id": tid, "action": "kill"}
    assert "workers removed in" in proc.stderr and "(ETA)" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"{tid}: removed (")
    assert tid not in [t["id"] for t in get(cluster, "/api/v1/topology/summary")["topologies"]]

    def slots_freed():
        for i in range(2):
            page = get(cluster, f"/api/v1/supervisor?id={cluster.supervisor_id(i)}")
            assert tid not in [w["topologyId"] for w in page["workers"]], page["workers"]

    eventually(slots_freed, 30)
    assert "no topology" in get(cluster, f"/api/v1/topology/{tid}", 404)["error"]
    proc = cli(cluster, "deactivate", name, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith(f"error: no topology named '{name}'; running: ")
    assert proc.stderr.endswith(" ('nimbus list' shows the topologies)\n") and proc.stderr.count("\n") == 1
