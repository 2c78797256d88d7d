"""Shell components with real subprocesses in local mode: unmodified pystorm components (Bolt,
BatchingBolt, TicklessBatchingBolt, Spout, ReliableSpout) over JSON and msgpack, acking through the
shell (anchors, replay on fail), a component with its own interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pystorm
import pytest

from gale import LocalCluster, ShellBolt, ShellSpout, TopologyBuilder
from gale.errors import TopologyError
from tests.multilang_topologies import FailFirst, RecordSink, SentenceSpout, SplitSentence, read_lines
from tests.waiting import eventually

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "multilang"
WORDS = "alpha beta gamma"


def pystorm_bolt(cls: str, serializer: str = "json", **kw):
    return {"command": [sys.executable, "pystorm_components.py", cls, serializer], "cwd": str(FIXTURES), **kw}


def conf(out, n, **extra):
    return {"test.out": str(out), "test.n": n, **extra}


def all_acked(out, n, timeout=60):
    def check():
        acked = sorted(int(x) for x in read_lines(str(out), "acked-"))
        assert acked == list(range(n)), f"{len(acked)} of {n} acked"
    eventually(check, timeout)


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_pystorm_bolt_splits_every_sentence_with_acking_through_the_shell(tmp_path, serializer):
    n = 300
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("split", ShellBolt, 2, kwargs=pystorm_bolt("SplitBolt", serializer, outputs=["word"])
               ).shuffle_grouping("sentences")
    b.set_bolt("sink", RecordSink).shuffle_grouping("split")
    topo = b.create_topology("split", conf=conf(tmp_path, n, **{"topology.multilang.serializer": serializer}))
    with LocalCluster() as cluster:
        running = cluster.submit_topology("split", {}, topo)
        all_acked(tmp_path, n)
        words = Counter(w for (w,) in read_lines(str(tmp_path), "sink-"))
        assert words == Counter({**{f"s{i}": 1 for i in range(n)}, "alpha": n, "beta": n, "gamma": n})
        stats = running.component_stats()
        assert stats["split"]["executed"] == n and stats["split"]["acked"] == n and stats["split"]["emitted"] == 4 * n
        assert running.errors == {}


def test_a_pystorm_bolt_that_fails_tuples_gets_them_replayed_until_complete(tmp_path):
    n = 100
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("flaky", ShellBolt, kwargs=pystorm_bolt("FlakyBolt", outputs=["sentence"])).shuffle_grouping("sentences")
    b.set_bolt("sink", RecordSink).shuffle_grouping("flaky")
    with LocalCluster() as cluster:
        running = cluster.submit_topology("flaky", {}, b.create_topology("flaky", conf=conf(tmp_path, n)))
        all_acked(tmp_path, n)
        assert sorted(s for (s,) in read_lines(str(tmp_path), "sink-")) == sorted(f"s{i} {WORDS}" for i in range(n))
        stats = running.component_stats()
        assert stats["flaky"]["failed"] == n and stats["sentences"]["failed"] == n and stats["sentences"]["acked"] == n


def test_a_failure_downstream_of_a_pystorm_bolt_replays_through_its_anchors(tmp_path):
    """The shell bolt anchors its emits: a native bolt failing them fails the spout tuple."""
    n = 50
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("split", ShellBolt, kwargs=pystorm_bolt("SplitBolt", outputs=["word"])).shuffle_grouping("sentences")
    b.set_bolt("failfirst", FailFirst).fields_grouping("split", ["word"])
    with LocalCluster() as cluster:
        running = cluster.submit_topology("anchors", {}, b.create_topology("anchors", conf=conf(tmp_path, n)))
        all_acked(tmp_path, n)
        stats = running.component_stats()
        assert stats["sentences"]["failed"] >= 1  # the first tree with a new word failed and replayed
        assert stats["failfirst"]["failed"] == n + 3  # each distinct word failed once: s0..s49 + 3 words


@pytest.mark.parametrize("bolt,extra", [
    ("WordCountBatches", {"topology.tick.tuple.freq.secs": 0.2}),
    ("WordCountTickless", {}),
])
def test_pystorm_batching_bolts_count_every_word(tmp_path, bolt, extra):
    n = 200
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("split", ShellBolt, kwargs=pystorm_bolt("SplitBolt", outputs=["word"])).shuffle_grouping("sentences")
    b.set_bolt("count", ShellBolt, 2, kwargs=pystorm_bolt(bolt, outputs=["word", "count"])
               ).fields_grouping("split", ["word"]).add_configurations(extra)  # ticks for the batching bolt only
    b.set_bolt("sink", RecordSink).shuffle_grouping("count")
    with LocalCluster() as cluster:
        running = cluster.submit_topology("batches", {}, b.create_topology("batches", conf=conf(tmp_path, n)))
        all_acked(tmp_path, n)

        def counted():
            totals = Counter()
            for word, count in read_lines(str(tmp_path), "sink-"):
                totals[word] += count
            assert totals == Counter({**{f"s{i}": 1 for i in range(n)}, "alpha": n, "beta": n, "gamma": n})
        eventually(counted, 30)
        assert running.errors == {}


@pytest.mark.parametrize("spout", ["NumberSpout", "ReliableNumberSpout"])
def test_pystorm_spouts_replay_failed_tuples_until_every_one_is_acked(tmp_path, spout):
    n = 200
    b = TopologyBuilder()
    b.set_spout("numbers", ShellSpout, 2, kwargs=pystorm_bolt(spout, outputs=["sentence"]))
    b.set_bolt("failfirst", FailFirst).shuffle_grouping("numbers")
    with LocalCluster() as cluster:
        running = cluster.submit_topology("spouts", {}, b.create_topology("spouts", conf=conf(tmp_path, n)))

        def every_task_acked_all():
            acked = Counter(int(x) for x in read_lines(str(tmp_path), "acked-"))
            # each of the 2 spout tasks emits every number: each acked once per task
            assert acked == Counter({i: 2 for i in range(n)}), f"{sum(acked.values())} of {2 * n} acks"
        eventually(every_task_acked_all, 60)
        stats = running.component_stats()
        assert stats["numbers"]["failed"] == n and stats["numbers"]["acked"] == 2 * n
        assert running.errors == {}


def test_msgpack_spout_and_bolt(tmp_path):
    n = 100
    b = TopologyBuilder()
    b.set_spout("numbers", ShellSpout, kwargs=pystorm_bolt("NumberSpout", "msgpack", outputs=["sentence"]))
    b.set_bolt("split", ShellBolt, kwargs=pystorm_bolt("SplitBolt", "msgpack", outputs=["word"])
               ).shuffle_grouping("numbers")
    b.set_bolt("sink", RecordSink).shuffle_grouping("split")
    with LocalCluster() as cluster:
        cluster.submit_topology("mp", {}, b.create_topology(
            "mp", conf=conf(tmp_path, n, **{"topology.multilang.serializer": "msgpack"})))
        all_acked(tmp_path, n)
        assert len(read_lines(str(tmp_path), "sink-")) == 2 * n


def test_the_handshake_carries_conf_and_context_but_no_credentials(tmp_path):
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("hello", ShellBolt, kwargs=pystorm_bolt("HandshakeBolt", outputs=["name", "comp", "task", "secret",
                                                                                "n", "sentence"])
               ).shuffle_grouping("sentences")
    b.set_bolt("sink", RecordSink).shuffle_grouping("hello")
    topo = b.create_topology("hello", conf=conf(tmp_path, 5, **{"topology.secret": "s3cret"}))
    with LocalCluster() as cluster:
        running = cluster.submit_topology("hello", {}, topo)
        all_acked(tmp_path, 5)
        task = running.layout.component_tasks("hello")[0]
    assert {tuple(r[:5]) for r in read_lines(str(tmp_path), "sink-")} == {("hello", "hello", task, False, 5)}


def test_a_component_runs_with_its_own_interpreter_from_its_bundle(tmp_path):
    """A bundle with its own virtual environment: the command is a path relative to the component's
    working directory (a venv created here, seeing pystorm through a .pth file)."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "pystorm_components.py").write_text((FIXTURES / "pystorm_components.py").read_text())
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bundle / "venv")], check=True)
    site = next((bundle / "venv" / "lib").glob("python3*/site-packages"))
    (site / "gale_test_deps.pth").write_text(str(Path(pystorm.__file__).parent.parent) + "\n")
    out = tmp_path / "out"
    out.mkdir()
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("prefix", ShellBolt, kwargs={"command": ["venv/bin/python", "pystorm_components.py", "PrefixBolt"],
                                            "cwd": "bundle", "outputs": ["prefix", "sentence"]}
               ).shuffle_grouping("sentences")
    b.set_bolt("sink", RecordSink).shuffle_grouping("prefix")
    topo = b.create_topology("venv", conf=conf(out, 20))
    topo.code_dir = str(tmp_path)  # as the loader sets it for a topology file in tmp_path
    with LocalCluster() as cluster:
        cluster.submit_topology("venv", {}, topo)
        all_acked(out, 20)
    prefixes = {prefix for prefix, _ in read_lines(str(out), "sink-")}
    assert prefixes == {str(bundle / "venv")} and os.path.realpath(sys.prefix) != str(bundle / "venv")


