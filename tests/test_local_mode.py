"""The data plane end to end in local mode (real executors, real acker, real runtime)."""

import sys
import time
from collections import Counter
from pathlib import Path

from gale import Bolt, Spout, TopologyBuilder
from gale.clock import SimulatedClock
from gale.worker.local import LocalCluster, LocalTopology, complete_topology, local_conf
from tests.waiting import until
from tests.topologies import (
    BasicFailOn, DirectEmitter, FailOn, FanOut, Identity, Joiner, ListSpout, Never, RaiseOn, Sink, TaskRecorder,
    Ticker,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import word_count  # noqa: E402


def chain(*bolts, spout_values=(1, 2, 3)):
    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[list(spout_values)])
    prev = "src"
    for name, cls, kwargs in bolts:
        b.set_bolt(name, cls, 2, kwargs=kwargs).shuffle_grouping(prev)
        prev = name
    return b


def test_word_count_counts_exact_and_every_sentence_acked_once():
    sentences = [[word_count.SENTENCES[i % len(word_count.SENTENCES)]] for i in range(500)]
    expected = Counter(w for (s,) in sentences for w in s.split())
    res = complete_topology(word_count.topology(), {"sentences": sentences})
    assert res.failed == []
    assert res.acked == list(range(500))
    final = {}
    for word, count in res.read("count"):
        final[word] = max(final.get(word, 0), count)
    assert final == dict(expected)
    assert res.stats["count"]["executed"] == sum(expected.values())
    assert res.stats["sentences"]["acked"] == 500


def test_word_count_with_replaying_spout_in_local_cluster():
    topo = word_count.topology({"wordcount.sentences.per.task": 3000})
    with LocalCluster() as cluster:
        running = cluster.submit_topology("wc", {}, topo)
        st = until(lambda: (lambda s: s if s["sentences"]["acked"] >= 3000 else None)(running.component_stats()), 60,
                   "3000 sentences acked")
        spout = next(iter(running.runtime.executors[(ex)] for ex in running.runtime.executors
                          if running.layout.executor_to_component[ex] == "sentences")).spouts
        counts = Counter()
        for ex_id, ex in running.runtime.executors.items():
            if running.layout.executor_to_component[ex_id] == "count":
                for bolt in ex.bolts.values():
                    counts.update(bolt.counts)
    assert st["sentences"]["acked"] == 3000 and st["sentences"]["failed"] == 0
    (s,) = spout.values()
    assert s.acked == 3000 and s.failed == 0 and not s.pending
    assert sum(counts.values()) == st["split"]["emitted"]
    assert st["sentences"]["complete_latency_ms"] > 0


def test_linear_chain_and_fan_out():
    b = chain(("id", Identity, {}), ("fan", FanOut, {"n": 3}), ("sink", Sink, {}))
    res = complete_topology(b.create_topology(), {"src": [["a"], ["b"]]})
    assert res.acked == [0, 1] and res.failed == []
    assert sorted(v for (v,) in res.read("fan")) == ["a.0", "a.1", "a.2", "b.0", "b.1", "b.2"]


def test_failure_at_a_node_fails_only_its_spout_tuples():
    b = chain(("fan", FanOut, {"n": 2}), ("check", FailOn, {"bad": ["b.1", "d.0"]}))
    res = complete_topology(b.create_topology(), {"src": [["a"], ["b"], ["c"], ["d"]]})
    assert res.failed == [1, 3]
    assert res.acked == [0, 2]


def test_exception_in_execute_fails_input_and_is_reported():
    b = chain(("boom", RaiseOn, {"bad": ["x"]}), ("sink", Sink, {}))
    res = complete_topology(b.create_topology(), {"src": [["ok"], ["x"], ["fine"]]})
    assert res.failed == [1] and res.acked == [0, 2]
    assert "ValueError: cannot handle 'x'" in res.errors["boom"][0]
    assert res.stats["boom"]["errors"] == 1


def test_basic_bolt_failed_exception_fails_without_report():
    b = chain(("bf", BasicFailOn, {"bad": ["x"]}))
    res = complete_topology(b.create_topology(), {"src": [["x"], ["y"]]})
    assert res.failed == [0] and res.acked == [1]
    assert "bf" not in res.errors


