"""The protocol is language-neutral: a spout and a bolt in JavaScript (Node.js, with the small
storm.js-like adapter in tests/fixtures/multilang/node) run in a topology with Gale's acking."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from gale import LocalCluster, ShellBolt, ShellSpout, TopologyBuilder
from tests.multilang_topologies import FailFirst, RecordSink, read_lines
from tests.waiting import eventually

NODE_DIR = Path(__file__).resolve().parent / "fixtures" / "multilang" / "node"


def node_topology(out, n, sink):
    b = TopologyBuilder()
    b.set_spout("numbers", ShellSpout, kwargs={"command": ["node", "numberspout.js"], "cwd": str(NODE_DIR),
                                                "outputs": ["sentence"]})
    b.set_bolt("split", ShellBolt, 2, kwargs={"command": ["node", "splitsentence.js"], "cwd": str(NODE_DIR),
                                               "outputs": ["word"]}).shuffle_grouping("numbers")
    b.set_bolt("sink", sink).fields_grouping("split", ["word"])
    return b.create_topology("node", conf={"test.out": str(out), "test.n": n})


def js_acked(out) -> list[int]:
    return sorted(int(x) for x in read_lines(str(out), "acked-js-"))


def test_node_is_installed():
    assert shutil.which("node"), "Node.js is part of the machine (deploy/install-system-deps.sh)"


def test_a_javascript_spout_and_bolt_run_with_acking_and_task_id_replies(tmp_path):
    n = 200
    with LocalCluster() as cluster:
        running = cluster.submit_topology("node", {}, node_topology(tmp_path, n, RecordSink))

        def complete():
            assert js_acked(tmp_path) == list(range(n))
            words = Counter(w for (w,) in read_lines(str(tmp_path), "sink-"))
            assert words == Counter({**{f"s{i}": 1 for i in range(n)}, "alpha": n, "beta": n, "gamma": n})
            stats = running.component_stats()
            # the first word of each sentence asked for its task ids; each reply came back
            assert stats["split"]["extra"].get("task_id_replies") == n
        eventually(complete, 60)
        assert running.errors == {}


def test_a_javascript_spout_replays_what_fails_downstream(tmp_path):
    n = 100
    with LocalCluster() as cluster:
        running = cluster.submit_topology("node", {}, node_topology(tmp_path, n, FailFirst))

        def all_acked():
            acked = js_acked(tmp_path)
            assert acked == list(range(n)), f"{len(acked)} of {n} acked"
        eventually(all_acked, 60)
        assert running.component_stats()["numbers"]["failed"] >= 3  # the first trees with new words
