"""Prometheus metrics of each daemon, without a cluster: per-daemon registries, naming conventions,
worker values equal to the executors' own counters (simulated time), supervisor slot states and
restart reasons, nimbus's HTTP service discovery."""

from __future__ import annotations

import time
from types import SimpleNamespace

import httpx
import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gale import TopologyBuilder
from gale.clock import SimulatedClock
from gale.records import GALE_VERSION, StormBase, SupervisorInfo, TopologyStatus, WorkerHeartbeat
from gale.nimbus.metrics import NimbusMetrics
from gale.supervisor.metrics import SupervisorMetrics, new_history
from gale.supervisor.slot import KillReason, LocalAssignment, Slot, State
from tests.topologies import FailOn, ListSpout, Never, RaiseOn
from tests.waiting import until
from gale.worker.local import LocalTopology, local_conf
from gale.worker.metrics import WorkerMetrics, metric_name
from gale.config_keys import Config


def samples(registry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(snap, name: str, **labels) -> float:
    return snap[(name, tuple(sorted(labels.items())))]


def families(registry):
    return list(text_string_to_metric_families(generate_latest(registry).decode()))


def assert_conventions(registry) -> None:
    for fam in families(registry):
        if fam.name.startswith(("process_", "python_")):
            continue
        assert fam.name.startswith("gale_"), fam.name
        if fam.type == "counter":
            assert all(s.name == fam.name + "_total" for s in fam.samples), fam.name
        assert not fam.name.endswith("_created")
        if "latency" in fam.name or "duration" in fam.name or "age" in fam.name:
            assert fam.name.endswith("_seconds"), fam.name  # base units


# ----------------------------------------------------------------------------- worker


def worker_with_topology():
    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[list(range(10))])
    b.set_spout("lost", ListSpout, 1, args=[["x"]])
    b.set_bolt("check", FailOn, 2, kwargs={"bad": [1, 2]}).shuffle_grouping("src")
    b.set_bolt("raise", RaiseOn, 1, kwargs={"bad": [3]}).shuffle_grouping("src")
    b.set_bolt("never", Never, 1).shuffle_grouping("lost")
    topology = b.create_topology()
    clock = SimulatedClock()
    conf = local_conf(topology, {"topology.message.timeout.secs": 10, "topology.stats.sample.rate": 1.0})
    lt = LocalTopology("m", topology, conf, clock=clock, spawn=False)
    worker = SimpleNamespace(runtime=lt.runtime, transfer=None, topology_id="m-1-1", supervisor_id="sup-a",
                             port=6700, worker_id="w-1", started=time.time(), conf=conf)
    return lt, clock, worker


def test_worker_metrics_equal_the_executors_counters():
    lt, clock, worker = worker_with_topology()
    rt = lt.runtime
    rt.run_until_idle()
    clock.advance(25)  # past twice the message timeout: the tree of "x" times out
    rt.run_until_idle()
    metrics = WorkerMetrics(worker)
    s = samples(metrics.registry)
    assert value(s, "gale_worker_tuples_emitted_total", component="src", stream="default") == 10
    # as Storm counts it: one per target task, and src has two subscribers (check, raise)
    assert value(s, "gale_worker_tuples_transferred_total", component="src", stream="default") == 20
    # spouts: trees; 1 and 2 failed by "check", 3 by "raise" (a user error), the rest acked
    assert value(s, "gale_worker_tuples_acked_total", component="src", stream="default") == 7
    assert value(s, "gale_worker_tuples_failed_total", component="src", stream="default", reason="explicit") == 3
    assert value(s, "gale_worker_tuples_failed_total", component="src", stream="default", reason="timeout") == 0
    assert value(s, "gale_worker_tuples_failed_total", component="lost", stream="default", reason="timeout") == 1
    assert value(s, "gale_worker_tuples_failed_total", component="lost", stream="default", reason="explicit") == 0
    # bolts: tuples, keyed by input component:stream
    assert value(s, "gale_worker_tuples_executed_total", component="check", stream="src:default") == 10
    assert value(s, "gale_worker_tuples_acked_total", component="check", stream="src:default") == 8
    assert value(s, "gale_worker_tuples_failed_total", component="check", stream="src:default", reason="explicit") == 2
    assert value(s, "gale_worker_errors_reported_total", component="raise") == 1
    assert value(s, "gale_worker_errors_reported_total", component="check") == 0
    # latencies: every sample counted (sample rate 1), in seconds
    assert value(s, "gale_worker_complete_latency_seconds_count", component="src", stream="default") == 7
    assert value(s, "gale_worker_execute_latency_seconds_count", component="check", stream="src:default") == 10
    assert value(s, "gale_worker_execute_latency_seconds_sum", component="check", stream="src:default") >= 0
    assert value(s, "gale_worker_spout_pending_tuples", component="src") == 0
    assert value(s, "gale_worker_queue_depth", component="check") == 0
    assert value(s, "gale_worker_info", topology_id="m-1-1", supervisor_id="sup-a", port="6700", worker_id="w-1",
                 version=GALE_VERSION) == 1
    assert value(s, "gale_worker_executors") == len(rt.executors)
    # the same numbers the heartbeat (and so the UI) reports
    records = lt.executor_stats()
    src = next(r for r in records.values() if r.component == "src")
    assert src.acked[":all-time"]["default"] == 7 and src.failed[":all-time"]["default"] == 3
    assert_conventions(metrics.registry)


