"""The exactly-once coordinator and source task (gale.worker.state.epochs), step by step.
tests/test_epochs_model.py checks the same protocol on a model of a whole topology with faults."""

from __future__ import annotations

import pytest

from gale.worker.state.epochs import (
    COMMIT,
    COMMITTED,
    COMMITTING,
    PAUSING,
    PREPARE,
    PREPARING,
    ROLLBACK,
    ROLLING_BACK,
    CommitSources,
    Committed,
    Emit,
    Epoch,
    EpochCoordinator,
    Report,
    Rewind,
    RolledBack,
    Save,
    SourceTask,
    StagePosition,
    WriteReport,
)

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def saves(actions):
    return [a.epoch for a in actions if isinstance(a, Save)]


def emits(actions):
    return [(a.txid, a.action) for a in actions if isinstance(a, Emit)]


def rewound(g, tasks=(1, 2)):
    return {t: Report(g, rewound=True) for t in tasks}


def started(saved=Epoch(0, COMMITTED, 0), now=0.0):
    c = EpochCoordinator(interval=1.0, pause_timeout=5.0, retry_secs=0.5)
    out = c.start(saved, now)
    return c, out


def running(now=0.0):
    """A coordinator past its start-up rollback: COMMITTED(0, 1)."""
    c, _ = started(now=now)
    c.acked(1, ROLLBACK, now)
    assert saves(c.tick(now, rewound(1))) == [Epoch(0, COMMITTED, 1)]
    return c


@pytest.mark.parametrize("saved,to", [
    (Epoch(0, COMMITTED, 0), 0), (Epoch(4, COMMITTED, 2), 4), (Epoch(5, PAUSING, 2), 4),
    (Epoch(5, PREPARING, 2), 4), (Epoch(4, ROLLING_BACK, 3), 4),
])
def test_a_start_rolls_back_to_the_last_committed_checkpoint_under_a_new_generation(saved, to):
    c, out = started(saved)
    assert saves(out) == [Epoch(to, ROLLING_BACK, saved.generation + 1)]
    assert emits(out) == [(to + 1, ROLLBACK)]
    assert any(isinstance(a, RolledBack) for a in out)


def test_a_start_in_committing_finishes_the_commit_first():
    c, out = started(Epoch(5, COMMITTING, 2))
    assert out == [CommitSources(5), Emit(5, COMMIT)]
    out = c.acked(5, COMMIT, 1.0)
    assert saves(out) == [Epoch(5, COMMITTED, 2)]
    out = c.tick(1.0, rewound(2))
    assert saves(out) == [Epoch(5, ROLLING_BACK, 3)] and emits(out) == [(6, ROLLBACK)]


def test_the_rollback_ends_when_it_is_acked_and_every_source_rewound():
    c, _ = started()
    assert c.tick(0.1, rewound(1)) == []  # ROLLBACK not acked yet
    c.acked(1, ROLLBACK, 0.2)
    assert c.tick(0.3, {1: Report(1, rewound=True), 2: None}) == []
    assert c.tick(0.3, {1: Report(1, rewound=True), 2: Report(0, rewound=True)}) == []
    assert saves(c.tick(0.4, rewound(1))) == [Epoch(0, COMMITTED, 1)]


def test_a_checkpoint_pauses_prepares_commits():
    c = running(now=0.0)
    assert c.tick(0.5, rewound(1)) == []  # the interval has not elapsed
    assert saves(c.tick(1.0, rewound(1))) == [Epoch(1, PAUSING, 1)]
    assert c.tick(1.1, {1: Report(1, paused=1), 2: Report(1, rewound=True)}) == []  # task 2 still draining
    out = c.tick(1.2, {1: Report(1, paused=1), 2: Report(1, paused=1)})
    assert saves(out) == [Epoch(1, PREPARING, 1)] and emits(out) == [(1, PREPARE)]
    out = c.acked(1, PREPARE, 1.3)
    assert out == [Save(Epoch(1, COMMITTING, 1)), CommitSources(1), Emit(1, COMMIT)]
    out = c.acked(1, COMMIT, 1.4)
    assert saves(out) == [Epoch(1, COMMITTED, 1)]
    assert [a for a in out if isinstance(a, Committed)] == [Committed(1, pytest.approx(0.4))]


def test_a_failed_tree_or_a_restarted_source_rolls_back():
    c = running()
    out = c.tick(0.1, {1: Report(1, failed=True), 2: Report(1, rewound=True)})
    assert saves(out) == [Epoch(0, ROLLING_BACK, 2)]
    c = running()
    out = c.tick(0.1, {1: None, 2: Report(1, rewound=True)})  # task 1 lost its report: restarted
    assert saves(out) == [Epoch(0, ROLLING_BACK, 2)]


def test_a_pause_that_does_not_drain_rolls_back():
    c = running()
    c.tick(1.0, rewound(1))
    assert c.tick(5.9, {1: Report(1, paused=1), 2: Report(1)}) == []
    out = c.tick(6.1, {1: Report(1, paused=1), 2: Report(1)})
    assert saves(out) == [Epoch(0, ROLLING_BACK, 2)]


