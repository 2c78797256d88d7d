"""The combination matrix for the bolt kinds that keep managed state (tests/combinations.py has the
table): a StatefulBolt and a persistent WindowedBolt, alone under acking off (refused: managed state
needs the acker) and on, and upstream of, downstream of and between stateful bolts under
at-least-once and exactly-once state — exact results, or refused at submit naming the component."""

from __future__ import annotations

import pytest

from tests.combinations import bolt_cases, build_bolt_case, params, run_case

pytestmark = pytest.mark.timeout(120)

KINDS = ("StatefulBolt", "WindowedBoltPersistent")


@pytest.mark.parametrize("case", params(bolt_cases(KINDS)))
def test_combination(case, tmp_path):
    run_case(build_bolt_case(case, tmp_path), timeout=30)
