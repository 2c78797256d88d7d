"""The combination matrix for Spark stages (tests/combinations.py has the table): a Spark batch bolt
alone under acking off/on and upstream of, downstream of and between stateful bolts under
at-least-once and exactly-once state, and the Spark sink (Parquet, default de-duplication) alone
and downstream of state — exact results. One Spark application for the whole module: every local
runtime here asks for the same settings and attaches to it (as tests/test_spark.py does)."""

from __future__ import annotations

import pytest

from gale.config_keys import Config
from gale.worker.spark.session import acquire_spark, spark_settings
from tests.combinations import bolt_cases, build_bolt_case, params, run_case

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300),  # a loaded machine starts Spark in minutes
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

KINDS = ("SparkBolt", "SparkSink")


@pytest.fixture(scope="module")
def spark_handle():
    handle = acquire_spark(spark_settings(Config()))  # the settings every runtime of this module asks for
    try:
        session = handle.wait(180)
        # the first jobs of a new JVM take seconds: run one before the cases' waits start
        session.createDataFrame([(i,) for i in range(20)], "i BIGINT").toArrow()
        yield handle
    finally:
        handle.close()


@pytest.mark.parametrize("case", params(bolt_cases(KINDS)))
def test_combination(case, tmp_path, spark_handle):
    run_case(build_bolt_case(case, tmp_path), timeout=90)
