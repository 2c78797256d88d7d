"""The audit behind the build_independent marks (tests/hot_path_audit.py) tells a test that runs the
hot path from one that does not, and fails a mark that is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.hot_path_audit import may_run_gale

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = '''
import pytest
import subprocess, sys
from gale.topology.tuple import Fields


def test_unmarked_hot():
    Fields(["word"], "c:default").index("word")


@pytest.mark.build_independent
def test_marked_hot():
    Fields(["word"], "c:default").index("word")


@pytest.mark.build_independent
def test_marked_cold():
    assert sorted([3, 1, 2]) == [1, 2, 3]


@pytest.mark.build_independent
def test_marked_spawning_python():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.build_independent
def test_marked_spawning_a_program_that_is_not_gale():
    subprocess.run(["true"], check=True)
'''


def test_the_audit_fails_a_wrong_mark_and_reports_every_test(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "audit.jsonl"
    env = {**os.environ, "GALE_PURE_PYTHON": "1", "GALE_AUDIT_OUT": str(out), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.hot_path_audit", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-q", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_sample.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    report = {json.loads(line)["id"].split("::")[1]: json.loads(line) for line in out.read_text().splitlines()}
    assert report["test_unmarked_hot"]["hot"] and "tuple.py" in report["test_unmarked_hot"]["hot"]
    assert report["test_marked_cold"]["hot"] is None and report["test_marked_cold"]["spawned"] == []
    assert "FAILED" in proc.stdout and "3 failed" not in proc.stdout, proc.stdout[-3000:]
    failed = {line.split("::")[1].split(" ")[0] for line in proc.stdout.splitlines() if line.startswith("FAILED")}
    assert failed == {"test_marked_hot", "test_marked_spawning_python"}, proc.stdout[-3000:]


def test_which_programs_may_run_gale():
    assert may_run_gale("/venv/bin/python3.11 -m gale.nimbus.cli local x.py")
    assert may_run_gale("nimbus submit t.py")
    assert may_run_gale("/usr/lib/jvm/bin/java -cp spark.jar")
    assert may_run_gale("/bin/sh -c worker")
    assert not may_run_gale("/opt/tansu/tansu-v0.6.0 broker --listener-url x")
    assert not may_run_gale("rabbitmqctl -n node status")
    assert not may_run_gale("/usr/bin/java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain")
    assert not may_run_gale("/venv/bin/schemathesis run http://x")
