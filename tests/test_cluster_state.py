"""Cluster state against a real ZooKeeper server."""

import json
import threading

import pytest
from kazoo.client import KazooClient

from gale.cluster_state import ClusterState, FencedError
from gale.errors import CorruptRecordError
from gale.layout import Layout
from gale.records import (
    Assignment,
    ErrorInfo,
    ExecutorStats,
    NimbusSummary,
    StormBase,
    SupervisorInfo,
    TopologyStatus,
    WorkerHeartbeat,
)
from tests.conftest import make_client
from tests.waiting import until

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

TID = "wordcount-1-1700000000"


def _state(zk, corrupt=None):
    kwargs = {"on_corrupt": corrupt.append} if corrupt is not None else {}
    st = ClusterState(zk, Layout("/storm"), **kwargs)
    st.ensure_layout()
    return st


def _assignment():
    return Assignment.build(
        master_code_dir="/var/gale/nimbus/stormdist/" + TID,
        code_checksum="ab" * 32,
        node_host={"sup-1": "host1"},
        executor_node_port={(1, 1): ("sup-1", 6700), (2, 3): ("sup-1", 6701)},
        executor_start_time_secs={(1, 1): 100, (2, 3): 100},
    )


def test_layout_created(zk):
    _state(zk)
    assert set(zk.get_children("/storm")) >= {"storms", "assignments", "supervisors", "workerbeats", "errors"}


def test_every_record_round_trips_through_zookeeper(zk):
    st = _state(zk)
    base = StormBase(name="wordcount", status=TopologyStatus.ACTIVE, num_workers=2,
                     component_executors={"spout": 1, "split": 10, "__acker": 2}, launch_time_secs=1700000000)
    st.set_storm_base(TID, base)
    assert st.storm_base(TID) == base
    assert st.storm_ids() == [TID]

    a = _assignment()
    st.set_assignment(TID, a)
    assert st.assignment(TID) == a
    assert st.assignments() == {TID: a}

    info = SupervisorInfo(time_secs=5, hostname="host1", assignment_id="sup-1", used_ports=[6700],
                          meta=[6700, 6701], uptime_secs=3)
    st.set_supervisor_info("sup-1", info)
    assert st.supervisor_info("sup-1") == info
    assert st.supervisor_ids() == ["sup-1"]
    assert zk.exists("/storm/supervisors/sup-1").ephemeralOwner == zk.client_id[0]

    st.setup_heartbeats(TID)
    data, _ = zk.get(f"/storm/workerbeats/{TID}")
    assert data == b""
    hb = WorkerHeartbeat(storm_id=TID, time_secs=10, uptime_secs=4, port=6700,
                         executor_stats={"1-1": ExecutorStats(component="spout", kind="spout",
                                                              emitted={"600": {"default": 7}})})
    st.set_worker_heartbeat(TID, "sup-1", 6700, hb)
    assert st.worker_heartbeat(TID, "sup-1", 6700) == hb
    assert st.worker_heartbeats(TID) == {("sup-1", 6700): hb}
    assert zk.exists(f"/storm/workerbeats/{TID}/sup-1-6700") is not None

    err = ErrorInfo(error="Traceback ...\nValueError: x", error_time_secs=11, host="host1", port=6700)
    st.report_error(TID, "split", err)
    assert st.errors(TID, "split") == [err]
    assert st.last_error(TID, "split") == err
    assert st.error_components(TID) == ["split"]

    ns = NimbusSummary(host="h", port=8080, is_leader=True)
    st.set_nimbus_summary("h:8080", ns)
    assert st.nimbus_summaries() == {"h:8080": ns}

    # znodes are readable JSON with a version field (what zkCli.sh get shows)
    for path, version in [(f"/storm/storms/{TID}", 1), (f"/storm/assignments/{TID}", 2),
                          ("/storm/supervisors/sup-1", 1), (f"/storm/workerbeats/{TID}/sup-1-6700", 1)]:
        assert json.loads(zk.get(path)[0])["version"] == version


def test_workerbeat_not_created_for_removed_topology(zk):
    st = _state(zk)
    hb = WorkerHeartbeat(storm_id=TID, time_secs=10, uptime_secs=4, executor_stats={})
    from kazoo.exceptions import NoNodeError

    with pytest.raises(NoNodeError):
        st.set_worker_heartbeat(TID, "sup-1", 6700, hb)
    assert zk.exists(f"/storm/workerbeats/{TID}") is None


