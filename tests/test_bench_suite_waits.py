"""``benchmarks.suite_waits``: the aggregation (pure) and the plugin on a real test file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.suite_waits import aggregate, read

ROOT = Path(__file__).resolve().parent.parent


def test_totals_by_kind_and_by_site_largest_first():
    records = [
        {"kind": "wait", "dt": 2.0, "site": "test_a.py:10", "inner": "cluster.py:117"},
        {"kind": "wait", "dt": 5.0, "site": "test_a.py:10", "inner": "cluster.py:117"},
        {"kind": "cli", "dt": 1.5, "site": "test_b.py:3", "inner": "cluster.py:133", "args": "status"},
        {"kind": "cli", "dt": 3.0, "site": "test_b.py:9", "inner": "cluster.py:218", "args": "submit --wait"},
        {"kind": "fixture", "dt": 4.0, "site": "spark", "inner": "module"},
    ]
    kinds, sites = aggregate(records)
    assert kinds == {"wait": [7.0, 2], "fixture": [4.0, 1], "cli submit --wait": [3.0, 1], "cli status": [1.5, 1]}
    assert list(kinds) == ["wait", "fixture", "cli submit --wait", "cli status"]
    assert sites[0] == (("wait", "test_a.py:10", "cluster.py:117"), 7.0, 2, 5.0)
    assert sites[-1] == (("cli", "test_b.py:3", "status"), 1.5, 1, 1.5)


def test_the_plugin_records_a_wait_with_the_test_line_that_made_it(tmp_path):
    test = tmp_path / "test_waited.py"
    test.write_text(
        "from tests.waiting import eventually, until\n"
        "import time\n"
        "def test_x():\n"
        "    t = time.monotonic() + 0.3\n"
        "    until(lambda: time.monotonic() > t, 10)\n"
    )
    out = tmp_path / "waits"
    env = dict(os.environ, GALE_SUITE_WAITS=str(out), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "benchmarks.suite_waits", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-q", str(test), "--rootdir", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [record] = read(out)
    assert record["kind"] == "wait" and record["site"] == "test_waited.py:5" and record["dt"] >= 0.3
    assert record["test"].endswith("test_waited.py::test_x")