def test_multi_anchored_dag():
    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[["a", "b", "c", "d"]])
    b.set_bolt("join", Joiner, 1).global_grouping("src")
    b.set_bolt("check", FailOn, 1, kwargs={"bad": ["c+d"]}).shuffle_grouping("join")
    res = complete_topology(b.create_topology(), {"src": [["a"], ["b"], ["c"], ["d"]]})
    # the joined tuple a+b is anchored to both a and b; c+d fails and fails both of its roots
    assert res.acked == [0, 1]
    assert res.failed == [2, 3]


def test_ackers_zero_acks_right_after_emit():
    b = chain(("never", Never, {}))
    res = complete_topology(b.create_topology(), {"src": [["a"], ["b"]]}, conf={"topology.acker.executors": 0})
    assert res.acked == [0, 1] and res.failed == []


def test_unanchored_emit_is_not_tracked():
    class Unanchored(Bolt):
        def declare_output_fields(self, d):
            d.declare(["v"])

        def execute(self, tup):
            self.collector.emit([tup[0]])  # not anchored
            self.collector.ack(tup)

    import tests.topologies as tt

    tt.Unanchored = Unanchored
    Unanchored.__module__, Unanchored.__qualname__ = "tests.topologies", "Unanchored"
    b = chain(("u", Unanchored, {}), ("never", Never, {}))
    res = complete_topology(b.create_topology(), {"src": [["a"]]})
    assert res.acked == [0]  # the downstream Never bolt does not hold the tree open


def test_direct_grouping_and_tasks():
    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[["a"]])
    b.set_bolt("d", DirectEmitter, 1).shuffle_grouping("src")
    b.set_bolt("direct_target", TaskRecorder, 3).direct_grouping("d")
    topo = b.create_topology()
    res = complete_topology(topo, {"src": [["a"], ["b"], ["c"]]})
    tasks = {t for _, t in res.read("direct_target")}
    assert len(tasks) == 1 and res.acked == [0, 1, 2]


def test_fields_grouping_routes_same_key_to_same_task():
    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[[]])
    b.set_bolt("rec", TaskRecorder, 4).fields_grouping("src", ["v"])
    values = [[f"k{i % 7}"] for i in range(200)]
    res = complete_topology(b.create_topology(), {"src": values})
    by_key = {}
    for v, task in res.read("rec"):
        by_key.setdefault(v, set()).add(task)
    assert all(len(t) == 1 for t in by_key.values())
    assert len({next(iter(t)) for t in by_key.values()}) > 1


def _simulated(topology, conf=None):
    clock = SimulatedClock()
    lt = LocalTopology("sim", topology, local_conf(topology, conf), clock=clock, spawn=False)
    return lt, clock


def _spout(lt, name="src"):
    for ex_id, ex in lt.runtime.executors.items():
        if lt.layout.executor_to_component[ex_id] == name:
            return next(iter(ex.spouts.values()))


def test_timeout_in_simulated_time_not_before_and_by_twice_the_timeout():
    b = chain(("never", Never, {}), spout_values=["a"])
    lt, clock = _simulated(b.create_topology(), {"topology.message.timeout.secs": 10})
    rt = lt.runtime
    rt.run_until_idle()
    spout = _spout(lt)
    assert spout.i == 1 and spout.failed == []
    clock.advance(9)  # 0.9 × timeout
    rt.run_until_idle()
    assert spout.failed == []
    clock.advance(11.1)  # past 2 × timeout
    rt.fire_timers(clock.monotonic())
    rt.run_until_idle()
    assert spout.failed == [0] and spout.acked == []
    st = lt.component_stats()["src"]
    assert st["failed"] == 1 and st["extra"]["timed_out"] == 1
    rt.stop()


