"""The chaos suite: unit tests of its pure parts, and the bounded run CI makes on a real cluster.

The bounded run (``test_bounded_chaos_run``) injects every fault kind once into a running
RabbitMQ → work → sink topology and asserts that no message was lost, that the run converged, and
that each fault demonstrably took effect (see docs/reliability.md). The soak is
``python -m tests.chaos --duration SECS`` (or ``test_soak`` with ``--run-slow``).
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from collections import Counter

import pytest

from tests.chaos.fault_context import FaultRecord
from tests.components import requires
from tests.chaos.report import RESULTS_MARKER, append_markdown, markdown
from tests.chaos.run import RunResult, Sampler, run_chaos
from tests.chaos.cluster import CONF
from tests.chaos.schedule import (
    ENSEMBLE_KINDS, KINDS, SLOW_MIN_SECS, bounded_ensemble_plan, bounded_plan, conflicts, kinds_for, soak_steps,
)
from tests.chaos.workload import SinkReader, check

needs_root = requires(os.geteuid() == 0 and shutil.which("ip") is not None,
                      "network namespaces need root and iproute2 (make test runs as root and installs iproute2)")


# ------------------------------------------------------------------------------ pure parts


def test_check_counts_lost_duplicates_and_unexpected():
    counts = Counter({0: 1, 1: 3, 3: 1, 7: 2})
    r = check(range(5), counts)
    assert r.n == 5 and r.processed == 3
    assert r.lost == [2, 4]
    assert r.duplicates == 2 and r.duplicated_ids == 1  # id 1 three times; id 7 was never published
    assert r.unexpected == [7]
    assert not r.ok
    assert check(range(3), Counter({0: 1, 1: 2, 2: 1})).ok


def test_sink_reader_counts_complete_lines_only(tmp_path):
    (tmp_path / "sink-5-100.log").write_text("1\n2\n3")
    (tmp_path / "sink-6-101.log").write_text("2\n")
    (tmp_path / "other.log").write_text("99\n")
    reader = SinkReader(tmp_path)
    assert reader.poll() == Counter({1: 1, 2: 2})
    with open(tmp_path / "sink-5-100.log", "a") as fh:
        fh.write("\n4\n")
    assert reader.poll() == Counter({1: 1, 2: 2, 3: 1, 4: 1})
    assert reader.lines == 5


def test_bounded_plan_has_every_kind_once_partition_first_slow_bolt_last():
    plan = bounded_plan()
    assert sorted(s.kind for s in plan) == sorted(KINDS)
    assert plan[0].kind == "partition" and plan[-1].kind == "slow_bolt"
    assert all(s.wait_healthy for s in plan)
    slow = plan[-1].params
    assert slow["hold_secs"] >= SLOW_MIN_SECS > 2 * CONF["topology.message.timeout.secs"]


def test_soak_steps_repeat_for_a_seed_and_deal_every_kind_per_bag():
    def steps(seed, n=160):
        return list(itertools.islice(soak_steps(random.Random(seed)), n))

    a = steps(7)
    assert a == steps(7)
    assert a != steps(8)
    for bag in range(0, len(a), len(KINDS)):
        assert sorted(s.kind for s in a[bag:bag + len(KINDS)]) == sorted(KINDS)
    assert any(not s.wait_healthy for s in a) and any(s.wait_healthy for s in a)
    assert any(s.overlap for s in a) and len({s.seed for s in a}) == len(a)
    assert all(s.params["hold_secs"] >= SLOW_MIN_SECS for s in a if s.kind == "slow_bolt")


def test_an_ensemble_run_deals_the_ensemble_faults_instead_of_the_single_server_restart():
    assert kinds_for(1) == KINDS
    three = kinds_for(3)
    assert "zk_restart" not in three and set(ENSEMBLE_KINDS) <= set(three)
    assert [s.kind for s in bounded_ensemble_plan()] == ["zk_follower_kill", "zk_leader_kill", "zk_ensemble_restart"]
    steps = list(itertools.islice(soak_steps(random.Random(3), three), 3 * len(three)))
    assert {s.kind for s in steps} == set(three)
    # ZooKeeper faults never overlap each other, nor a session expiry they would hide
    for kind in ENSEMBLE_KINDS:
        assert conflicts(kind, ["zk_leader_kill"]) and conflicts(kind, ["supervisor_session_expiry"])
    assert not conflicts("zk_follower_kill", ["slow_bolt"])


def test_overlapping_faults_share_no_resource():
    assert not conflicts("partition", [])
    assert conflicts("worker_kill", ["partition"])  # the partition holds the namespaced worker
    assert conflicts("supervisor_session_expiry", ["zk_restart"])  # a restart would hide the expiry
    assert not conflicts("nimbus_leader_kill", ["partition"])
    assert not conflicts("slow_bolt", ["zk_restart"])
    assert conflicts("slow_bolt", ["zk_restart", "nimbus_leader_kill"])  # at most two at once
    for kind in KINDS:
        assert conflicts(kind, [kind])


def test_sampler_stall_and_resume(tmp_path):
    s = Sampler(SinkReader(tmp_path), now=lambda: 0.0)
    s.samples = [(0.0, 10), (1.0, 12), (2.0, 12), (3.0, 12), (4.0, 12), (5.0, 20), (6.0, 21)]
    assert s.max_stall(0.0, 6.0) == 4.0  # no new id from 1.0 until 5.0
    assert s.max_stall(5.0, 6.0) == 1.0
    assert s.resumed_after(2.5) == 2.5  # 12 at 2.5, first more at 5.0
    assert s.resumed_after(6.0) is None


def test_markdown_report_appends_under_the_marker(tmp_path):
    result = RunResult(mode="soak", seed=3, duration=60.0, rate=40.0, n=100, duplicates=2, duplicated_ids=1,
                       converged=True, convergence_secs=4.5, started_at="2026-01-01 00:00:00")
    result.faults = [FaultRecord(kind="zk_restart", target="ZooKeeper", start=1.0, healed=5.0, end=9.0, injected=True,
                                 evidence={"old_pid": 1, "new_pid": 2, "supervisors_and_leader_back_after_secs": 3})]
    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n\nintro\n")
    append_markdown(result, doc, "cmd --seed 3")
    append_markdown(result, doc, "cmd --seed 3")
    text = doc.read_text()
    assert text.count(RESULTS_MARKER) == 1 and text.count("### 2026-01-01 00:00:00 — soak, 60 s, seed 3") == 2
    assert "| 100 | 0 | 2 (1) | 0 | 4.5 s | 1 (1) |" in text and "PASS" in text
    result.lost, result.lost_ids = 1, [42]
    assert "FAIL" in markdown(result, "cmd") and "[42]" in markdown(result, "cmd")


# ------------------------------------------------------------------------------ the bounded run


def _fault(result: RunResult, kind: str) -> FaultRecord:
    found = [f for f in result.faults if f.kind == kind]
    assert len(found) == 1, f"{kind}: {found}"
    return found[0]


@needs_root
@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_bounded_chaos_run(tmp_path):
    result = run_chaos(tmp_path / "chaos", mode="bounded")
    print(markdown(result, "tests/test_chaos.py::test_bounded_chaos_run"))
    assert result.error is None
    # the guarantee: every confirmed input was processed at least once
    assert result.n > 1000
    assert result.lost == 0, f"lost ids: {result.lost_ids}"
    assert result.unexpected == 0
    assert result.converged
    # every fault kind was injected and demonstrably took effect
    assert sorted(f.kind for f in result.faults) == sorted(KINDS)
    not_injected = [(f.kind, f.error, f.evidence) for f in result.faults if not f.injected]
    assert not not_injected
    part = _fault(result, "partition").evidence
    assert part["executors_before"] > 0 and part["ephemeral_vanished_after_secs"] is not None
    assert part["executors_moved_after_secs"] is not None, "the partitioned node's executors did not move"
    assert part["reregistered_after_heal_secs"] is not None
    kill = _fault(result, "worker_kill").evidence
    assert all(v["new_pid"] for v in kill["relaunched"].values())
    sup_exp = _fault(result, "supervisor_session_expiry").evidence
    assert sup_exp["ephemeral_vanished_after_secs"] is not None and sup_exp["new_session"]
    w_exp = _fault(result, "worker_session_expiry").evidence
    assert w_exp["new_session"] and w_exp["worker_survived"]
    leader = _fault(result, "nimbus_leader_kill").evidence
    assert leader["epoch_after"] > leader["epoch_before"]
    assert leader["restarted_as_standby_after_secs"] is not None
    zk = _fault(result, "zk_restart").evidence
    assert zk["new_pid"] != zk["old_pid"] and zk["supervisors_and_leader_back_after_secs"] is not None
    sup = _fault(result, "supervisor_kill").evidence
    assert sup["ephemeral_vanished_after_secs"] is not None and sup["executors_moved_after_secs"] is not None
    slow = _fault(result, "slow_bolt").evidence
    assert slow["spout_failed_after"] > slow["spout_failed_before"]
    # and the cluster recovered from all of it in bounded time
    assert result.convergence_secs < 180


@needs_root
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_bounded_ensemble_chaos_run(tmp_path):
    """The cluster on a ZooKeeper ensemble of three: kill -9 of a follower, of the leader, and of
    every member at once — nothing lost, each fault took effect, recovery times reported."""
    result = run_chaos(tmp_path / "chaos", mode="bounded", zookeepers=3)
    print(markdown(result, "tests/test_chaos.py::test_bounded_ensemble_chaos_run"))
    assert result.error is None
    assert result.n > 500
    assert result.lost == 0, f"lost ids: {result.lost_ids}"
    assert result.unexpected == 0 and result.converged
    assert [f.kind for f in result.faults] == ["zk_follower_kill", "zk_leader_kill", "zk_ensemble_restart"]
    assert not [(f.kind, f.error, f.evidence) for f in result.faults if not f.injected]
    follower = _fault(result, "zk_follower_kill").evidence
    assert follower["leader_kept"] and follower["rejoined_after_restart_secs"] is not None
    leader = _fault(result, "zk_leader_kill").evidence
    assert leader["new_leader"] != leader["old_leader"] and leader["new_leader_after_secs"] is not None
    assert leader["rejoined_as_follower_after_restart_secs"] is not None
    restart = _fault(result, "zk_ensemble_restart").evidence
    assert restart["quorum_after_restart_secs"] is not None
    assert restart["supervisors_and_leader_back_after_secs"] is not None
    for f in result.faults:
        assert f.evidence["cluster_healthy_after_secs"] is not None, f.kind  # it recovered, in bounded time
    assert result.convergence_secs < 180


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_soak(tmp_path):
    duration = float(os.environ.get("GALE_CHAOS_SOAK_SECS", "900"))
    seed = int(os.environ.get("GALE_CHAOS_SOAK_SEED", "1"))
    zookeepers = int(os.environ.get("GALE_CHAOS_SOAK_ZOOKEEPERS", "1"))
    result = run_chaos(tmp_path / "chaos", mode="soak", duration=duration, seed=seed, zookeepers=zookeepers)
    print(markdown(result, f"GALE_CHAOS_SOAK_SECS={duration:.0f} GALE_CHAOS_SOAK_SEED={seed} "
                           f"GALE_CHAOS_SOAK_ZOOKEEPERS={zookeepers} make soak"))
    assert result.error is None
    assert result.lost == 0, f"lost ids: {result.lost_ids}"
    assert result.unexpected == 0 and result.converged
    assert not [(f.kind, f.error) for f in result.faults if not f.injected]


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_ensemble_soak(tmp_path):
    """A soak on a ZooKeeper ensemble of three: every fault kind, the ensemble's included."""
    duration = float(os.environ.get("GALE_CHAOS_SOAK_SECS", "900"))
    seed = int(os.environ.get("GALE_CHAOS_SOAK_SEED", "1"))
    result = run_chaos(tmp_path / "chaos", mode="soak", duration=duration, seed=seed, zookeepers=3)
    print(markdown(result, f"GALE_CHAOS_SOAK_SECS={duration:.0f} GALE_CHAOS_SOAK_SEED={seed} "
                           "make soak (test_ensemble_soak)"))
    assert result.error is None
    assert result.lost == 0, f"lost ids: {result.lost_ids}"
    assert result.unexpected == 0 and result.converged
    assert not [(f.kind, f.error) for f in result.faults if not f.injected]
