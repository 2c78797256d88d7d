"""tests/waiting.py itself: ``eventually`` passes as soon as its block does, and at the deadline
fails with the block's *last* assertion error (what was still false, with its values)."""

from __future__ import annotations

import itertools

import pytest

from gale.worker.state.epochs import Epoch
from tests.eo_cuts import settled
from tests.waiting import eventually, poll_until, until

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


class FakeTime:
    """A monotonic clock that advances only when the waiter sleeps (no real waiting here)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, secs: float) -> None:
        self.sleeps += 1
        self.now += secs


@pytest.fixture
def clock(monkeypatch):
    import tests.waiting as waiting

    fake = FakeTime()
    monkeypatch.setattr(waiting, "time", fake)
    return fake


def test_passes_late_and_returns_the_blocks_value(clock):
    calls = itertools.count(1)

    def check():
        n = next(calls)
        assert n >= 4, f"only {n} calls"
        return n

    assert eventually(check, timeout=10, interval=0.5) == 4
    assert clock.sleeps == 3 and clock.now == 1.5


def test_reports_the_last_failure_at_the_deadline(clock):
    calls = itertools.count(1)

    def check():
        n = next(calls)
        assert n < 0, f"value was {n}"

    with pytest.raises(AssertionError) as info:
        eventually(check, timeout=2, interval=0.5)
    message = str(info.value)
    # 2 s of 0.5 s intervals: attempts at 0, 0.5, 1, 1.5 and 2 — the report names the fifth
    assert "value was 5" in message and "5 attempts" in message and "still false after 2.0s" in message
    assert isinstance(info.value.__cause__, AssertionError) and "value was 5" in str(info.value.__cause__)


def test_other_exceptions_propagate_at_once_unless_listed(clock):
    def broken():
        raise KeyError("boom")

    with pytest.raises(KeyError):
        eventually(broken, timeout=10)
    assert clock.sleeps == 0
    calls = itertools.count(1)

    def not_yet():
        if next(calls) < 3:
            raise ConnectionError("starting")
        return "up"

    assert eventually(not_yet, timeout=10, retry_on=(AssertionError, ConnectionError)) == "up"


def test_until_waits_for_a_truthy_value_and_describes_the_miss(clock):
    values = iter([0, None, [], "ready"])
    assert until(lambda: next(values), timeout=5) == "ready"
    with pytest.raises(AssertionError, match="queue still has 3"):
        until(lambda: False, timeout=1, describe=lambda: "queue still has 3")


def test_poll_until_returns_the_first_truthy_value_or_none_at_the_deadline(clock):
    values = iter([None, 0, "converged"])
    assert poll_until(lambda: next(values), deadline=5.0, interval=1.0) == "converged"
    assert clock.now == 2.0  # two misses, one interval each
    calls = itertools.count()
    assert poll_until(lambda: next(calls) and None, deadline=clock.now + 3.0, interval=1.0) is None
    assert next(calls) >= 4  # checked until the deadline passed
    assert poll_until(lambda: (0,), deadline=clock.now - 1.0) == (0,)  # checked once even when late


def test_a_wait_for_more_acks_than_the_input_holds_is_refused_at_once(tmp_path, clock):
    """The trap stop 37 hit: all 300,000 ids acked, then a wait for more than 300,200 that can
    only time out. The helper refuses it at once and says why; a wait the input allows runs."""
    from tests.cluster import DurableInput

    work = DurableInput(tmp_path, 10)
    work.state.mkdir()
    (work.state / "acked-0.log").write_text("".join(f"{i}\n" for i in range(10)))
    with pytest.raises(AssertionError, match=r"more than 10 acked, but the input has only 10 ids \(10 acked\)"):
        work.wait_acked_beyond(10, 30)
    assert clock.sleeps == 0
    assert work.wait_acked_beyond(9, 30) == 10


def test_settled_is_the_last_checkpoint_whose_commit_finished_in_every_phase():
    """What the exactly-once tests wait on instead of the transient phase COMMITTED."""
    assert [settled(Epoch(7, phase, 3)) for phase in ("COMMITTED", "PAUSING", "PREPARING", "COMMITTING",
                                                       "ROLLING_BACK")] == [7, 6, 6, 6, 7]
    # the record only moves forward through one cycle, and so does what it says is settled
    cycle = [Epoch(7, "COMMITTED", 3), Epoch(8, "PAUSING", 3), Epoch(8, "PREPARING", 3),
             Epoch(8, "COMMITTING", 3), Epoch(8, "COMMITTED", 3)]
    assert [settled(e) for e in cycle] == [7, 7, 7, 7, 8]
