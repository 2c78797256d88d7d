"""The grouping benchmark's cases (``benchmarks.bench_grouping``) do what they say."""

from __future__ import annotations

from benchmarks import bench_grouping


def test_each_case_chooses_one_of_the_tasks_and_fields_cases_keep_a_key_on_its_task():
    for name, (choose, values) in bench_grouping.cases().items():
        picks = [choose(v) for v in values]
        assert all(len(p) == 1 and p[0] in bench_grouping.TASKS for p in picks), name
        if name.startswith("fields"):
            assert [choose(v) for v in values] == picks, f"{name}: a key moved to another task"
            assert len({p[0] for p in picks}) > 1, f"{name}: every key on one task"
        else:  # a shuffle: each cycle of len(TASKS) choices covers every task once
            n = len(bench_grouping.TASKS)
            cycle = sorted(choose(values[0])[0] for _ in range(n * 3))
            assert cycle == sorted(bench_grouping.TASKS * 3), name