def test_component_extras_are_exported_generically_and_backpressure_is_sampled():
    lt, _clock, worker = worker_with_topology()
    ex = next(e for e in lt.runtime.executors.values() if e.component == "check")
    ex.stats.extra.update({"spark_batches": 3, "spark batch-latency.ms": 1.5})
    metrics = WorkerMetrics(worker)
    s = samples(metrics.registry)
    assert value(s, "gale_worker_extra_spark_batches", component="check") == 3
    assert metric_name("spark batch-latency.ms") == "gale_worker_extra_spark_batch_latency_ms"
    assert value(s, "gale_worker_extra_spark_batch_latency_ms", component="check") == 1.5
    for congested in (False, True, True, False, True):
        lt.runtime.congested = congested
        metrics.sample_backpressure(0.1)
    s = samples(metrics.registry)
    assert value(s, "gale_worker_backpressure_events_total") == 2
    assert value(s, "gale_worker_backpressure_seconds_total") == pytest.approx(0.3)
    assert value(s, "gale_worker_backpressure_active") == 1


def test_worker_metrics_serve_http_on_the_given_port():
    _lt, _clock, worker = worker_with_topology()
    metrics = WorkerMetrics(worker)
    port = metrics.serve(0, host="127.0.0.1")
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "gale_worker_tuples_emitted_total" in text and "process_cpu_seconds_total" in text
    finally:
        metrics.stop()


# ----------------------------------------------------------------------------- registries


def test_each_daemon_has_its_own_registry():
    a, b = NimbusMetrics(), NimbusMetrics()
    a.observe_round(0.2)
    a.executors_reassigned.labels(reason="dead").inc(3)
    sa, sb = samples(a.registry), samples(b.registry)
    assert value(sa, "gale_nimbus_scheduling_rounds_total") == 1 and value(sb, "gale_nimbus_scheduling_rounds_total") == 0
    assert value(sa, "gale_nimbus_scheduling_round_duration_seconds_count") == 1
    assert value(sa, "gale_nimbus_executors_reassigned_total", reason="dead") == 3
    assert not [n for n in REGISTRY._names_to_collectors if n.startswith("gale_")]  # nothing process-global
    SupervisorMetrics()
    SupervisorMetrics()  # a second one does not clash (a module-level metric would raise here)
    assert_conventions(a.registry)


# ----------------------------------------------------------------------------- supervisor


class FakeContainers:
    def __init__(self, beats):
        self.beats = beats

    def heartbeat(self, worker_id):
        return self.beats.get(worker_id)


def test_supervisor_slot_states_heartbeat_age_and_restart_reasons():
    la = LocalAssignment("topo-1", ((1, 2),), "0" * 64)
    now = time.time()
    sup = SimpleNamespace(
        slots={6700: Slot(port=6700, state=State.RUNNING, current=la, worker_id="w1", history=("WAITING_FOR_WORKER_START", "RUNNING")),
               6701: Slot(port=6701)},
        containers=FakeContainers({"w1": {"time_secs": now - 4}}), started=now - 100, supervisor_id="sup-a",
        hostname="h1", conf={},
    )
    m = SupervisorMetrics()
    m.observe_slots(sup)
    s = samples(m.registry)
    assert value(s, "gale_supervisor_slots", state="running") == 1 and value(s, "gale_supervisor_slots", state="empty") == 1
    assert 3.5 < value(s, "gale_supervisor_worker_heartbeat_age_seconds", port="6700", topology="topo-1") < 10
    # the worker crashed, was relaunched, then timed out: two decisions within one loop step
    hist = sup.slots[6700].history + ("KILL_AND_RELAUNCH(PROCESS_EXIT)", "WAITING_FOR_WORKER_START", "RUNNING",
                                      "KILL_AND_RELAUNCH(HB_TIMEOUT)")
    sup.slots[6700] = Slot(port=6700, state=State.KILL_AND_RELAUNCH, current=la, worker_id="w1",
                           kill_reason=KillReason.HB_TIMEOUT, history=hist)
    m.observe_slots(sup)
    m.observe_slots(sup)  # no new history: nothing counted twice
    s = samples(m.registry)
    assert value(s, "gale_supervisor_worker_restarts_total", reason="PROCESS_EXIT") == 1
    assert value(s, "gale_supervisor_worker_restarts_total", reason="HB_TIMEOUT") == 1
    assert value(s, "gale_supervisor_slots", state="kill_and_relaunch") == 1
    assert value(s, "gale_supervisor_info", supervisor_id="sup-a", host="h1",
                 version=GALE_VERSION) == 1
    assert_conventions(m.registry)


