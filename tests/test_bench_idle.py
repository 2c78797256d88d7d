"""benchmarks/bench_idle.py's pure part: which of a run's processes a command line is."""

from pathlib import Path

import pytest

from benchmarks.bench_idle import role_of

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def test_a_process_is_counted_under_its_role_only_when_it_belongs_to_this_run():
    base = Path("/tmp/gale-bench-idle-abc")
    assert role_of(["python", "-m", "gale.worker.cli", "run", "--config", f"{base}/cluster/w.yaml"], base) == "worker"
    assert role_of(["python", "-m", "gale.nimbus.cli", "serve", "--config", f"{base}/cluster/n.yaml"], base) == "nimbus"
    assert role_of(["java", "-cp", "zookeeper.jar", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    f"{base}/zk/zoo.cfg"], base) == "zookeeper"
    assert role_of(["python", "-m", "gale.worker.cli", "run", "--config", "/tmp/other/w.yaml"], base) is None
    assert role_of(["python", "-c", f"print('{base}')"], base) is None
