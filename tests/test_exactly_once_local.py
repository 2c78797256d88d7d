"""Exactly-once state in local mode (real runtime, real acker, memory provider): the wiring of
gale.worker.state.epochs — the checkpoint spout's coordinator, the sources' pause and rewind, the
stateful bolts' rollback by generation — with failures injected. The protocol itself is checked on a
model in tests/test_epochs_model.py."""

from __future__ import annotations

from collections import Counter

import pytest

from gale import TopologyBuilder, TopologyError
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.worker.local import LocalCluster
from gale.worker.state.exactly_once import committed_position, read_epoch, source_namespace
from tests.eo_cuts import settled
from tests.state_topologies import FlakySplit, NumberedSentences, RewindableSentences, Sink, StatefulCount, sentence
from tests.test_state_local import bolts_of, counts_in, spouts_of
from tests.waiting import eventually

EO = {"topology.state.guarantee": "exactly-once"}


def word_count(spout=RewindableSentences) -> TopologyBuilder:
    b = TopologyBuilder()
    b.set_spout("sentences", spout, 2)
    b.set_bolt("split", FlakySplit, 2).shuffle_grouping("sentences")
    b.set_bolt("count", StatefulCount, 2).fields_grouping("split", ["word"])
    b.set_bolt("sink", Sink, 1).shuffle_grouping("count")
    return b


def committed_positions(running):
    provider = running.runtime.resources["state"]
    prefix = running.runtime.resources["state_prefix"]
    return [committed_position(provider, [source_namespace(prefix, "sentences", i)], merge=False) for i in range(2)]


def two_more_commits(provider, prefix, txid, running=None):
    """Wait until two checkpoints past ``txid`` have committed (nothing new to read: the counts must
    stay what they are; :func:`tests.eo_cuts.settled`); returns the record. With ``running`` (a local
    topology), a timeout says where the checkpoint stands: the coordinator, its tuples in flight,
    every executor."""
    def committed():
        epoch = read_epoch(provider, prefix)
        assert settled(epoch) >= txid + 2, epoch
        return epoch

    try:
        return eventually(committed, timeout=60)
    except AssertionError as exc:
        if running is None:
            raise
        raise AssertionError(f"{exc}\n{checkpoint_diagnosis(running)}") from exc


def checkpoint_diagnosis(running) -> str:
    """What a stuck checkpoint needs looked at, as text: the coordinator's state, the checkpoint
    spout's pending tuples with their ages, and each executor's queues, pending trees and the call it
    is in (with how long it has been in it)."""
    runtime = running.runtime
    now = runtime.clock.monotonic()
    threads = runtime.threads
    lines = [(f"runtime: active={runtime.active} congested={runtime.congested} stopping={runtime.stopping} "
              f"threads alive={[t.is_alive() for t in threads]} rounds={[t.rounds for t in threads]}")]
    for ex in runtime.executors.values():
        lines.append(f"{ex.component} {ex.executor_id}: queued={ex.queued()} pending={ex.pending_count()} "
                     f"in_call={ex.in_call} current={ex.current!r} busy_secs={ex.busy_secs():.1f}")
        if ex.component != CHECKPOINT_COMPONENT:
            continue
        for spout in ex.spouts.values():
            shell = getattr(spout, "_eo", spout)
            c = shell.coordinator
            lines.append(f"  coordinator: {vars(c)}")
            lines.append(f"  source reports: {getattr(shell, 'reports', None)}")
        for root, (task, msg_id, stream, t_emit) in list(ex.pending.items()):
            lines.append(f"  in flight: root={root:#x} msg_id={msg_id} age={now - t_emit:.1f}s")
    return "\n".join(lines)