def test_bounded_history_diff():
    assert new_history(("a", "b"), ("a", "b", "c")) == ("c",)
    assert new_history(tuple("abcd"), tuple("cdef")) == ("e", "f")  # the oldest entries fell off
    assert new_history(("a",), ("a",)) == ()
    assert new_history((), ("x",)) == ("x",)


# ----------------------------------------------------------------------------- nimbus + service discovery


def test_nimbus_metrics_and_service_discovery(conf):
    from gale.nimbus.serve import NimbusServer

    c = dict(conf)
    c.update({"nimbus.http.port": 0, "nimbus.host": "127.0.0.1", "storm.local.hostname": "127.0.0.1",
              "nimbus.monitor.freq.secs": 1})
    server = NimbusServer(Config.resolve(c, allow_user_keys=False))
    server.start()
    try:
        base = f"http://127.0.0.1:{server.http.port}"
        until(server.nimbus.is_leader, 20, "in-process nimbus did not become leader")
        state = server.nimbus.state
        now = int(time.time())
        state.set_supervisor_info("sup-a", SupervisorInfo(time_secs=now, hostname="node-a", assignment_id="sup-a",
                                                          meta=[6700, 6701], server_port=9700))
        state.set_supervisor_info("sup-b", SupervisorInfo(time_secs=now, hostname="node-b", assignment_id="sup-b",
                                                          meta=[6700]))  # no metrics port: not a target
        state.set_storm_base("t-1-1", StormBase(name="t", status=TopologyStatus.ACTIVE, num_workers=1,
                                                component_executors={"s": 1}, launch_time_secs=now))
        state.setup_heartbeats("t-1-1")
        beat = dict(storm_id="t-1-1", executor_stats={}, uptime_secs=1, host="node-a", port=6700, metrics_port=7700)
        state.set_worker_heartbeat("t-1-1", "sup-a", 6700, WorkerHeartbeat(time_secs=now, **beat))
        state.set_worker_heartbeat("t-1-1", "sup-a", 6701, WorkerHeartbeat(
            time_secs=now - 3600, **{**beat, "port": 6701, "metrics_port": 7701}))  # stale: left out
        targets = httpx.get(f"{base}/api/v1/prometheus/targets").json()
        assert {"targets": [f"127.0.0.1:{server.http.port}"], "labels": {"daemon": "nimbus"}} in targets
        assert {"targets": ["node-a:9700"], "labels": {"daemon": "supervisor", "supervisor": "sup-a"}} in targets
        assert {"targets": ["node-a:7700"], "labels": {"daemon": "worker", "topology": "t-1-1",
                                                        "supervisor": "sup-a", "slot": "6700"}} in targets
        assert len(targets) == 3
        httpx.get(f"{base}/api/v1/topology/summary")
        s = samples_text(httpx.get(f"{base}/metrics").text)
        assert value(s, "gale_nimbus_is_leader") == 1 and value(s, "gale_cluster_state_up") == 1
        assert value(s, "gale_cluster_supervisors") == 2
        assert value(s, "gale_cluster_slots", state="free") == 3 and value(s, "gale_cluster_slots", state="used") == 0
        assert value(s, "gale_cluster_topologies", status="ACTIVE") == 1
        assert value(s, "gale_nimbus_leader_elections_total") == 1
        assert value(s, "gale_nimbus_scheduling_rounds_total") >= 1
        assert value(s, "gale_nimbus_http_requests_total", method="GET", route="/api/v1/topology/summary",
                     status="200") == 1
    finally:
        server.stop()


def samples_text(text: str):
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
