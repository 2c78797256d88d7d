"""Limits that grow with the cluster: the assignment's size in ZooKeeper (a bound computed at submit
and rebalance, refused past ``nimbus.assignment.max.bytes`` with the numbers named), and the
ZooKeeper reads of a round (pipelined, decoded once per change)."""

from __future__ import annotations

import socket
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale.bundle import make_bundle
from gale.cluster_state import ClusterState
from gale.config import defaults
from gale.errors import CorruptRecordError, TopologyError
from gale.layout import Layout
from gale.records import Assignment, StormBase, SupervisorInfo, TopologyStatus, WorkerHeartbeat
from gale.topology.builder import TopologyBuilder
from gale.topology.definition import TopologyTasks, component_parallelism
from gale.nimbus.daemon import Nimbus
from gale.nimbus.plan import RoundSnapshot, SchedulingTimeouts, TopologyInputs, assignment_size_bound, plan_round
from gale.nimbus.scheduler import HeartbeatCache
from gale.config_keys import Config
from tests.topologies import Identity, ListSpout
from tests.waiting import until

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

NOW = 1_800_000_000.0
CODE = "c" * 64
CODE_DIR = "/var/lib/gale/nimbus/stormdist/t-1-1800000000"


def topology(spouts: int, bolts: int, workers: int, bolt_tasks: int | None = None):
    b = TopologyBuilder()
    b.set_spout("words", ListSpout, spouts)
    b.set_bolt("split", Identity, bolts, tasks=bolt_tasks).shuffle_grouping("words")
    return b.create_topology(name="t", conf={"topology.workers": workers})


# ------------------------------------------------------------------------------ the bound (pure)


@settings(max_examples=40, deadline=None)
@given(spouts=st.integers(1, 40), bolts=st.integers(1, 400), workers=st.integers(1, 60), nodes=st.integers(1, 12),
       ports=st.integers(1, 8))
def test_the_size_bound_covers_every_assignment_the_scheduler_writes(spouts, bolts, workers, nodes, ports):
    defn = topology(spouts, bolts, workers).definition
    conf = {**defaults(), "topology.workers": workers}
    ce = component_parallelism(defn, conf, workers)
    base = StormBase(name="t", status=TopologyStatus.ACTIVE, num_workers=workers, component_executors=ce,
                     launch_time_secs=int(NOW), owner="ana")
    sups = {}
    for i in range(nodes):
        sid = f"{uuid.uuid4()}-node{i}.example.com"
        sups[sid] = SupervisorInfo(time_secs=int(NOW), hostname=f"node{i}.example.com", assignment_id=sid,
                                   meta=list(range(6700, 6700 + ports)))
    topo = TopologyInputs(base=base, defn=defn, conf=conf, code_dir=CODE_DIR, code_checksum=CODE, heartbeats={})
    plan = plan_round(RoundSnapshot(now=NOW, topologies={"t-1": topo}, storm_ids=frozenset({"t-1"}), assignments={},
                                    supervisors=sups, cache=HeartbeatCache(),
                                    timeouts=SchedulingTimeouts(120, 30, 9)))
    (w,) = plan.writes
    executors = TopologyTasks(defn, conf, workers, ce).executors
    bound = assignment_size_bound(executors, workers, code_dir=CODE_DIR, owner="ana",
                                  node_id_len=max(map(len, sups)),
                                  host_len=max(len(i.hostname) for i in sups.values()))
    assert len(w.assignment.encode()) <= bound


def test_the_bound_of_2000_executors_is_far_below_the_limit():
    executors = [(i, i) for i in range(1, 2001)]
    bound = assignment_size_bound(executors, 100, code_dir=CODE_DIR, node_id_len=64, host_len=64)
    assert bound < 64 * 1024  # ~45 KB with 64-character ids: an eighth of the default limit


# ------------------------------------------------------------------------------ submit and rebalance


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def leader(conf, tmp_path):
    c = {**conf, "nimbus.http.port": free_port(), "storm.local.dir": str(tmp_path / "nimbus"),
         "nimbus.monitor.freq.secs": 600, "nimbus.assignment.max.bytes": 4096}
    n = Nimbus(Config.resolve(c, allow_user_keys=False), host="127.0.0.1")
    n.start()
    until(n.is_leader, 15, lambda: "no leader")
    yield n
    n.stop()


def bundle(spouts: int, bolts: int, workers: int, bolt_tasks: int | None = None) -> bytes:
    topo = topology(spouts, bolts, workers, bolt_tasks)
    return make_bundle(None, topo.to_json(), {"topology.workers": workers})


