"""The combination matrix for the stateless bolt kinds (tests/combinations.py has the table): Bolt,
BasicBolt, ShellBolt (an unmodified pystorm bolt) and an in-memory WindowedBolt, alone under acking
off/on and upstream of, downstream of and between stateful bolts under at-least-once and
exactly-once state — exact results, or refused at submit naming the component."""

from __future__ import annotations

import pytest

from tests.combinations import bolt_cases, build_bolt_case, params, run_case

pytestmark = pytest.mark.timeout(120)

KINDS = ("Bolt", "BasicBolt", "ShellBolt", "WindowedBoltMemory")


@pytest.mark.parametrize("case", params(bolt_cases(KINDS)))
def test_combination(case, tmp_path):
    run_case(build_bolt_case(case, tmp_path), timeout=30)