def test_malformed_znodes_named_and_skipped(zk):
    corrupt = []
    st = _state(zk, corrupt)
    zk.create(f"/storm/storms/{TID}", b"{garbage")
    with pytest.raises(CorruptRecordError) as info:
        st.storm_base(TID)
    assert f"/storm/storms/{TID}" in str(info.value) and "not JSON" in str(info.value)
    # bulk readers skip it and report it
    st.set_storm_base("good-1-1", StormBase(name="good", status="ACTIVE", num_workers=1,
                                            component_executors={}, launch_time_secs=1))
    assert list(st.storm_bases()) == ["good-1-1"]
    assert [e.path for e in corrupt] == [f"/storm/storms/{TID}"]
    # a supervisor znode holding the wrong record type
    zk.create("/storm/supervisors/bad", json.dumps({"version": 1, "hostname": 3}).encode(), ephemeral=True)
    assert st.supervisor_infos() == {}
    assert "time_secs" in corrupt[-1].problem
    # a workerbeat with a name that is not <node>-<port>
    st.setup_heartbeats(TID)
    hb = WorkerHeartbeat(storm_id=TID, time_secs=1, uptime_secs=1, executor_stats={})
    zk.create(f"/storm/workerbeats/{TID}/nonsense", hb.encode())
    assert st.worker_heartbeats(TID) == {}
    assert "nonsense" in corrupt[-1].path


def test_error_trimming_keeps_ten_newest(zk):
    st = _state(zk)
    for i in range(25):
        st.report_error(TID, "count", ErrorInfo(error=f"err {i}", error_time_secs=i))
    children = sorted(zk.get_children(f"/storm/errors/{TID}/count"))
    assert len(children) == 10
    assert all(len(c) == 11 and c.startswith("e") for c in children)
    assert [e.error for e in st.errors(TID, "count")] == [f"err {i}" for i in range(24, 14, -1)]
    assert st.last_error(TID, "count").error == "err 24"


def test_error_trimming_with_concurrent_reporters(zk_server, zk_chroot):
    clients = [make_client(zk_server, zk_chroot) for _ in range(6)]
    try:
        states = [_state(c) for c in clients]
        barrier = threading.Barrier(len(states))
        failures = []

        def report(idx, st):
            barrier.wait()
            try:
                for i in range(20):
                    st.report_error(TID, "count/x", ErrorInfo(error=f"{idx}:{i}", error_time_secs=i))
            except Exception as exc:  # pragma: no cover - surfaced by the assert below
                failures.append(exc)

        threads = [threading.Thread(target=report, args=(i, s)) for i, s in enumerate(states)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        # component ids are URL-encoded in paths: "count/x" stays one directory
        names = sorted(clients[0].get_children(f"/storm/errors/{TID}/count%2Fx"))
        assert len(names) == 10
        seqs = [int(n[1:]) for n in names]
        assert seqs == list(range(110, 120)), "exactly the 10 newest of 120 reports survive"
        assert states[0].error_components(TID) == ["count/x"]
    finally:
        for c in clients:
            c.stop()
            c.close()


def test_ephemeral_supervisor_node_vanishes_on_session_expiry(zk_server, zk_chroot, zk, expire):
    sup_client = make_client(zk_server, zk_chroot, timeout=4.0)
    try:
        st = _state(sup_client)
        st.set_supervisor_info("sup-9", SupervisorInfo(time_secs=1, hostname="h", assignment_id="sup-9"))
        observer = _state(zk)
        assert observer.supervisor_ids() == ["sup-9"]
        expire(sup_client)
        until(lambda: observer.supervisor_ids() == [], 10, "the expired session's ephemeral node")
        # kazoo reconnects with a new session; re-registering works and is ephemeral again
        sup_client.retry(lambda: None)
        until(lambda: sup_client.connected, 10, "the client reconnected")
        st.set_supervisor_info("sup-9", SupervisorInfo(time_secs=2, hostname="h", assignment_id="sup-9"))
        assert observer.supervisor_info("sup-9").time_secs == 2
    finally:
        sup_client.stop()
        sup_client.close()
    assert _state(zk).supervisor_ids() == []


def test_fenced_writes_refused_after_epoch_changes(zk):
    st = _state(zk)
    zk.create("/storm/leader-epoch", b"1")
    version = zk.exists("/storm/leader-epoch").version
    st.fence = ("/storm/leader-epoch", version)
    st.set_assignment(TID, _assignment())  # create under the fence
    st.set_assignment(TID, _assignment())  # update under the fence
    assert st.assignment(TID) == _assignment()
    zk.set("/storm/leader-epoch", b"2")  # a new leader was elected
    with pytest.raises(FencedError):
        st.set_assignment(TID, _assignment().model_copy(update={"owner": "stale"}))
    with pytest.raises(FencedError):
        st.remove_assignment(TID)
    assert st.assignment(TID).owner == ""


def test_teardown(zk):
    st = _state(zk)
    st.setup_heartbeats(TID)
    st.set_worker_heartbeat(TID, "n", 1, WorkerHeartbeat(storm_id=TID, time_secs=1, uptime_secs=1, executor_stats={}))
    st.report_error(TID, "c", ErrorInfo(error="e", error_time_secs=1))
    st.teardown_heartbeats(TID)
    st.teardown_errors(TID)
    assert st.heartbeat_topologies() == [] and st.error_topologies() == []