def test_a_failed_prepare_rolls_back_and_a_failed_commit_is_resent():
    c = running()
    c.tick(1.0, rewound(1))
    c.tick(1.0, {1: Report(1, paused=1), 2: Report(1, paused=1)})
    out = c.failed(1, PREPARE, 1.1)
    assert saves(out) == [Epoch(0, ROLLING_BACK, 2)]

    c = running()
    c.tick(1.0, rewound(1))
    c.tick(1.0, {1: Report(1, paused=1), 2: Report(1, paused=1)})
    c.acked(1, PREPARE, 1.1)
    assert c.failed(1, COMMIT, 1.2) == []
    assert c.tick(1.3, {}) == []  # retry_secs
    assert c.tick(1.8, {1: Report(1, failed=True)}) == [CommitSources(1), Emit(1, COMMIT)]  # commit first
    c.acked(1, COMMIT, 1.9)
    assert saves(c.tick(2.0, {1: Report(1, failed=True), 2: Report(1)})) == [Epoch(1, ROLLING_BACK, 2)]


def test_a_failed_rollback_is_resent_and_stale_acks_are_ignored():
    c, _ = started()
    assert c.failed(1, ROLLBACK, 0.1) == []
    assert c.acked(1, ROLLBACK, 0.2) == []  # stale: not in flight any more
    assert c.tick(0.3, rewound(1)) == []
    assert emits(c.tick(0.7, rewound(1))) == [(1, ROLLBACK)]


def test_a_failed_save_is_undone_and_rolls_back_from_the_record_before():
    c = running()
    c.tick(1.0, rewound(1))
    c.tick(1.0, {1: Report(1, paused=1), 2: Report(1, paused=1)})
    c.acked(1, PREPARE, 1.1)  # Save(COMMITTING 1) ...
    assert c.save_failed(1.1) == []  # ... was not written: the record is PREPARING(1)
    assert c.epoch == Epoch(1, PREPARING, 1)
    assert c.tick(1.2, {}) == []
    out = c.tick(1.7, {})
    assert saves(out) == [Epoch(0, ROLLING_BACK, 2)]


def test_a_failed_commit_sources_is_retried_with_its_commit():
    c = running()
    c.tick(1.0, rewound(1))
    c.tick(1.0, {1: Report(1, paused=1), 2: Report(1, paused=1)})
    c.acked(1, PREPARE, 1.1)
    c.action_failed(1.1)
    assert c.tick(1.7, {}) == [CommitSources(1), Emit(1, COMMIT)]


# ------------------------------------------------------------------------------ source task


def test_a_source_rewinds_then_runs_then_drains_and_stages():
    s = SourceTask()
    assert s.observe(Epoch(0, COMMITTED, 0), 0) == [WriteReport(Report(0, failed=True))]  # new: ask for a rollback
    assert not s.emitting
    assert s.observe(Epoch(0, COMMITTED, 0), 0) == []  # asked already
    assert s.observe(Epoch(3, ROLLING_BACK, 1), 0) == [Rewind(3), WriteReport(Report(1, rewound=True))]
    assert s.observe(Epoch(3, ROLLING_BACK, 1), 0) == [] and not s.emitting
    assert s.observe(Epoch(3, COMMITTED, 1), 0) == [] and s.emitting
    assert s.observe(Epoch(4, PAUSING, 1), 5) == [] and not s.emitting  # draining
    assert s.observe(Epoch(4, PAUSING, 1), 0) == [StagePosition(4), WriteReport(Report(1, paused=4))]
    assert s.observe(Epoch(4, PAUSING, 1), 0) == []
    assert s.observe(Epoch(4, PREPARING, 1), 0) == [] and not s.emitting
    assert s.observe(Epoch(4, COMMITTING, 1), 0) == [] and s.emitting


def test_a_failed_tree_stops_the_source_until_the_rollback():
    s = SourceTask()
    s.observe(Epoch(0, ROLLING_BACK, 1), 0)
    s.observe(Epoch(0, COMMITTED, 1), 0)
    s.tree_failed()
    assert not s.emitting
    assert s.observe(Epoch(0, COMMITTED, 1), 3) == [WriteReport(Report(1, failed=True))]
    assert s.observe(Epoch(1, PAUSING, 1), 0) == [] and not s.emitting  # no staging: it failed
    assert s.observe(Epoch(0, ROLLING_BACK, 2), 0) == [Rewind(0), WriteReport(Report(2, rewound=True))]
    assert s.observe(Epoch(0, COMMITTED, 2), 0) == [] and s.emitting


def test_an_action_that_failed_is_asked_for_again():
    s = SourceTask()
    assert s.observe(Epoch(0, ROLLING_BACK, 1), 0)[0] == Rewind(0)
    s.action_failed()
    assert s.observe(Epoch(0, ROLLING_BACK, 1), 0) == [Rewind(0), WriteReport(Report(1, rewound=True))]
    s.observe(Epoch(0, COMMITTED, 1), 0)
    assert s.observe(Epoch(1, PAUSING, 1), 0)[0] == StagePosition(1)
    s.action_failed()
    assert s.observe(Epoch(1, PAUSING, 1), 0)[0] == StagePosition(1)


@pytest.mark.parametrize("record", [
    {"state": "NOPE", "txid": 1}, {"state": COMMITTED, "txid": -1}, {"state": COMMITTED, "txid": "1"},
    {"state": COMMITTED, "txid": 1, "generation": None},
])
def test_a_malformed_record_is_refused_naming_it(record):
    with pytest.raises(ValueError, match="malformed"):
        Epoch.from_record(record)


def test_records_round_trip():
    for e in (Epoch(0, COMMITTED, 0), Epoch(7, PAUSING, 3), Epoch(2, ROLLING_BACK, 255)):
        assert Epoch.from_record(e.to_record()) == e
    for r in (Report(1), Report(2, paused=5), Report(3, rewound=True), Report(4, failed=True)):
        assert Report.from_record(r.to_record()) == r
    with pytest.raises(ValueError, match="malformed"):
        Report.from_record({"paused": 1})
