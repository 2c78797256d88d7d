"""The host control the two-process benchmarks print (``benchmarks.host_pair``)."""

from __future__ import annotations

import pytest

from benchmarks import host_pair

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def test_the_job_costs_cpu_and_a_pair_of_copies_is_compared_with_one_alone():
    assert host_pair.job() > 0
    cost = host_pair.pair_cost(1)
    # the busier copy of a pair against the job alone: about 1 on two free cores, more when the
    # host makes two busy processes share; never a tenth or ten times
    assert 0.1 < cost < 10, cost