def test_reset_timeout_keeps_tree_alive():
    class Slow(Bolt):
        def prepare(self, conf, context, collector):
            super().prepare(conf, context, collector)
            self.held = []

        def execute(self, tup):
            if tup.is_tick():
                for t in self.held:
                    self.collector.reset_timeout(t)
                return
            self.held.append(tup)

        def component_configuration(self):
            return {"topology.tick.tuple.freq.secs": 4}

    import tests.topologies as tt

    tt.Slow = Slow
    Slow.__module__, Slow.__qualname__ = "tests.topologies", "Slow"
    b = chain(("slow", Slow, {}), spout_values=["a"])
    lt, clock = _simulated(b.create_topology(), {"topology.message.timeout.secs": 10})
    rt = lt.runtime
    rt.run_until_idle()
    spout = _spout(lt)
    for _ in range(12):  # 48 simulated seconds, resetting every 4
        clock.advance(4)
        rt.fire_timers(clock.monotonic())
        rt.run_until_idle()
    assert spout.failed == []
    rt.stop()


def test_max_spout_pending_limits_in_flight():
    b = chain(("never", Never, {}), spout_values=list(range(100)))
    lt, clock = _simulated(b.create_topology(), {"topology.max.spout.pending": 7})
    lt.runtime.run_until_idle()
    assert _spout(lt).i == 7
    assert lt.component_stats()["src"]["pending"] == 7
    lt.runtime.stop()


def test_tick_tuples():
    b = chain(("tick", Ticker, {}), spout_values=[])
    lt, clock = _simulated(b.create_topology())
    rt = lt.runtime
    for _ in range(5):
        clock.advance(1.0)
        rt.fire_timers(clock.monotonic())
        rt.run_until_idle()
    assert lt.component_stats()["tick"]["emitted"] == 2 * 5  # 2 executors, 5 ticks each
    rt.stop()


def test_error_reports_are_throttled_per_executor():
    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[[]])
    b.set_bolt("boom", RaiseOn, 1, kwargs={"bad": list(range(50))}).shuffle_grouping("src")
    res = complete_topology(b.create_topology(), {"src": [[i] for i in range(50)]})
    assert res.failed == list(range(50))
    assert len(res.errors["boom"]) == 5  # topology.max.error.report.per.interval
    assert res.stats["boom"]["errors"] == 50


def test_deactivate_stops_next_tuple():
    b = chain(("sink", Sink, {}), spout_values=list(range(10)))
    lt, clock = _simulated(b.create_topology(), {"topology.max.spout.pending": 1})
    rt = lt.runtime
    rt.set_active(False)
    rt.run_until_idle()
    assert _spout(lt).i == 0
    rt.set_active(True)
    rt.run_until_idle()
    assert _spout(lt).i == 10 and len(_spout(lt).acked) == 10
    rt.stop()


def test_backpressure_pauses_spout_when_downstream_full():
    b = chain(("never", Never, {}), spout_values=list(range(5000)))
    lt, clock = _simulated(b.create_topology(), {"topology.executor.receive.buffer.size": 100})
    rt = lt.runtime
    # run only the spout's executor: downstream queues fill and the spout must stop
    spout_ex = next(ex for ex in rt.executors.values() if ex.kind == "spout")
    for _ in range(50):
        rt.update_congestion()
        spout_ex.run_batch(100)
    assert rt.congested
    assert _spout(lt).i < 400
    rt.stop()


def test_exclamation_example():
    import exclamation

    res = complete_topology(exclamation.topology(), {"word": [["nathan"], ["mike"], ["golda"]]})
    assert sorted(v for (v,) in res.read("exclaim2")) == ["golda!!!!!!", "mike!!!!!!", "nathan!!!!!!"]
    assert res.acked == [0, 1, 2]


def test_nimbus_local_cli_prints_stats_json():
    import json
    import subprocess

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "gale.nimbus.cli", "local", str(root / "examples" / "word_count.py"),
                           "--duration", "1.5", "--json", "-c", "topology.max.spout.pending=100"],
                          capture_output=True, text=True, cwd=root, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["components"]["sentences"]["acked"] > 0
    assert out["components"]["count"]["executed"] > out["components"]["sentences"]["acked"]
    assert set(out["components"]["split"]) >= {"emitted", "transferred", "acked", "failed", "complete_latency_ms"}