def test_a_shell_bolt_subclass_names_its_command_and_outputs_as_in_storm(tmp_path):
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("split", SplitSentence).shuffle_grouping("sentences")
    b.set_bolt("sink", RecordSink).shuffle_grouping("split")
    topo = b.create_topology("sub", conf=conf(tmp_path, 10))
    assert topo.definition.components["split"].streams["default"].fields == ["word"]
    with LocalCluster() as cluster:
        cluster.submit_topology("sub", {}, topo)
        all_acked(tmp_path, 10)
    assert len(read_lines(str(tmp_path), "sink-")) == 40


@pytest.mark.parametrize("kwargs,expected", [
    ({"command": []}, "command must be a non-empty list of strings"),
    ({"command": ["python3", 3]}, "command must be a non-empty list of strings"),
    ({"command": ["x"], "outputs": "word"}, "outputs must be a list of field names"),
    ({"command": ["x"], "env": {1: "a"}}, "env must map variable names to strings"),
])
def test_shell_component_settings_are_checked_when_the_topology_is_built(kwargs, expected):
    b = TopologyBuilder()
    b.set_spout("sentences", SentenceSpout)
    b.set_bolt("split", ShellBolt, kwargs=kwargs).shuffle_grouping("sentences")
    with pytest.raises(TopologyError, match=expected):
        b.create_topology("bad")
