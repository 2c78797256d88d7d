"""The chaos suite's PostgreSQL workload: Kafka → keyed count (exactly-once) → PostgreSQL sink.

Unit tests of its plan, and the bounded run CI makes on a real cluster
(``test_bounded_postgres_chaos_run``): kill -9 of the sink's worker while a checkpoint is PREPARING
and while it is COMMITTING, PostgreSQL killed mid-commit, the counting worker, Redis (the checkpoint
record) mid-commit, a supervisor with its workers, the leader nimbus, ZooKeeper — then the table
must match the topic: lost = 0 and over-counted = 0, for the tuples the sink committed (``n``) and
for the counts it upserted (``count``). The soak is ``python -m tests.chaos --workload postgres-eo
--duration SECS``. Method and results: docs/reliability.md.
"""

from __future__ import annotations

import itertools
import random

import pytest

from tests.chaos.faults import FAULTS
from tests.chaos.pg_workload import PostgresEOWorkload
from tests.chaos.report import markdown
from tests.chaos.run import run_chaos
from tests.chaos.schedule import PG_KINDS, RESOURCES, bounded_pg_plan, soak_steps
from tests.test_chaos_eo import _evidence, assert_exact, needs_root


def test_bounded_pg_plan_kills_the_sink_mid_prepare_and_mid_commit_and_postgres_mid_commit():
    plan = bounded_pg_plan()
    assert {s.kind for s in plan} == set(PG_KINDS)
    kills = [(s.params.get("component"), s.params.get("phase")) for s in plan if s.kind == "worker_kill"]
    assert kills == [("pg", "PREPARING"), ("pg", "COMMITTING"), ("count", None)]
    assert [s.params["phase"] for s in plan if s.kind == "postgres_kill"] == ["COMMITTING"]
    assert all(s.wait_healthy for s in plan) and len({s.seed for s in plan}) == len(plan)
    assert set(PG_KINDS) <= set(FAULTS) and set(PG_KINDS) <= set(RESOURCES)


def test_pg_soak_deals_every_kind_per_bag():
    steps = list(itertools.islice(soak_steps(random.Random(7), PG_KINDS), 2 * len(PG_KINDS)))
    for bag in range(0, len(steps), len(PG_KINDS)):
        assert sorted(s.kind for s in steps[bag:bag + len(PG_KINDS)]) == sorted(PG_KINDS)


def test_the_workload_refuses_an_ensemble():
    with pytest.raises(ValueError, match="single ZooKeeper"):
        PostgresEOWorkload().bounded_plan(3)


@needs_root
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_bounded_postgres_chaos_run(tmp_path):
    result = run_chaos(tmp_path / "chaos", mode="bounded", workload=PostgresEOWorkload())
    print(markdown(result, "tests/test_chaos_pg.py::test_bounded_postgres_chaos_run"))
    assert_exact(result)
    assert result.n > 1000
    assert sorted(f.kind for f in result.faults) == sorted(s.kind for s in bounded_pg_plan())
    for phase in ("PREPARING", "COMMITTING"):
        kill = _evidence(result, "worker_kill", component="pg", phase=phase)
        assert kill["dead"] and all(v["new_pid"] for v in kill["relaunched"].values()), kill
        assert kill["phase_at_kill"] == phase, kill
    pg = _evidence(result, "postgres_kill", phase="COMMITTING")
    assert pg["old_pid_dead"] and pg["ping_unanswered_while_down"] and pg["new_pid"] != pg["old_pid"]
    assert pg["checkpoint_failures_after"], "no checkpoint failed while PostgreSQL was down"
    assert pg["phase_at_kill"] == "COMMITTING", pg
    assert result.convergence_secs < 180