def test_spout_root_ids_are_steered_to_local_ackers():
    """With ackers in several workers, a spout picks root ids whose acker is in its own worker."""
    from gale.topology.definition import TopologyTasks
    from gale.worker.runtime.runtime import WorkerRuntime

    class NoRemote:
        def send_tuple(self, *a): pass
        def send_acker(self, *a): raise AssertionError("init sent to a remote acker")
        def send_result(self, *a): pass
        def congested(self): return False

    b = chain(("sink", Sink, {}), spout_values=list(range(200)))
    topo = b.create_topology()
    conf = local_conf(topo, {"topology.acker.executors": 4})
    layout = TopologyTasks(topo.definition, conf, 1)
    ackers = layout.component_executors["__acker"]
    mine = [ex for ex in layout.executors if layout.executor_to_component[ex] != "__acker"] + ackers[:1]
    rt = WorkerRuntime(topo, topology_id="t", conf=conf, layout=layout, executors=mine, remote=NoRemote())
    rt.start(spawn=False)
    rt.run_until_idle()
    spout_ex = next(ex for ex in rt.executors.values() if ex.kind == "spout")
    assert len(spout_ex.spouts[next(iter(spout_ex.spouts))].acked) == 200
    rt.stop()


def test_a_trees_acks_from_several_executors_of_one_thread_reach_the_acker_as_one_message_per_round():
    """The executors of a thread share one ack buffer, handed to the ackers after each round, and
    run in round order (the spout, then split, then count): a sentence emitted, split and its
    words counted (four count executors) in one round gives one ACK message — not one per
    executor, nor one per round it would take in the components' name order."""
    from gale.topology.definition import TopologyTasks
    from gale.worker.runtime.runtime import WorkerRuntime

    b = TopologyBuilder()
    sentences = [f"w{i} w{i + 1} w{i + 2} w{i + 3} w{i + 4} w{i + 5} w{i + 6} w{i + 7}" for i in range(20)]
    b.set_spout("src", ListSpout, 1, args=[sentences])
    b.set_bolt("split", word_count.SplitSentence, 3).shuffle_grouping("src")
    b.set_bolt("count", word_count.WordCount, 4).fields_grouping("split", ["word"])
    topo = b.create_topology()
    conf = local_conf(topo, {"topology.acker.executors": 1})
    layout = TopologyTasks(topo.definition, conf, 1)
    rt = WorkerRuntime(topo, topology_id="t", conf=conf, layout=layout, executors=list(layout.executors))
    rt.start(spawn=False)
    sent: list[int] = []
    flush = rt.flush_acks

    def counting(buf):
        sent.append(len(buf))  # one (ACK, root, value, 0) message per root
        flush(buf)

    rt.flush_acks = counting
    try:
        rt.run_until_idle()
        spout_ex = next(ex for ex in rt.executors.values() if ex.kind == "spout")
        assert sorted(spout_ex.spouts[next(iter(spout_ex.spouts))].acked) == list(range(20))
        counted = {task for ex in rt.executors.values() if ex.component == "count"
                   for task, bolt in ex.bolts.items() if bolt.counts}
        assert len(counted) == 4  # the words were spread over every count executor
        # a buffer per executor gave 97 (~4 count acks a tree), name order ("count" first) 40
        assert sum(sent) == 20, sent
    finally:
        rt.stop()


class _Blocking(Bolt):
    """Holds the tuple ``"stuck"`` until RELEASE is set; acks everything."""

    RELEASE = None  # a threading.Event, set by the test

    def execute(self, tup):
        if tup[0] == "stuck":
            _Blocking.RELEASE.wait(30)
        self.collector.ack(tup)


def test_a_bolt_stuck_in_execute_is_seen_with_its_tuple_and_for_how_long():
    """Wedge detection reads the tuple the executor thread is running (``Executor.current``) and
    how long it has run (``busy_secs``); both clear once the call returns."""
    import threading

    _Blocking.RELEASE = threading.Event()
    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[["a", "stuck", "b"]])
    b.set_bolt("block", _Blocking, 1).shuffle_grouping("src")
    with LocalCluster() as cluster:
        running = cluster.submit_topology("wedge", {}, b.create_topology())
        (ex,) = [e for e in running.runtime.executors.values() if e.component == "block"]
        try:
            until(lambda: ex.current is not None and ex.current.values == ["stuck"], 30, "the bolt runs 'stuck'")
            ex.busy_secs()  # the first observation of this call
            until(lambda: ex.busy_secs() > 0.05, 30, "busy_secs grows while the call has not returned")
            assert ex.current.values == ["stuck"]
        finally:
            _Blocking.RELEASE.set()
        until(lambda: ex.current is None and ex.busy_secs() == 0.0, 30, "the call returned and the batch ended")