@pytest.mark.parametrize("fail_every,fail_prepare", [(0, 0), (9, 0), (0, 3), (5, 2)])
def test_counts_are_exact_through_failed_tuples_and_failed_checkpoints(fail_every, fail_prepare):
    n = 300
    expected = dict(Counter(w for i in range(n) for w in sentence(i).split()))
    conf = {**EO, "test.sentences": n, "test.fail.every": fail_every, "test.fail.prepare": fail_prepare,
            "topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 40}
    topo = word_count().create_topology("eo", conf)
    with LocalCluster() as cluster:
        running = cluster.submit_topology(f"eo-{fail_every}-{fail_prepare}", {}, topo)
        provider = running.runtime.resources["state"]

        def everything_read_and_committed():
            # task i emits sentences i, i + 2, ...: its position after the last one is the next index
            assert committed_positions(running) == [n + (i - n) % 2 for i in range(2)], committed_positions(running)
            return read_epoch(provider, running.runtime.resources["state_prefix"]).txid

        txid = eventually(everything_read_and_committed, timeout=90)
        two_more_commits(provider, running.runtime.resources["state_prefix"], txid, running)
        counts = counts_in(running)
        stats = running.component_stats()
        rewinds = [r for s in spouts_of(running, "sentences") for r in s.rewinds]
        rollbacks = sum(b.rollbacks for b in bolts_of(running, "count"))
    assert counts == expected  # nothing lost, nothing counted twice
    extra = stats[CHECKPOINT_COMPONENT]["extra"]
    assert extra["checkpoints_committed"] >= 3
    if fail_every or fail_prepare:
        # a failure rolled the topology back: the sources rewound beyond the start-up rewind
        assert extra["checkpoint_rollbacks"] >= 2 and len(rewinds) >= 4
        assert rollbacks >= 1
    else:
        assert extra["checkpoint_rollbacks"] == 1  # only the start-up rollback (generation 1)


def _assert_ge(a, b):
    assert a >= b, f"{a} < {b}"
    return a


def test_a_spout_that_cannot_rewind_is_refused_at_submit_naming_it():
    conf = {**EO, "test.sentences": 20, "topology.state.checkpoint.interval.ms": 50}
    with pytest.raises(TopologyError, match=r"spout 'sentences' \(NumberedSentences\) cannot rewind.*position\(\) "
                                            r"and rewind\(\)"):
        word_count(spout=NumberedSentences).create_topology("eo", conf)


def test_a_definition_that_does_not_say_whether_its_spout_rewinds_is_guarded_in_the_worker():
    """A definition from before spouts recorded ``rewindable``: the worker reports the spout and it
    emits nothing (exactly-once could not hold)."""
    conf = {**EO, "test.sentences": 20, "topology.state.checkpoint.interval.ms": 50}
    topo = word_count().create_topology("eo", conf)
    topo.definition.components["sentences"].class_path = "tests.state_topologies:NumberedSentences"
    topo.definition.components["sentences"].rewindable = None
    topo.classes["sentences"] = NumberedSentences
    with LocalCluster() as cluster:
        running = cluster.submit_topology("eo-norewind", {}, topo)

        def reported():
            errors = running.errors.get("sentences", [])
            assert any("cannot rewind" in e and "NumberedSentences" in e for e in errors), errors

        eventually(reported, timeout=30)
        # a positive marker that the topology got past the point where the spout would emit: the
        # start-up rollback reached the stateful tasks (they are initialized), the sources never rewind
        counters = [ex for ex in running.runtime.executors.values() if ex.component == "count"]
        eventually(lambda: _assert_ge(sum(all(ex.layers["checkpoint"].ready.values()) for ex in counters),
                                      len(counters)), timeout=30)
        stats = running.component_stats()
    assert stats["sentences"]["emitted"] == 0


def test_exactly_once_without_a_stateful_bolt_is_refused():
    b = TopologyBuilder()
    b.set_spout("sentences", RewindableSentences, 1)
    b.set_bolt("split", FlakySplit, 1).shuffle_grouping("sentences")
    with pytest.raises(TopologyError, match="exactly-once.*no stateful bolt"):
        b.create_topology("eo", EO)


def test_exactly_once_with_a_rabbitmq_spout_is_refused_naming_it():
    from gale.connectors import RabbitMQSpout

    b = TopologyBuilder()
    b.set_spout("events", RabbitMQSpout, 1)
    b.set_bolt("count", StatefulCount, 1).fields_grouping("events", ["body"])
    with pytest.raises(TopologyError, match="spout 'events' \\(RabbitMQSpout\\) cannot rewind"):
        b.create_topology("eo", EO)


def test_the_task_count_of_an_exactly_once_source_cannot_change():
    from gale.config_keys import Config
    from gale.nimbus.rescale import plan_rescale

    defn = word_count().create_topology("eo", EO).definition
    conf = Config.resolve(EO, allow_user_keys=True)
    with pytest.raises(TopologyError, match=r"spout 'sentences' is a source of an exactly-once topology.*from 2 to 3"):
        plan_rescale(defn, conf, {}, {}, {"sentences": 3})
    assert plan_rescale(defn, conf, {}, {}, {"sentences": 1}).tasks == {}  # within its tasks: Storm's rebalance
    assert plan_rescale(defn, conf, {}, {}, {"count": 3}).tasks == {"count": 3}  # keyed state moves by key groups


def test_merged_positions_keep_parts_without_an_owner_and_take_the_newest():
    """A Kafka partition nobody owned at a checkpoint (its consumer was dead, the group not yet
    rebalanced) keeps the position an older checkpoint gave it; a partition two tasks checkpointed
    (it moved) takes the newer one."""
    from gale.worker.state.exactly_once import committed_position, position_changes
    from gale.worker.state.provider import MemoryStateProvider

    class Kafkaish:
        merge_positions = True

    p = MemoryStateProvider()
    a, b = "t/kafka/source0", "t/kafka/source1"
    p.prepare(1, {a: (position_changes("kafka", Kafkaish(), {"x/0": 10, "x/1": 20}, 1), ())})
    p.prepare(1, {b: (position_changes("kafka", Kafkaish(), {"x/2": 30}, 1), ())})
    p.commit(1, [a, b])
    # checkpoint 2: task 0 died (stages nothing), task 1 now owns x/1 too
    p.prepare(2, {b: (position_changes("kafka", Kafkaish(), {"x/1": 25, "x/2": 35}, 2), ())})
    p.commit(2, [a, b])
    assert committed_position(p, [a, b], merge=True) == {"x/0": 10, "x/1": 25, "x/2": 35}
    assert committed_position(p, ["t/kafka/none"], merge=True) is None
    with pytest.raises(Exception, match="position\\(\\) must return a dict with str keys"):
        position_changes("kafka", Kafkaish(), [1, 2], 3)


def test_a_rewind_drops_what_the_task_staged_for_a_checkpoint_that_did_not_commit():
    """Checkpoint 3 is staged, then rolled back; the next checkpoint reuses txid 3 and this task
    stages nothing for it (a Kafka task owning no partition then): the old positions must not be
    committed with it. The real Redis provider skips a namespace without changes, so the executor
    rolls its namespace back at every rewind."""
    from gale.redisserver import RedisServer
    from types import SimpleNamespace

    from gale.worker.state.epochs import Rewind
    from gale.worker.state.exactly_once import position_changes
    from gale.worker.state.redis_provider import RedisStateProvider
    from gale.worker.state.sources import ExactlyOnceSource

    class Kafkaish:
        merge_positions = True

        def rewind(self, position):
            self.rewound_to = position

    with RedisServer() as server:
        provider = RedisStateProvider(server.url)
        ns = "t/kafka/source0"
        provider.prepare(2, {ns: (position_changes("kafka", Kafkaish(), {"x/0": 10}, 2), ())})
        provider.commit(2, [ns])
        provider.prepare(3, {ns: (position_changes("kafka", Kafkaish(), {"x/0": 99}, 3), ())})  # then rolled back
        # only what _perform(Rewind) uses
        ex = SimpleNamespace(component="kafka", pending={}, spouts={1: Kafkaish()},
                             enter_call=lambda: None, leave_call=lambda: None)
        source = ExactlyOnceSource(ex)
        source.provider, source.namespaces, source.all_namespaces = provider, {1: ns}, [ns]
        source._perform(1, Rewind(2))
        assert ex.spouts[1].rewound_to == {"x/0": 10}
        provider.prepare(3, {ns: ({}, ())})  # the new checkpoint 3: nothing to stage
        provider.commit(3, [ns])
        assert committed_position(provider, [ns], merge=True) == {"x/0": 10}


def _run_over(name, topo, provider=None):
    """A local run of ``topo`` whose state lives in ``provider`` (one kept open across runs, as Redis
    would be), or in a new memory provider."""
    from gale.worker.local import LocalTopology, local_conf

    run = LocalTopology(name, topo, local_conf(topo), start=False)
    if provider is not None:
        run.runtime.resources["state"] = provider
    run.runtime.start(active=True)
    return run


def test_switching_the_guarantee_keeps_the_state_and_forgets_positions_the_state_moved_past():
    """exactly-once → at-least-once → exactly-once over one state. The at-least-once run reads the
    exactly-once record (it used to refuse it as malformed) and goes on from its committed counts.
    The exactly-once run after it must not rewind to the positions of the first run — the state has
    counted past them — so they are forgotten and the sources start where the spout starts (this
    spout: its first sentence; Kafka: the group's offsets, which the at-least-once run committed)."""
    n = 60
    once = Counter(w for i in range(n) for w in sentence(i).split())
    base = {"test.sentences": n, "topology.state.checkpoint.interval.ms": 50, "topology.name": "wc"}
    eo = word_count().create_topology("wc", {**base, **EO})
    alo = word_count().create_topology("wc", base)

    def counts_are(run, times):
        def check():
            assert counts_in(run) == {w: times * c for w, c in once.items()}
            return read_epoch(run.runtime.resources["state"], "wc").txid

        return eventually(check, timeout=60)

    first = _run_over("wc-eo1", eo)
    try:
        eventually(lambda: _assert_eq(committed_positions(first), [n + (i - n) % 2 for i in range(2)]), timeout=60)
        counts_are(first, 1)
        provider = first.runtime.resources.pop("state")
    finally:
        first.kill()
    second = _run_over("wc-alo", alo, provider)
    try:
        txid = counts_are(second, 2)  # the spout has no offsets of its own: it reads everything again
        two_more_commits(provider, "wc", txid, second)
        assert counts_in(second) == {w: 2 * c for w, c in once.items()}
        assert not [e for errs in second.errors.values() for e in errs], second.errors
    finally:
        second.runtime.resources.pop("state")
        second.kill()
    third = _run_over("wc-eo2", eo, provider)
    try:
        counts_are(third, 3)
        assert [s.rewinds[0] for s in spouts_of(third, "sentences")] == [None, None]
        assert not [e for errs in third.errors.values() for e in errs], third.errors
    finally:
        third.kill()


def _assert_eq(a, b):
    assert a == b, f"{a} != {b}"


@pytest.mark.parametrize("phase,txid,expected", [
    ("COMMITTED", 7, (7, "COMMITTED")),
    ("PAUSING", 8, (7, "COMMITTED")),  # paused for 8: 7 is the last committed, nothing prepared
    ("PREPARING", 8, (8, "PREPARING")),  # prepared 8: rolled back
    ("COMMITTING", 8, (8, "COMMITTING")),  # past the commit point: finished
    ("ROLLING_BACK", 7, (7, "COMMITTED")),
])
def test_an_exactly_once_record_maps_to_the_at_least_once_recovery(phase, txid, expected):
    from gale.worker.state.coordinator import TxState
    from gale.worker.state.epochs import Epoch

    state = TxState.from_record(Epoch(txid, phase, 3).to_record())
    assert (state.txid, state.phase) == expected


@pytest.mark.parametrize("fail_every,fail_prepare", [(0, 0), (23, 0), (0, 3), (17, 2)])
def test_a_persistent_window_in_an_exactly_once_topology_fires_every_item_once(fail_every, fail_prepare):
    """items → flaky pass-through → persistent event-time tumbling windows of 10 items → a stateful
    tally of how many fired windows held each item. Failed trees and failed prepares roll the whole
    topology back (window included) and the source rewinds: each item of every window that fired is
    tallied exactly once — a window fired twice, or an item lost from one, shows."""
    from gale.worker.state.inspect import read_committed
    from tests.state_topologies import EventTimeTenths, FlakyPass, ItemTally, RewindableItems

    n = 200
    conf = {**EO, "test.items.stop": n, "test.fail.every": fail_every, "test.fail.prepare": fail_prepare,
            "topology.state.checkpoint.interval.ms": 50, "topology.max.spout.pending": 30}
    b = TopologyBuilder()
    b.set_spout("items", RewindableItems, 1)
    b.set_bolt("flaky", FlakyPass, 1).shuffle_grouping("items")
    b.set_bolt("win", EventTimeTenths, 1, kwargs={"persistent": True}).shuffle_grouping("flaky")
    b.set_bolt("tally", ItemTally, 1).shuffle_grouping("win")
    topo = b.create_topology("eow", conf)
    # windows of 1 s over ts = i * 100: the last window (190..199) never fires (no later timestamp)
    expected = {i: 1 for i in range(n - 10)}
    with LocalCluster() as cluster:
        running = cluster.submit_topology(f"eow-{fail_every}-{fail_prepare}", {}, topo)
        provider = running.runtime.resources["state"]
        prefix = running.runtime.resources["state_prefix"]

        def tallied():
            tally = read_committed(provider, prefix, "tally", tasks=1)
            assert tally == expected, sorted(set(tally.items()) ^ set(expected.items()))[:10]
            return read_epoch(provider, prefix).txid

        txid = eventually(tallied, timeout=90)
        two_more_commits(provider, prefix, txid, running)
        assert tallied() >= txid
        stats = running.component_stats()
        windows = [r.bolt.windows for r in bolts_of(running, "win")]
    extra = stats[CHECKPOINT_COMPONENT]["extra"]
    if fail_every or fail_prepare:
        assert extra["checkpoint_rollbacks"] >= 2
    assert stats["win"]["extra"].get("late_tuples", 0) == 0
    assert windows and all(len(w) == 10 for ws in windows for w in ws)


def test_a_window_kept_in_memory_is_refused_in_an_exactly_once_topology_naming_it():
    from tests.state_topologies import EventTimeTenths, ItemTally, RewindableItems

    b = TopologyBuilder()
    b.set_spout("items", RewindableItems, 1)
    b.set_bolt("win", EventTimeTenths, 1, kwargs={"persistent": False}).shuffle_grouping("items")
    b.set_bolt("tally", ItemTally, 1).shuffle_grouping("win")
    with pytest.raises(TopologyError, match=r"windowed bolt 'win' keeps its window in the task's memory.*with_persistence\(\)"):
        b.create_topology("eow", EO)