def test_a_submit_whose_assignment_could_outgrow_the_limit_is_refused_with_the_numbers(leader):
    zk = leader.client
    with pytest.raises(TopologyError) as info:
        leader.submit("huge", bundle(50, 400, 10))
    msg = str(info.value)
    # the numbers: executors (50 + 400 + 10 ackers), workers, the bound, the limit and its key
    assert "submit refused" in msg and "'huge'" in msg and "460 executors over 10 workers" in msg
    assert "4,096 bytes" in msg and "nimbus.assignment.max.bytes" in msg and "jute.maxbuffer" in msg
    bound = int(msg.split("could take ")[1].split(" bytes")[0].replace(",", ""))
    assert bound > 4096
    # nothing was written or kept
    assert zk.get_children(leader.layout.storms_dir) == [] and leader.blobs.ids() == []
    assert zk.get_children(leader.layout.dir("blobstore")) == []
    # a topology that fits is accepted and scheduled
    tid = leader.submit("small", bundle(1, 2, 1))
    assert leader.state.assignment(tid) is not None


def test_a_rebalance_that_would_outgrow_the_limit_is_refused_and_nothing_changes(leader):
    # 400 bolt tasks in 2 executors: small now, too big once every task is its own executor
    tid = leader.submit("grows", bundle(2, 2, 1, bolt_tasks=400))
    before = leader.state.storm_base(tid)
    with pytest.raises(TopologyError, match=r"rebalance refused: .*'grows' \(403 executors over 8 workers\)"):
        leader.rebalance("grows", num_workers=8, num_executors={"split": 400})
    assert leader.state.storm_base(tid) == before
    leader.rebalance("grows", num_workers=2, num_executors={"split": 4})  # this one fits
    assert leader.state.storm_base(tid).status == TopologyStatus.REBALANCING


def _nothing_built(monkeypatch):
    """Refusals by the counts alone: building the executor list of such a topology would take minutes
    and gigabytes, so the test fails if nimbus starts building it."""
    import gale.nimbus.daemon as daemon

    def built(*args, **kwargs):
        raise AssertionError("nimbus built the executors before checking the counts")

    monkeypatch.setattr(daemon, "TopologyTasks", built)


@pytest.mark.parametrize("spouts,bolts,workers,own,expected", [
    (1, 1_000_000, 1, {}, r"asks for 1,000,002 executors, more than nimbus.executors.perTopology \(20,000\)"),
    (1, 2, 1_000_000, {}, r"asks for 1,000,000 workers, more than nimbus.slots.perTopology \(1,000\)"),
    # the topology's own configuration cannot raise nimbus's bounds
    (1, 30_000, 1, {"nimbus.executors.perTopology": 10**9},
     r"asks for 30,002 executors, more than nimbus.executors.perTopology \(20,000\)"),
], ids=["executors", "workers", "own-conf"])
def test_a_submit_over_nimbus_s_counts_is_refused_by_arithmetic_before_anything_is_built(
        leader, monkeypatch, spouts, bolts, workers, own, expected):
    topo = topology(spouts, 1, workers)
    defn = topo.definition.model_copy(deep=True)
    defn.components["split"].parallelism = defn.components["split"].tasks = bolts
    payload = make_bundle(None, defn.to_json(), {"topology.workers": workers, **own})
    _nothing_built(monkeypatch)
    with pytest.raises(TopologyError, match=r"submit refused: topology 'big' " + expected):
        leader.submit("big", payload)
    assert leader.client.get_children(leader.layout.storms_dir) == [] and leader.blobs.ids() == []


@pytest.mark.parametrize("executors,tasks,expected", [
    ({"split": 10**30}, {}, r"asks for 1(,000){9},002 executors, more than nimbus.executors.perTopology"),
    ({}, {"split": 200_000}, r"asks for 200,002 tasks, more than nimbus.tasks.perTopology \(20,000\)"),
], ids=["executors-10e30", "tasks-200k"])
def test_a_rebalance_over_nimbus_s_counts_is_refused_by_arithmetic_and_nothing_changes(
        leader, monkeypatch, executors, tasks, expected):
    tid = leader.submit("steady", bundle(1, 2, 1))
    before = leader.state.storm_base(tid)
    _nothing_built(monkeypatch)
    with pytest.raises(TopologyError, match=r"rebalance refused: topology 'steady' " + expected):
        leader.rebalance("steady", num_executors=executors, num_tasks=tasks)
    assert leader.state.storm_base(tid) == before


# ------------------------------------------------------------------------------ reads at scale