class _StuckSpout(Spout):
    """Emits one tuple, then blocks in ``next_tuple`` until RELEASE is set."""

    RELEASE = None  # a threading.Event, set by the test
    output_fields = ["word"]

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.sent = False

    def next_tuple(self):
        if not self.sent:
            self.sent = True
            self.collector.emit(["a"])
        else:
            _StuckSpout.RELEASE.wait(30)


def test_a_spout_stuck_in_next_tuple_is_seen_for_how_long_and_not_after_it_returns():
    """Wedge detection of a spout's calls: ``in_call`` and a growing ``busy_secs`` while
    ``next_tuple`` has not returned; both clear once it does (the calls that follow are quick)."""
    import threading

    _StuckSpout.RELEASE = threading.Event()
    b = TopologyBuilder()
    b.set_spout("src", _StuckSpout, 1)
    b.set_bolt("sink", Sink, 1).shuffle_grouping("src")
    with LocalCluster() as cluster:
        running = cluster.submit_topology("spout-wedge", {}, b.create_topology())
        (ex,) = [e for e in running.runtime.executors.values() if e.component == "src"]
        try:
            until(lambda: ex.in_call and ex.busy_secs() > 0.05, 30,
                  "busy_secs grows while next_tuple has not returned")
        finally:
            _StuckSpout.RELEASE.set()
        until(lambda: ex.busy_secs() == 0.0 and ex.busy_secs() == 0.0, 30,
              "no call seen running across two observations once next_tuple returns at once")


def test_wedge_detection_tells_one_long_call_from_two_calls_in_a_row():
    """``busy_secs`` times a call seen running at two observations; a call that began after the
    first observation starts from zero, however close its token's value (each call has its own)."""
    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[[]])
    b.set_bolt("sink", Sink, 1).shuffle_grouping("src")
    with LocalCluster() as cluster:
        running = cluster.submit_topology("tokens", {}, b.create_topology())
        (ex,) = [e for e in running.runtime.executors.values() if e.component == "sink"]
        now = [100.0]
        clock, ex.clock = ex.clock, type("Clock", (), {"monotonic": staticmethod(lambda: now[0])})()
        assert not ex.in_call and ex.busy_secs() == 0.0
        ex.enter_call()
        assert ex.in_call and ex.busy_secs() == 0.0  # first seen
        now[0] += 2.5
        assert ex.busy_secs() == 2.5  # the same call, still running
        ex.leave_call()
        ex.enter_call()  # another call
        now[0] += 1.0
        assert ex.busy_secs() == 0.0  # first seen: not the previous call's 3.5 s
        now[0] += 1.0
        assert ex.busy_secs() == 1.0
        ex.leave_call()
        assert not ex.in_call and ex.busy_secs() == 0.0
        ex.clock = clock


def test_a_topology_s_own_configuration_wins_over_the_local_cluster_s_and_a_submit_s_over_both():
    """As with nimbus: cluster configuration ← the topology's ← the submit's."""
    from gale import config as gconfig

    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[["a"]])
    b.set_bolt("sink", Sink, 1).shuffle_grouping("src")
    topo = b.create_topology("prec", {"topology.max.spout.pending": 7, "topology.message.timeout.secs": 11})
    cluster_conf = {**gconfig.defaults(), "topology.max.spout.pending": 99, "topology.tick.tuple.freq.secs": 3}
    with LocalCluster(cluster_conf) as cluster:
        running = cluster.submit_topology("prec", {"topology.message.timeout.secs": 12}, topo)
        conf = running.conf
    assert conf["topology.max.spout.pending"] == 7  # the topology's, not the cluster's
    assert conf["topology.message.timeout.secs"] == 12  # the submit's
    assert conf["topology.tick.tuple.freq.secs"] == 3  # the cluster's, where the topology says nothing


