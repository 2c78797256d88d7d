"""Managed state in local mode: the builder's checkpoint wiring, submit-time validation, and Storm's
at-least-once checkpoint protocol end to end (real runtime, real acker, memory provider)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

import gale
from gale import TopologyBuilder, TopologyError
from gale.topology.state import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM, pack, unpack_value
from gale.worker.local import LocalCluster
from gale.worker.state.inspect import read_committed
from gale.worker.state.task_state import WRITER_KEY
from tests.state_topologies import BadValueCount, FlakySplit, NumberedSentences, Sink, StatefulCount, sentence
from tests.waiting import eventually, until


def word_count(count_parallelism: int = 2, sink: bool = True, count=StatefulCount) -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("sentences", NumberedSentences, 2)
    b.set_bolt("split", FlakySplit, 2).shuffle_grouping("sentences")
    b.set_bolt("count", count, count_parallelism).fields_grouping("split", ["word"])
    if sink:
        b.set_bolt("sink", Sink, 1).shuffle_grouping("count")
    return b


def test_builder_adds_the_checkpoint_spout_stream_and_subscriptions():
    defn = word_count().create_topology("wc").definition
    cp = defn.components[CHECKPOINT_COMPONENT]
    assert cp.kind == "spout" and cp.tasks == 1 and cp.streams[CHECKPOINT_STREAM].fields == ["txid", "action"]
    for bolt, source in (("split", CHECKPOINT_COMPONENT), ("count", "split"), ("sink", "count")):
        comp = defn.components[bolt]
        assert CHECKPOINT_STREAM in comp.streams
        cp_inputs = [(i.component, i.grouping.type) for i in comp.inputs if i.stream == CHECKPOINT_STREAM]
        assert cp_inputs == [(source, "all")]
    # the definition survives the trip to nimbus as JSON
    assert gale.Topology.from_json(defn.to_json()).definition == defn


def test_a_topology_without_state_gets_no_checkpointing():
    b = TopologyBuilder()
    b.set_spout("sentences", NumberedSentences, 1)
    b.set_bolt("split", FlakySplit, 1).shuffle_grouping("sentences")
    defn = b.create_topology().definition
    assert CHECKPOINT_COMPONENT not in defn.components
    assert CHECKPOINT_STREAM not in defn.components["split"].streams


def test_checkpoint_interval_not_below_the_message_timeout_is_refused():
    with pytest.raises(TopologyError, match=r"checkpoint.interval.ms \(30000\) must be below topology.message.timeout"):
        word_count().create_topology("wc", {"topology.state.checkpoint.interval.ms": 30000})
    topo = word_count().create_topology("wc", {"topology.message.timeout.secs": 5})
    with LocalCluster() as cluster, pytest.raises(TopologyError, match=r"\(6000\) must be below"):
        cluster.submit_topology("wc", {"topology.state.checkpoint.interval.ms": 6000}, topo)


class WordWindows(gale.WindowedBolt):
    """Tumbling windows of 10 words; records each window's words (local mode: read back from the runner)."""

    output_fields = ["n"]

    def __init__(self):
        super().__init__()
        self.with_tumbling_window(gale.Count.of(10))
        self.windows: list[list[str]] = []

    def execute(self, window):
        self.windows.append([t["word"] for t in window.get()])
        self.collector.emit([len(window)])


