"""The transactional sinks' pure parts: the protocol's decisions (gale.worker.sinks.protocol) for
every action and record, checked exhaustively against what the coordinator's record implies; the
names of transactions; the row mapping (gale.worker.sinks.rows); and the refusals at submit."""

from __future__ import annotations

import itertools

import pytest

from gale import ConfigError, TopologyBuilder, TopologyError, TransactionalSink
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.worker.sinks.protocol import SinkName, Step, committed_of, on_action, on_start
from gale.worker.sinks.rows import RowBatch, RowError, RowSpec
from gale.worker.state.coordinator import COMMIT, INITSTATE, PREPARE, ROLLBACK
from tests.state_topologies import RewindableSentences, StatefulCount

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

# ------------------------------------------------------------------------------ the protocol


def ops(steps):
    return [(s.op, s.txid) for s in steps]


def test_a_normal_cycle_prepares_then_commits():
    assert ops(on_action(PREPARE, 5, [])) == [("prepare", 5)]
    assert ops(on_action(COMMIT, 5, [5])) == [("commit", 5)]
    assert on_action(COMMIT, 5, []) == []  # nothing prepared (no records): nothing to do


def test_rollback_keeps_what_committed_and_drops_the_rest():
    # ROLLBACK(n) abandons n (n - 1 committed), under both guarantees
    steps = ops(on_action(ROLLBACK, 5, [3, 4, 5, 6]))
    assert steps == [("commit", 3), ("commit", 4), ("abort", 5), ("abort", 6), ("discard", 5)]


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_the_coordinators_rollback_abandons_the_checkpoint_a_sink_prepared(guarantee):
    """Driven by the real coordinators: checkpoint 3 committed, PREPARE(4) reached the sink, which
    prepared 4, then the coordinator restarted (its worker died). The ROLLBACK it sends must abort 4:
    a sink that committed it would write 4's records again when they replay."""
    if guarantee == "exactly-once":
        from gale.worker.state.epochs import PREPARING, Emit, Epoch, EpochCoordinator, Save

        c = EpochCoordinator(interval=1.0, pause_timeout=30.0)
        actions = c.start(Epoch(4, PREPARING, 1), 0.0)
        (record,) = [a.epoch for a in actions if isinstance(a, Save)]
        restored = record.txid
    else:
        from gale.worker.state.coordinator import Coordinator, Emit, TxState

        c = Coordinator(interval=1.0)
        actions = c.start(TxState.from_record({"txid": 4, "state": "PREPARING"}), 0.0)
        restored = 3  # "PREPARING(n) → ROLLBACK(n), acked → COMMITTED(n - 1)"
    assert restored == 3
    (rollback,) = [a for a in actions if isinstance(a, Emit)]
    assert rollback.action == ROLLBACK
    steps = ops(on_action(ROLLBACK, rollback.txid, [3, 4]))
    assert steps[:2] == [("commit", 3), ("abort", 4)], (rollback, steps)


def test_prepare_aborts_an_abandoned_attempt_of_its_own_txid_first():
    assert ops(on_action(PREPARE, 7, [6, 7, 8])) == [("commit", 6), ("abort", 7), ("abort", 8),
                                                                        ("prepare", 7)]


def test_initstate_resolves_by_the_committed_txid():
    assert ops(on_action(INITSTATE, 3, [2, 3, 4])) == [("commit", 2), ("commit", 3), ("abort", 4)]


def test_an_unknown_action_is_refused():
    with pytest.raises(ValueError, match="unknown checkpoint action 'NOPE'"):
        on_action("NOPE", 1, [])