def test_bulk_reads_decode_each_znode_once_per_change(zk):
    state = ClusterState(zk, Layout("/storm"))
    state.ensure_layout()
    a = Assignment.build(master_code_dir="/x", code_checksum=CODE, node_host={"n": "h"},
                         executor_node_port={(1, 1): ("n", 6700)}, executor_start_time_secs={(1, 1): 5})
    for tid in ("t-1", "t-2"):
        state.set_assignment(tid, a)
    first = state.assignments()
    again = state.assignments()
    assert first == {"t-1": a, "t-2": a}
    assert again["t-1"] is first["t-1"] and again["t-2"] is first["t-2"]  # unchanged: not decoded again
    b = Assignment.build(master_code_dir="/x", code_checksum=CODE, node_host={"n": "h"},
                         executor_node_port={(1, 1): ("n", 6701)}, executor_start_time_secs={(1, 1): 6})
    state.set_assignment("t-2", b)
    third = state.assignments()
    assert third["t-2"] == b and third["t-1"] is first["t-1"]
    state.remove_assignment("t-1")
    assert state.assignments() == {"t-2": b} and state.assignment("t-1") is None
    # a malformed znode is reported and skipped; the others are read
    seen: list[CorruptRecordError] = []
    state.on_corrupt = seen.append
    zk.create("/storm/assignments/t-3", b"{not json")
    assert state.assignments() == {"t-2": b}
    assert [e.path for e in seen] == ["/storm/assignments/t-3"]


def test_workerbeats_of_some_slots_only(zk):
    state = ClusterState(zk, Layout("/storm"))
    state.ensure_layout()
    state.setup_heartbeats("t-1")
    for node, port in (("a", 6700), ("b", 6701)):
        state.set_worker_heartbeat("t-1", node, port, WorkerHeartbeat(storm_id="t-1", executor_stats={}, time_secs=7,
                                                                       uptime_secs=1))
    got = state.worker_heartbeats_of("t-1", [("a", 6700), ("c", 6700)])
    assert list(got) == [("a", 6700)] and got[("a", 6700)].time_secs == 7


def test_an_oversized_workerbeat_is_trimmed_to_fit(zk):
    from gale.records import ExecutorStats

    state = ClusterState(zk, Layout("/storm"))
    state.ensure_layout()
    state.setup_heartbeats("t-1")
    windows = {w: {f"stream-{i}": 123456 for i in range(20)} for w in ("600", "10800", "86400", ":all-time")}
    stats = {f"{i}-{i}": ExecutorStats(component="c", kind="bolt", emitted=windows, transferred=windows,
                                       executed=windows) for i in range(1, 301)}
    hb = WorkerHeartbeat(storm_id="t-1", executor_stats=stats, time_secs=9, uptime_secs=1)
    assert len(hb.encode()) > 1_048_576  # over ZooKeeper's jute.maxbuffer: it would drop the connection
    state.set_worker_heartbeat("t-1", "a", 6700, hb)
    back = state.worker_heartbeat("t-1", "a", 6700)
    assert back.executors() == hb.executors() and back.time_secs == 9
    assert set(back.executor_stats["1-1"].emitted) == {":all-time"}  # the windows went, all-time stayed
    state.set_worker_heartbeat("t-1", "a", 6700, hb, max_bytes=100_000)
    bare = state.worker_heartbeat("t-1", "a", 6700)
    assert bare.executors() == hb.executors() and bare.executor_stats["1-1"].emitted == {}


def test_single_reads_of_cached_records_see_changes_and_deletions_and_keep_the_watch(zk):
    state = ClusterState(zk, Layout("/storm"))
    state.ensure_layout()
    a = Assignment.build(master_code_dir="/x", code_checksum=CODE, node_host={"n": "h"},
                         executor_node_port={(1, 1): ("n", 6700)}, executor_start_time_secs={(1, 1): 5})
    state.set_assignment("t-1", a)
    fired = []
    first = state.assignment("t-1", watch=fired.append)
    assert state.assignment("t-1", watch=fired.append) is first  # unchanged: its stat was enough
    b = Assignment.build(master_code_dir="/x", code_checksum=CODE, node_host={"n": "h"},
                         executor_node_port={(1, 1): ("n", 6701)}, executor_start_time_secs={(1, 1): 6})
    state.set_assignment("t-1", b)
    until(lambda: fired, 10, lambda: "the watch set by the stat read did not fire")
    assert state.assignment("t-1", watch=fired.append) == b
    state.remove_assignment("t-1")
    assert state.assignment("t-1") is None
