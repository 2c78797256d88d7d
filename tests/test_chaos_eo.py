"""The chaos suite's exactly-once workload: Kafka → keyed count with state in Redis.

Unit tests of its pure parts (the count checker, the plan), and the bounded run CI makes on a real
cluster (``test_bounded_exactly_once_chaos_run``): each fault kind of the workload once — kill -9 of
the counting worker and of the checkpoint spout's worker, Redis kill -9 while a checkpoint is in
flight, a supervisor with its workers, the leader nimbus, ZooKeeper — then the counts committed in
Redis must equal the counts of the topic's records: lost = 0 and over-counted = 0. The soak is
``python -m tests.chaos --workload kafka-eo --duration SECS`` (or ``test_exactly_once_soak`` with
``--run-slow``). Method and results: docs/reliability.md.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from collections import Counter

import pytest

from tests.chaos.eo_workload import KafkaEOWorkload, check_counts
from tests.chaos.fault_context import FaultRecord
from tests.chaos.faults import FAULTS
from tests.chaos.report import RESULTS_MARKER, append_markdown, markdown
from tests.chaos.run import RunResult, run_chaos
from tests.chaos.schedule import EO_KINDS, RESOURCES, bounded_eo_plan, conflicts, soak_steps
from tests.components import requires

needs_root = requires(os.geteuid() == 0 and shutil.which("ip") is not None,
                      "network namespaces need root and iproute2 (make test runs as root and installs iproute2)")


# ------------------------------------------------------------------------------ pure parts


def test_check_counts_exact():
    r = check_counts({"a": 3, "b": 1}, {"a": 3, "b": 1})
    assert r.ok and r.lost == 0 and r.over_counted == 0
    assert r.expected_total == r.committed_total == 4


def test_check_counts_reports_a_loss_and_an_over_count():
    expected = Counter({"a": 10, "b": 5, "c": 2, "d": 1})
    committed = {"a": 8, "b": 7, "c": 2, "e": 4}  # a short by 2, b over by 2, d missing, e never produced
    r = check_counts(expected, committed)
    assert r.lost_keys == {"a": 2, "d": 1} and r.lost == 3
    assert r.over_counted_keys == {"b": 2, "e": 4} and r.over_counted == 6
    assert r.unexpected_keys == ["e"]
    assert r.expected_total == 18 and r.committed_total == 21
    assert not r.ok


def test_check_counts_names_values_that_are_not_counts():
    r = check_counts({"a": 1}, {"a": 1, "b": "x", "c": -1, "d": True})
    assert r.malformed == {"b": "x", "c": -1, "d": True}
    assert not r.ok and r.lost == 0 and r.over_counted == 0


def test_an_empty_commit_loses_everything():
    r = check_counts({"a": 2, "b": 3}, {})
    assert r.lost == 5 and r.over_counted == 0 and not r.ok


def test_bounded_eo_plan_has_every_kind_and_kills_the_counting_and_checkpoint_workers():
    plan = bounded_eo_plan()
    assert {s.kind for s in plan} == set(EO_KINDS)
    kills = [s.params.get("component") for s in plan if s.kind == "worker_kill"]
    assert kills == ["count", "kafka", "$checkpointspout"]
    assert [s.params["phase"] for s in plan if s.kind == "redis_kill"] == ["PREPARING", "COMMITTING"]
    assert all(s.wait_healthy for s in plan) and len({s.seed for s in plan}) == len(plan)
    assert set(EO_KINDS) <= set(FAULTS) and set(EO_KINDS) <= set(RESOURCES)


def test_eo_soak_deals_every_exactly_once_kind_per_bag():
    steps = list(itertools.islice(soak_steps(random.Random(5), EO_KINDS), 4 * len(EO_KINDS)))
    for bag in range(0, len(steps), len(EO_KINDS)):
        assert sorted(s.kind for s in steps[bag:bag + len(EO_KINDS)]) == sorted(EO_KINDS)
    assert all(s.params["down_secs"] > 0 for s in steps if s.kind == "redis_kill")
    assert not conflicts("redis_kill", ["zk_restart"]) and conflicts("redis_kill", ["redis_kill"])


def test_the_workload_refuses_an_ensemble():
    with pytest.raises(ValueError, match="single ZooKeeper"):
        KafkaEOWorkload().bounded_plan(3)


def test_markdown_report_of_an_exactly_once_run():
    result = RunResult(mode="bounded", seed=1, duration=None, rate=100.0, workload="kafka-eo", n=500,
                       converged=True, convergence_secs=7.5, started_at="2026-01-01 00:00:00")
    result.faults = [FaultRecord(kind="redis_kill", target="Redis", start=1.0, healed=6.0, end=7.0, injected=True,
                                 evidence={"old_pid": 1, "new_pid": 2, "phase_at_kill": "COMMITTING",
                                           "answers_ping_after_restart_secs": 0.3})]
    text = markdown(result, "cmd")
    assert "workload kafka-eo" in text and "over-counted" in text
    assert "| 500 | 0 | 0 | 0 | 7.5 s | 1 (1) |" in text and "killed in COMMITTING" in text and "PASS" in text
    result.over_counted, result.over_counted_keys = 2, {"k3": 2}
    assert not result.ok
    assert "FAIL" in markdown(result, "cmd") and "{'k3': 2}" in markdown(result, "cmd")
    result.over_counted, result.over_counted_keys = 0, {}
    result.cuts_checked, result.inconsistent_cuts = 40, ["txid 7 gen 2: positions {0: 9} (sum 9), state sum 12"]
    assert not result.ok
    text = markdown(result, "cmd")
    assert "FAIL" in text and "checked as consistent cuts (state sum = position sum): 40, inconsistent: 1" in text
    assert "- txid 7 gen 2: positions {0: 9} (sum 9), state sum 12" in text


def test_a_run_is_appended_at_the_end_of_the_results_not_after_a_later_section(tmp_path):
    doc = tmp_path / "reliability.md"
    doc.write_text(f"# R\n\n## Results\n\n{RESULTS_MARKER}\n\n### old run\n\ntext\n\n## Later section\n\nlater\n")
    result = RunResult(mode="bounded", seed=1, duration=None, rate=100.0, workload="kafka-eo",
                       started_at="2026-01-01 00:00:00")
    append_markdown(result, doc, "cmd")
    text = doc.read_text()
    assert text.index("### old run") < text.index("### 2026-01-01 00:00:00") < text.index("## Later section")
    assert text.endswith("## Later section\n\nlater\n")


# ------------------------------------------------------------------------------ the bounded run


def _evidence(result: RunResult, kind: str, **params) -> dict:
    found = [f for f in result.faults if f.kind == kind and all(f.params.get(k) == v for k, v in params.items())]
    assert len(found) == 1, f"{kind} {params}: {found}"
    return found[0].evidence


def assert_exact(result: RunResult) -> None:
    assert result.error is None
    assert result.lost == 0, f"lost per key: {result.lost_keys}"
    assert result.over_counted == 0, f"over-counted per key: {result.over_counted_keys}"
    assert result.cuts_checked > 0 and not result.inconsistent_cuts, (result.cuts_checked, result.inconsistent_cuts)
    assert result.unexpected == 0 and result.converged
    assert not [(f.kind, f.error, f.evidence) for f in result.faults if not f.injected]


@needs_root
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_bounded_exactly_once_chaos_run(tmp_path):
    result = run_chaos(tmp_path / "chaos", mode="bounded", workload=KafkaEOWorkload())
    print(markdown(result, "tests/test_chaos_eo.py::test_bounded_exactly_once_chaos_run"))
    assert_exact(result)
    assert result.n > 1000
    assert sorted(f.kind for f in result.faults) == sorted(s.kind for s in bounded_eo_plan())
    for component in ("count", "kafka", "$checkpointspout"):
        kill = _evidence(result, "worker_kill", component=component)
        assert kill["dead"] and all(v["new_pid"] for v in kill["relaunched"].values()), kill
    for phase in ("PREPARING", "COMMITTING"):
        redis = _evidence(result, "redis_kill", phase=phase)
        assert redis["old_pid_dead"] and redis["ping_unanswered_while_down"] and redis["new_pid"] != redis["old_pid"]
        assert redis["checkpoint_failures_after"], "no checkpoint failed while Redis was down"
        assert redis["phase_at_kill"] == phase, redis  # killed mid-prepare, mid-commit
    sup = _evidence(result, "supervisor_kill")
    assert sup["workers_dead"] and sup["ephemeral_vanished_after_secs"] is not None
    leader = _evidence(result, "nimbus_leader_kill")
    assert leader["epoch_after"] > leader["epoch_before"]
    zk = _evidence(result, "zk_restart")
    assert zk["new_pid"] != zk["old_pid"] and zk["supervisors_and_leader_back_after_secs"] is not None
    assert result.convergence_secs < 180


@needs_root
@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_exactly_once_soak(tmp_path):
    duration = float(os.environ.get("GALE_CHAOS_SOAK_SECS", "900"))
    seed = int(os.environ.get("GALE_CHAOS_SOAK_SEED", "1"))
    result = run_chaos(tmp_path / "chaos", mode="soak", duration=duration, seed=seed, workload=KafkaEOWorkload())
    print(markdown(result, f"GALE_CHAOS_SOAK_SECS={duration:.0f} GALE_CHAOS_SOAK_SEED={seed} "
                           "make soak (test_exactly_once_soak)"))
    assert_exact(result)