def test_a_windowed_bolt_forwards_checkpoints_in_a_topology_with_state():
    """A windowed bolt between a stateful bolt's upstream and a sink: checkpoints only complete if it
    forwards them (the sink reads its $checkpoint stream); its windows fire as without state."""
    n = 400
    words = [w for i in range(n) for w in sentence(i).split()]
    assert len(words) % 10 == 0  # every window fills, so every sentence is acked
    b = word_count(sink=False)
    b.set_bolt("windows", WordWindows, 1).global_grouping("split")
    b.set_bolt("sink", Sink, 1).shuffle_grouping("windows")
    conf = {"test.sentences": n, "topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 50}
    topo = b.create_topology("wc", conf)
    assert [i.component for i in topo.definition.components["sink"].inputs if i.stream == CHECKPOINT_STREAM] == [
        "windows"]
    with LocalCluster() as cluster:
        running = cluster.submit_topology("wc-windows", {}, topo)

        def all_acked_and_committed():
            acked = set().union(*(s.acked_ids for s in spouts_of(running, "sentences")))
            assert len(acked) == n, f"{len(acked)} of {n} sentences acked"
            stats = running.component_stats()
            assert stats[CHECKPOINT_COMPONENT]["extra"]["checkpoints_committed"] >= 2
            return counts_in(running)

        counts = eventually(all_acked_and_committed, timeout=60)
        windows = [w for r in bolts_of(running, "windows") for w in r.bolt.windows]
        errors = dict(running.errors)
    assert counts == dict(Counter(words))
    # as the reference: consecutive windows of 10 words, together every word once
    assert [len(w) for w in windows] == [10] * (len(words) // 10)
    assert Counter(w for window in windows for w in window) == Counter(words)
    assert not errors


def counts_in(running, component="count"):
    provider = running.runtime.resources["state"]
    return read_committed(provider, running.runtime.resources["state_prefix"], component, key_groups=128)


def spouts_of(running, component):
    return [s for ex in running.runtime.executors.values() if ex.component == component
            for s in getattr(ex, "spouts", {}).values()]


def bolts_of(running, component):
    return [b for ex in running.runtime.executors.values() if ex.component == component
            for b in getattr(ex, "bolts", {}).values()]


@pytest.mark.parametrize("fail_every,fail_prepare", [(0, 0), (7, 0), (0, 3), (5, 2)])
def test_counts_exact_with_replays_and_rolled_back_checkpoints(fail_every, fail_prepare):
    n = 400
    expected = Counter(w for i in range(n) for w in sentence(i).split())
    conf = {
        "test.sentences": n, "test.fail.every": fail_every, "test.fail.prepare": fail_prepare,
        "topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 50,
    }
    topo = word_count().create_topology("wc", conf)
    with LocalCluster() as cluster:
        running = cluster.submit_topology(f"wc-{fail_every}-{fail_prepare}", {}, topo)

        def all_acked_and_committed():
            acked = set().union(*(s.acked_ids for s in spouts_of(running, "sentences")))
            assert len(acked) == n, f"{len(acked)} of {n} sentences acked"
            return counts_in(running)

        counts = eventually(all_acked_and_committed, timeout=60)
        stats = running.component_stats()
        replays = sum(s.replayed for s in spouts_of(running, "sentences"))
        rollbacks = sum(b.rollbacks for b in bolts_of(running, "count"))
        errors = dict(running.errors)
    # every sentence acked means its words are in a committed checkpoint, and only once
    assert counts == dict(expected)
    if fail_every:
        assert replays >= n // fail_every
    if fail_prepare:
        # the injected prepare failure rolled the state back and replayed what it had counted
        assert rollbacks >= 1 and stats[CHECKPOINT_COMPONENT]["extra"]["checkpoint_failures"] >= 1
        assert any("injected prepare failure" in e for e in errors["count"])
    else:
        assert "count" not in errors
    assert stats[CHECKPOINT_COMPONENT]["extra"]["checkpoints_committed"] >= 1
    assert stats[CHECKPOINT_COMPONENT]["extra"]["checkpoint_txid_max"] >= 1
    assert stats["count"]["extra"]["state_keys_max"] >= 1
    assert stats["count"]["extra"]["state_bytes_written"] > 0


def test_state_survives_a_restart_of_the_topology_with_the_same_provider():
    """The memory provider outlives a topology run when handed over (as Redis does across workers):
    a second run resumes from the committed counts."""
    n = 120
    expected = Counter(w for i in range(n) for w in sentence(i).split())
    conf = {"test.sentences": n, "topology.state.checkpoint.interval.ms": 50}
    topo = word_count(sink=False).create_topology("wc", conf)
    with LocalCluster() as cluster:
        first = cluster.submit_topology("wc", {}, topo)
        eventually(lambda: _assert_eq(counts_in(first), dict(expected)), timeout=60)
        provider = first.runtime.resources["state"]
        first.runtime.resources.pop("state")  # keep it open across the restart
        cluster.kill_topology("wc")
        from gale.worker.local import LocalTopology, local_conf

        second = LocalTopology("wc", topo, local_conf(topo), start=False)
        second.runtime.resources["state"] = provider
        second.runtime.start(active=True)
        try:
            eventually(lambda: _assert_eq(counts_in(second), {w: 2 * c for w, c in expected.items()}), timeout=60)
            restored = [b.counts for b in bolts_of(second, "count")]
            assert sum(len(s) for s in restored) == len(expected)
        finally:
            second.kill()


def test_a_new_version_with_another_key_type_is_reported_not_mixed():
    """Version 1 counts words (str keys); version 2, submitted under the same name (another
    submission: another topology id), counts word ids (int keys) over the same state: every put of
    an int key fails, reported on the component naming both key types, and the state keeps only
    version 1's str keys."""
    from gale.worker.local import LocalTopology, local_conf
    from tests.state_topologies import WordIds

    n = 40
    expected = Counter(w for i in range(n) for w in sentence(i).split())
    conf = {"test.sentences": n, "topology.state.checkpoint.interval.ms": 50, "topology.name": "wc"}
    v1 = word_count(sink=False).create_topology("wc", conf)
    b = TopologyBuilder()
    b.set_spout("sentences", NumberedSentences, 1)
    b.set_bolt("split", WordIds, 1).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulCount, 2).fields_grouping("split", ["word"])
    v2 = b.create_topology("wc", conf)
    first = LocalTopology("wc-v1", v1, local_conf(v1))
    try:
        eventually(lambda: _assert_eq(counts_in(first), dict(expected)), timeout=60)
        provider = first.runtime.resources.pop("state")  # keep it open, as Redis would be
    finally:
        first.kill()
    second = LocalTopology("wc-v2", v2, local_conf(v2), start=False)
    second.runtime.resources["state"] = provider
    second.runtime.start(active=True)
    try:
        def reported():
            errors = second.errors.get("count", [])
            assert any(re.search(r"state key \d+ has type int, but the state of component 'count' was written by "
                                 r"another submission of the topology \(topology id wc-v1-local\) with keys of type "
                                 r"str", e) for e in errors), errors

        eventually(reported, timeout=60)

        def txid():
            record = json.loads(provider.get_meta("wc/__state"))
            # the last committed checkpoint (PREPARING/COMMITTING n: n - 1 is the last one committed)
            return record["txid"] - (record["state"] != "COMMITTED")

        seen = until(txid, 30, lambda: "no checkpoint committed")
        # two more checkpoints committed after the report: had an int key been put, it would be in them
        until(lambda: txid() >= seen + 2, 30, lambda: f"checkpoints committed: {txid()}, waiting for {seen + 2}")
        assert read_committed(provider, "wc", "count", key_groups=128) == dict(expected)
    finally:
        second.kill()


def _assert_eq(actual, expected):
    assert actual == expected
    return actual


def test_a_value_that_cannot_be_serialized_fails_the_put_naming_key_and_type():
    n = 5
    topo = word_count(sink=False, count=BadValueCount).create_topology(
        "bad", {"test.sentences": n, "topology.state.checkpoint.interval.ms": 50})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("bad", {}, topo)

        def reported():
            errors = running.errors.get("count", [])
            assert any(re.search(r"state value for key '\w+' has type object, which cannot be serialized", e)
                       for e in errors), errors
            return errors

        errors = eventually(reported, timeout=30)
    assert "StateError" in errors[0]


def test_the_stateful_word_count_example_commits_every_counted_word():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import stateful_word_count

    topo = stateful_word_count.topology({"wordcount.sentences.per.task": 300})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("swc", {"topology.state.checkpoint.interval.ms": 50}, topo)

        def all_acked_and_committed():
            stats = running.component_stats()
            assert stats["sentences"]["acked"] == 300, stats["sentences"]
            counts = counts_in(running)
            assert sum(counts.values()) == stats["count"]["executed"], (sum(counts.values()), stats["count"])
            return counts

        counts = eventually(all_acked_and_committed, timeout=60)
    assert set(counts) <= {w for s in __import__("word_count").SENTENCES for w in s.split()}


def test_status_line_on_checkpoints():
    from gale.nimbus.cli_queries import checkpoint_line

    assert checkpoint_line({"count": {"stats": {"extra": {}}}}, 100.0) is None
    components = {
        CHECKPOINT_COMPONENT: {"stats": {"extra": {"checkpoint_txid_max": 7, "checkpoint_commit_time_secs": 98.5,
                                                   "checkpoints_committed": 7, "checkpoint_duration_ms": 12.4,
                                                   "checkpoint_failures": 1}}},
        "count": {"stats": {"extra": {"state_bytes_written": 300}}},
        "split": {"stats": None},
    }
    assert checkpoint_line(components, 100.0) == (
        "checkpoints: txid 7 committed 1.5s ago, 7 committed, last took 12 ms, 1 failed; state written 300 bytes")


def test_tuples_delivered_by_another_thread_while_the_executor_runs_are_all_counted():
    """The transfer receiver appends to a task's queue from its own thread while the executor thread
    works through it (a worker crashed with "deque mutated during iteration" before this was fixed)."""
    import threading

    from gale.topology.tuple import new_tuple

    topo = word_count(count_parallelism=1, sink=False).create_topology(
        "race", {"test.sentences": 0, "topology.state.checkpoint.interval.ms": 20})
    n = 150_000
    with LocalCluster() as cluster:
        running = cluster.submit_topology("race", {}, topo)
        runtime = running.runtime
        (count_task,) = runtime.layout.component_tasks("count")
        split_task = runtime.layout.component_tasks("split")[0]
        fields = runtime._stream_fields[("split", "default")]
        eventually(lambda: _assert_eq(all(ex.layers["checkpoint"].ready[count_task] for ex in runtime.executors.values()
                                          if ex.component == "count"), True), timeout=30)

        def deliver():
            for i in range(n):
                runtime.deliver(count_task, new_tuple([f"w{i % 50}"], fields, split_task, None))

        threads = [threading.Thread(target=deliver) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        def all_committed():
            if not all(t.is_alive() for t in runtime.threads):
                raise RuntimeError(f"an executor thread died: {runtime.errors}")  # not retried
            counts = counts_in(running)
            assert sum(counts.values()) == 2 * n
            return counts

        counts = eventually(all_committed, timeout=60)
    assert counts == {f"w{i}": 2 * n // 50 for i in range(50)}


def test_per_task_state_of_a_shuffle_grouped_stateful_bolt():
    from tests.state_topologies import TaskTotals

    n = 200
    words = sum(len(sentence(i).split()) for i in range(n))
    b = TopologyBuilder()
    b.set_spout("sentences", NumberedSentences, 1)
    b.set_bolt("split", FlakySplit, 1).shuffle_grouping("sentences")
    b.set_bolt("totals", TaskTotals, 3).shuffle_grouping("split")
    topo = b.create_topology("tt", {"test.sentences": n, "topology.state.checkpoint.interval.ms": 50})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("tt", {}, topo)
        provider = running.runtime.resources["state"]

        def per_task():
            loaded = provider.load([f"{running.runtime.resources['state_prefix']}/totals/task{i}" for i in range(3)])
            # each task index has its own namespace holding its own 'total' (and its writer record)
            loaded = {ns: {k: v for k, v in c.items() if k != WRITER_KEY} for ns, c in loaded.items()}
            assert [list(v) for v in loaded.values()] == [[pack("total")]] * 3, loaded
            counts = [unpack_value(next(iter(v.values()))) for v in loaded.values()]
            assert sum(counts) == words, (counts, words)
            return counts

        counts = eventually(per_task, timeout=60)
    assert all(c > 0 for c in counts)  # shuffled over all three tasks


def test_a_put_of_a_key_another_task_owns_is_reported_naming_key_and_grouping():
    from tests.state_topologies import ForeignKeyCount

    topo = word_count(count_parallelism=4, sink=False, count=ForeignKeyCount).create_topology(
        "fk", {"test.sentences": 20, "topology.state.checkpoint.interval.ms": 50})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("fk", {}, topo)

        def reported():
            errors = running.errors.get("count", [])
            assert any(re.search(r"state key 'total:\w+' belongs to key group \d+, owned by task index \d of "
                                 r"'count', not this task .*grouping fields \['word'\]", e) for e in errors), errors

        eventually(reported, timeout=30)