@pytest.mark.parametrize("record,committed,in_flight", [
    (None, 0, None),
    ({"guarantee": "at-least-once", "state": "COMMITTED", "txid": 4}, 4, None),
    ({"guarantee": "at-least-once", "state": "PREPARING", "txid": 5}, 4, 5),
    ({"guarantee": "at-least-once", "state": "COMMITTING", "txid": 5}, 5, None),
    ({"guarantee": "exactly-once", "state": "PAUSING", "txid": 5, "generation": 2}, 4, 5),
    ({"guarantee": "exactly-once", "state": "PREPARING", "txid": 5, "generation": 2}, 4, 5),
    ({"guarantee": "exactly-once", "state": "COMMITTING", "txid": 5, "generation": 2}, 5, None),
    ({"guarantee": "exactly-once", "state": "ROLLING_BACK", "txid": 4, "generation": 3}, 4, None),
])
def test_what_each_record_says_committed(record, committed, in_flight):
    assert committed_of(record) == (committed, in_flight)


def test_a_malformed_record_is_named():
    with pytest.raises(ValueError, match="malformed"):
        committed_of({"state": "COMMITTED"})


def test_a_restart_commits_what_the_record_committed_and_keeps_the_checkpoint_in_flight():
    record = {"guarantee": "exactly-once", "state": "PREPARING", "txid": 5, "generation": 1}
    # 4 committed (its COMMIT was lost with the worker); 5 may still commit; 6 cannot exist legitimately
    assert ops(on_start([4, 5, 6], record)) == [("commit", 4), ("abort", 6)]
    committing = {"guarantee": "exactly-once", "state": "COMMITTING", "txid": 5, "generation": 1}
    assert ops(on_start([5], committing)) == [("commit", 5)]


# The model: a task's prepared transactions and a record the coordinator could hold. Whatever the
# order of restarts and actions, a transaction is committed iff its checkpoint is committed, and
# never both committed and aborted.

ACTIONS = [(PREPARE, 3), (COMMIT, 3), (ROLLBACK, 2), (ROLLBACK, 3), (INITSTATE, 2), (INITSTATE, 3)]


def _committed_by(action, txid, exactly_once):
    """The last committed checkpoint an action implies (the record when it is sent)."""
    return {PREPARE: txid - 1, COMMIT: txid, ROLLBACK: txid - 1, INITSTATE: txid}[action]


@pytest.mark.parametrize("exactly_once", [True, False])
def test_every_action_commits_exactly_the_committed_transactions(exactly_once):
    for action, txid in ACTIONS:
        if action == INITSTATE and exactly_once:
            continue
        committed = _committed_by(action, txid, exactly_once)
        for n in range(0, 5):
            for prepared in itertools.combinations(range(1, 6), n):
                steps = on_action(action, txid, prepared)
                commits = {s.txid for s in steps if s.op == "commit"}
                aborts = {s.txid for s in steps if s.op == "abort"}
                assert not commits & aborts
                assert commits == {p for p in prepared if p <= committed}, (action, txid, prepared, steps)
                if action != COMMIT:  # COMMIT(m) leaves what is past m alone (nothing is)
                    assert aborts == {p for p in prepared if p > committed}, (action, txid, prepared, steps)
                # commits come before aborts, in txid order
                assert [s for s in steps if s.op in ("commit", "abort")] == sorted(
                    [s for s in steps if s.op in ("commit", "abort")], key=lambda s: (s.op != "commit", s.txid))


# ------------------------------------------------------------------------------ names


def test_transaction_names_are_per_topology_component_task_and_txid():
    name = SinkName("wc", "to-pg", 1, 3)
    assert name.txn(42) == "gale:wc:to-pg:1:42"
    assert name.parse("gale:wc:to-pg:1:42") == (1, 42)
    assert name.parse("gale:wc:to-pgx:1:42") is None and name.parse("gale:wc:to-pg:x:42") is None
    weird = SinkName("my topo:1", "a/b", 0, 1)
    assert weird.txn(1) == "gale:my_topo_1:a_b:0:1"


def test_a_task_finds_its_own_and_task_0_those_of_tasks_that_no_longer_exist():
    names = ["gale:wc:pg:0:5", "gale:wc:pg:1:5", "gale:wc:pg:2:5", "gale:wc:pg:3:6", "gale:other:pg:0:5"]
    assert SinkName("wc", "pg", 0, 2).mine(names) == {5: ["gale:wc:pg:0:5", "gale:wc:pg:2:5"], 6: ["gale:wc:pg:3:6"]}
    assert SinkName("wc", "pg", 1, 2).mine(names) == {5: ["gale:wc:pg:1:5"]}


