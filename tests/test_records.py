import json

import pytest

from gale.errors import CorruptRecordError
from gale.records import (
    Assignment,
    ErrorInfo,
    ExecutorStats,
    StormBase,
    SupervisorInfo,
    TopologyStatus,
    WorkerHeartbeat,
    executor_key,
    parse_executor_key,
)

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def test_executor_keys():
    assert executor_key((1, 4)) == "1-4"
    assert parse_executor_key("12-15") == (12, 15)
    for bad in ("4-1", "a-b", "1", "0-3", "-1--1"):
        with pytest.raises(ValueError):
            parse_executor_key(bad)


def test_assignment_helpers():
    a = Assignment.build(
        master_code_dir="/x",
        code_checksum="0" * 64,
        node_host={"n1": "h1"},
        executor_node_port={(1, 2): ("n1", 6700), (3, 3): ("n1", 6701), (4, 4): ("n1", 6700)},
        executor_start_time_secs={(1, 2): 5, (3, 3): 5, (4, 4): 6},
    )
    assert a.executors_on("n1") == {6700: [(1, 2), (4, 4)], 6701: [(3, 3)]}
    assert a.executors_on("n1", 6701) == {6701: [(3, 3)]}
    data = json.loads(a.encode())
    assert data["version"] == 2
    # executors grouped by slot and start time, as "start-end" tokens
    assert data["workers"] == [
        {"node": "n1", "port": 6700, "start_time_secs": 5, "executors": "1-2"},
        {"node": "n1", "port": 6700, "start_time_secs": 6, "executors": "4-4"},
        {"node": "n1", "port": 6701, "start_time_secs": 5, "executors": "3-3"},
    ]
    back = Assignment.decode(a.encode(), "/p")
    assert back == a
    assert back.executors() == a.executors() and back.start_times() == {(1, 2): 5, (3, 3): 5, (4, 4): 6}
    assert back.slots() == {("n1", 6700), ("n1", 6701)}


def test_version_1_assignments_are_still_read():
    v1 = {"version": 1, "master_code_dir": "/x", "code_checksum": "0" * 64, "node_host": {"n1": "h1"},
          "executor_node_port": {"1-2": {"node": "n1", "port": 6700}, "3-3": {"node": "n1", "port": 6701}},
          "executor_start_time_secs": {"1-2": 5, "3-3": 7}, "owner": "ana"}
    a = Assignment.decode(json.dumps(v1).encode(), "/storm/assignments/t-1")
    assert a.executors() == {(1, 2): ("n1", 6700), (3, 3): ("n1", 6701)}
    assert a.start_times() == {(1, 2): 5, (3, 3): 7} and a.owner == "ana"
    # equal to the version-2 record of the same placement: nimbus does not rewrite it for nothing
    assert a == Assignment.build(master_code_dir="/x", code_checksum="0" * 64, node_host={"n1": "h1"},
                                 executor_node_port=a.executors(), executor_start_time_secs=a.start_times(),
                                 owner="ana")
    bad = dict(v1, executor_node_port={"x-1": {"node": "n1", "port": 6700}})
    with pytest.raises(CorruptRecordError, match="executor key 'x-1'"):
        Assignment.decode(json.dumps(bad).encode(), "/storm/assignments/t-1")
    with pytest.raises(CorruptRecordError, match="executor_node_port"):
        Assignment.decode(json.dumps(dict(v1, executor_node_port={"1-1": 6700})).encode(), "/a")


def test_assignment_of_2000_executors_is_compact():
    """2,000 executors in 100 workers: one entry per slot, ~10 bytes an executor with real
    (uuid-host) supervisor ids instead of ~100."""
    nodes = [f"{i:08d}-aaaa-bbbb-cccc-dddddddddddd-node{i}.example.com" for i in range(50)]
    placements = {(i, i): (nodes[i % 50], 6700 + i % 2) for i in range(1, 2001)}
    a = Assignment.build(master_code_dir="/var/lib/gale/nimbus/stormdist/t-1-1", code_checksum="0" * 64,
                         node_host={n: n.split("-")[-1] for n in nodes}, executor_node_port=placements,
                         executor_start_time_secs={ex: 1_800_000_000 for ex in placements})
    size = len(a.encode())
    assert size < 40_000, size
    assert Assignment.decode(a.encode(), "/a").executors() == placements


@pytest.mark.parametrize(
    "data,problem",
    [
        (b"", "empty znode"),
        (b"\xff\xfe", "not JSON"),
        (b"{not json", "not JSON"),
        (b"[1,2]", "expected a JSON object"),
        (b"[" * 200_000, "unreadable JSON (RecursionError)"),
        (b'{"name": "x"}', "missing or non-integer 'version'"),
        (b'{"version": 99, "name": "x"}', "written by a newer Gale"),
        (b'{"version": 1, "name": "x", "status": "SLEEPING", "num_workers": 1, "component_executors": {}, "launch_time_secs": 1}', "status"),
        (b'{"version": 1, "name": "x", "status": "ACTIVE", "num_workers": 0, "component_executors": {}, "launch_time_secs": 1}', "num_workers"),
    ],
)
def test_malformed_storm_base_names_path_and_problem(data, problem):
    with pytest.raises(CorruptRecordError) as info:
        StormBase.decode(data, "/storm/storms/t-1-1")
    assert "/storm/storms/t-1-1" in str(info.value)
    assert problem in str(info.value)


def test_bad_executor_key_in_heartbeat():
    hb = {"version": 1, "storm_id": "t", "executor_stats": {"x-y": {"component": "c", "kind": "bolt"}},
          "time_secs": 1, "uptime_secs": 1}
    with pytest.raises(CorruptRecordError, match="executor key 'x-y'"):
        WorkerHeartbeat.decode(json.dumps(hb).encode(), "/hb")


def test_unknown_fields_are_ignored_for_forward_compatibility():
    rec = ErrorInfo(error="boom", error_time_secs=5, host="h", port=1)
    obj = json.loads(rec.encode())
    obj["added_later"] = 1
    assert ErrorInfo.decode(json.dumps(obj).encode(), "/e") == rec


def test_supervisor_info_and_stats_round_trip():
    info = SupervisorInfo(time_secs=1, hostname="h", assignment_id="s1", used_ports=[6700], meta=[6700, 6701])
    assert SupervisorInfo.decode(info.encode(), "/s") == info
    st = ExecutorStats(component="split", kind="bolt", emitted={"600": {"default": 5}})
    hb = WorkerHeartbeat(storm_id="t", executor_stats={"1-2": st}, time_secs=3, uptime_secs=2)
    assert WorkerHeartbeat.decode(hb.encode(), "/hb").executor_stats["1-2"].emitted == {"600": {"default": 5}}
    assert hb.executors() == [(1, 2)]
    base = StormBase(name="wc", status=TopologyStatus.ACTIVE, num_workers=2, component_executors={"a": 1},
                     launch_time_secs=10)
    assert json.loads(base.encode())["status"] == "ACTIVE"