def _mean_idle_wait(runtime, idle: float = 0.5) -> float:
    """How long the executor thread's sleeps last on average: its idle seconds over its rounds, from
    now until it has slept ``idle`` seconds more (every round of an idle thread ends in a sleep)."""
    thread = runtime.threads[0]
    r0, i0 = thread.rounds, thread.idle_secs
    until(lambda: thread.idle_secs - i0 >= idle, 30, lambda: f"idle {thread.idle_secs - i0:.3f}s of {idle}s")
    return (thread.idle_secs - i0) / max(1, thread.rounds - r0)


def test_an_idle_thread_polls_its_spouts_while_active_and_sleeps_between_timers_when_deactivated():
    """Storm's spout wait (1 ms) while an active spout may emit; a deactivated topology's thread
    sleeps until its next timer (50 ms; Storm's inactive spout sleeps 100 ms), and activation wakes
    it: the spout emits again."""
    b = chain(("sink", Sink, {}), spout_values=[])
    with LocalCluster() as cluster:
        running = cluster.submit_topology("idle", {}, b.create_topology())
        executor = next(ex for ex in running.runtime.executors.values() if ex.component == "src")
        src = next(iter(executor.spouts.values()))
        active = _mean_idle_wait(running.runtime)
        running.deactivate()
        until(lambda: not executor.active, 10, "the spout executor saw the deactivation")
        deactivated = _mean_idle_wait(running.runtime)
        assert active < 0.02 <= deactivated, (active, deactivated)
        src.values.append("again")  # emitted only once the topology is active again
        running.activate()
        until(lambda: src.acked == [0], 10, lambda: f"acked {src.acked}, failed {src.failed}")


class _Asked(Spout):
    """Counts how often it is asked; emits a number (untracked) every call if ``endless``, which keeps
    its thread busy, else never has anything."""

    output_fields = ("v",)

    def __init__(self, endless: bool):
        self.endless = endless

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.asked = 0

    def next_tuple(self):
        self.asked += 1
        if self.endless:
            self.collector.emit([self.asked])


def test_a_spout_that_came_up_empty_is_asked_again_after_the_spout_wait_while_its_thread_stays_busy():
    """Storm's spout executor sleeps ``topology.spout.wait.sleep.millis`` after an empty
    ``nextTuple``; a thread shared with busy executors goes on with them meanwhile and asks the empty
    spout at most once per wait (it was asked every round). A spout whose body polls is still asked
    every round."""
    wait_ms = 5.0
    b = TopologyBuilder()
    b.set_spout("busy", _Asked, 1, args=(True,))
    b.set_spout("empty", _Asked, 1, args=(False,))
    b.set_bolt("sink", Sink, 1).shuffle_grouping("busy")
    conf = {"topology.spout.wait.sleep.millis": wait_ms, "topology.acker.executors": 0}
    with LocalCluster() as cluster:
        running = cluster.submit_topology("pause", conf, b.create_topology())
        thread = running.runtime.threads[0]
        executor = next(ex for ex in running.runtime.executors.values() if ex.component == "empty")
        empty = next(iter(executor.spouts.values()))
        until(lambda: empty.asked >= 1, 10, "the empty spout was asked")

        asked0, t0, rounds0 = empty.asked, time.monotonic(), thread.rounds
        until(lambda: thread.rounds - rounds0 >= 300 and empty.asked - asked0 >= 3, 30,
              lambda: f"{thread.rounds - rounds0} rounds, asked {empty.asked - asked0} times")
        t1, asked, rounds = time.monotonic(), empty.asked - asked0, thread.rounds - rounds0
        assert asked <= (t1 - t0) * 1000.0 / wait_ms + 2, (asked, rounds, t1 - t0)
        assert rounds > 2 * asked, (asked, rounds)  # the thread was busy the while

        executor.polls.append(lambda now: 0)  # a polling body: asked every round
        asked0 = empty.asked
        until(lambda: empty.asked - asked0 >= 2, 10, "asked since the poll was added")  # a pause ran out
        asked0, rounds0 = empty.asked, thread.rounds
        until(lambda: thread.rounds - rounds0 >= 300, 30, lambda: f"{thread.rounds - rounds0} rounds")
        asked, rounds = empty.asked - asked0, thread.rounds - rounds0
        # read one after the other while the thread runs on: a few rounds apart
        assert asked >= 0.8 * rounds, (asked, rounds)