# ------------------------------------------------------------------------------ rows


def test_upserts_keep_the_last_value_and_deltas_add_up():
    batch = RowBatch(RowSpec(key=["word"], deltas=["n"]))
    for r in ({"word": "a", "count": 1, "n": 1}, {"word": "b", "count": 1, "n": 1}, {"word": "a", "count": 2, "n": 1}):
        batch.add(r)
    assert batch.columns == ("word", "count", "n")
    assert list(batch.rows()) == [("b", 1, 1), ("a", 2, 2)] and len(batch) == 2 and batch.records == 3
    assert batch.key_of_row(("a", 2, 2)) == "a"


def test_without_a_key_every_record_is_a_row():
    batch = RowBatch(RowSpec(columns=["x"]))
    batch.add({"x": 1, "ignored": 2})
    batch.add({"x": 1})
    assert list(batch.rows()) == [(1,), (1,)]


def test_bad_records_are_named():
    batch = RowBatch(RowSpec(key=["word"], deltas=["n"]))
    with pytest.raises(RowError, match="must be a dict"):
        batch.add(["a", 1])
    batch.add({"word": "a", "n": 1})
    with pytest.raises(RowError, match="no column 'n'"):
        batch.add({"word": "a"})
    with pytest.raises(RowError, match="key 'b'.*delta column 'n' must be a number"):
        batch.add({"word": "b", "n": "x"})
    with pytest.raises(RowError, match="no column 'word'"):
        RowBatch(RowSpec(key=["word"])).add({"w": 1})


def test_bad_mappings_are_refused_when_the_sink_is_built():
    with pytest.raises(ConfigError, match="deltas.*need key columns"):
        RowSpec(deltas=["n"])
    with pytest.raises(ConfigError, match="both key and delta"):
        RowSpec(key=["n"], deltas=["n"])
    with pytest.raises(ConfigError, match=r"not among columns"):
        RowSpec(key=["w"], columns=["x"])


# ------------------------------------------------------------------------------ at submit


class NullSink(TransactionalSink):
    def open_store(self):
        raise AssertionError("not run")


def _topology(conf, sink_kwargs=None, count=True):
    b = TopologyBuilder()
    b.set_spout("sentences", RewindableSentences, 1)
    if count:
        b.set_bolt("count", StatefulCount, 1).shuffle_grouping("sentences")
    b.set_bolt("out", NullSink, 1, kwargs=sink_kwargs or {}).shuffle_grouping("count" if count else "sentences")
    return b.create_topology("t", conf)


def test_a_sink_gets_checkpoints_and_is_recorded_with_its_guarantee():
    topo = _topology({}, count=False)
    assert CHECKPOINT_COMPONENT in topo.definition.components
    assert topo.definition.components["out"].sink == "at-least-once"
    eo = _topology({"topology.state.guarantee": "exactly-once"}, {"guarantee": "exactly-once"}, count=False)
    assert eo.definition.components["out"].sink == "exactly-once"  # a sink alone may be exactly-once


def test_a_sink_that_wants_exactly_once_in_an_at_least_once_topology_is_refused_naming_both():
    with pytest.raises(TopologyError, match=r"sink 'out' \(NullSink\) is configured for exactly-once, but the "
                                            r"topology's topology.state.guarantee is at-least-once"):
        _topology({}, {"guarantee": "exactly-once"})


def test_a_sink_without_the_acker_is_refused():
    with pytest.raises(TopologyError, match=r"'out' \(a TransactionalSink\).*needs the acker"):
        _topology({"topology.acker.executors": 0}, count=False)


def test_a_bad_guarantee_is_named():
    with pytest.raises(TopologyError, match="guarantee 'twice'"):
        _topology({}, {"guarantee": "twice"})


def test_a_sink_without_open_store_says_so():
    with pytest.raises(NotImplementedError, match="must override open_store"):
        TransactionalSink().open_store()


def test_step_is_a_value():
    assert Step("commit", 1) == Step("commit", 1)
