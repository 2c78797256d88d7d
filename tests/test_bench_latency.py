"""The latency benchmark's pure helpers: the rate limiter's timetable, the warm-up cut, the
percentiles and the load levels (no clocks, no timing assertions)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from benchmarks.bench_latency import BYTEWAX_SCRIPT, Schedule, parse_loads, summarize, warmup_items


@pytest.mark.parametrize("rate", [1.0, 3.0, 7.0, 1000.0, 13_500.5, 45_000.0, 0.3])
@pytest.mark.parametrize("start", [0.0, 12.5, 1_700_000_000.123, 98765.4321])
def test_due_counts_exactly_the_items_scheduled_at_or_before_now(rate, start):
    s = Schedule(rate, start)
    for i in range(2000):
        t = s.at(i)
        assert t >= s.at(i - 1) if i else t == start
        # at its own time item i is due, and so are all before it; the next one is not yet
        assert s.due(t) == i + 1, (i, t)
        below = np.nextafter(t, -np.inf)
        assert s.due(below) == i, (i, below)


def test_due_between_items_and_before_the_start():
    s = Schedule(4.0, 10.0)  # items at 10, 10.25, 10.5, ...
    assert s.due(-1e9) == 0
    assert s.due(9.999) == 0
    assert s.due(10.0) == 1
    assert s.due(10.2) == 1
    assert s.due(10.25) == 2
    assert s.due(11.0) == 5
    assert [s.at(i) for i in range(4)] == [10.0, 10.25, 10.5, 10.75]


def test_due_at_random_times_matches_counting():
    rng = random.Random(3)
    for _ in range(200):
        s = Schedule(rng.uniform(0.5, 50_000), rng.uniform(0, 1e6))
        horizon = 500 / s.rate
        for _ in range(20):
            now = s.start + rng.uniform(-horizon / 10, horizon)
            assert s.due(now) == sum(1 for i in range(600) if s.at(i) <= now)


def test_at_the_maximum_rate_runs_pace_everything_is_due_a_microsecond_after_the_start():
    from benchmarks.bench_latency import ALL_DUE_RATE

    s = Schedule(ALL_DUE_RATE, 7.5)
    assert s.at(10**6) <= 7.5 + 1e-6
    assert s.due(7.4) == 0
    assert s.due(7.5 + 1e-6) > 10**6


@pytest.mark.parametrize("rate", [0, -5, float("nan")])
def test_a_rate_that_is_not_positive_is_refused(rate):
    with pytest.raises(ValueError, match="rate must be positive"):
        Schedule(rate, 0.0)


def test_warmup_skips_the_items_due_during_it():
    assert warmup_items(1000.0, 2.0) == 2000
    assert warmup_items(3.0, 0.5) == 2  # items at 0 and 1/3 are in the first half second
    assert warmup_items(100.0, 0.0) == 0
    for rate, warmup in [(7.0, 1.3), (13_500.5, 2.0), (45_000.0, 0.25)]:
        s = Schedule(rate, 0.0)
        k = warmup_items(rate, warmup)
        assert s.at(k) >= warmup and (k == 0 or s.at(k - 1) < warmup)


def test_summarize_gives_milliseconds_at_the_ranks():
    got = summarize([i / 1000.0 for i in range(1, 1001)])  # 1 .. 1000 ms
    assert got["p50"] == pytest.approx(500.5)
    assert got["p99"] == pytest.approx(990.01)
    assert got["p99.9"] == pytest.approx(999.001)
    assert got["max"] == pytest.approx(1000.0)


def test_summarize_is_independent_of_order_and_exact_on_constant_input():
    xs = [random.Random(i).expovariate(200) for i in range(5000)]
    shuffled = xs[:]
    random.Random(1).shuffle(shuffled)
    assert summarize(xs) == summarize(shuffled)
    assert summarize([0.002] * 7) == {"p50": 2.0, "p99": 2.0, "p99.9": 2.0, "max": 2.0}
    one = summarize([0.0031])
    assert one["p50"] == one["max"] == pytest.approx(3.1)


def test_summarize_refuses_empty_or_missing_latencies():
    with pytest.raises(ValueError, match="no latencies"):
        summarize([])
    with pytest.raises(ValueError, match="2 of 4 latencies are missing"):
        summarize([0.001, float("nan"), 0.002, float("nan")])


def test_load_levels():
    assert parse_loads("50,90") == [50, 90]
    assert parse_loads(" 10, 100 ,") == [10, 100]
    for bad, message in [("0", "between 1 and 100"), ("150", "between 1 and 100"), ("half", "whole percentage"),
                         (",", "no load levels")]:
        with pytest.raises(ValueError, match=message):
            parse_loads(bad)


def test_the_bytewax_script_is_paced_by_the_same_schedule():
    namespace: dict = {}
    start = BYTEWAX_SCRIPT.index("class Schedule")
    end = BYTEWAX_SCRIPT.index("\nrate, n")
    exec(compile(BYTEWAX_SCRIPT[start:end], "<bytewax schedule>", "exec"), namespace)  # noqa: S102
    theirs, ours = namespace["Schedule"](123.4, 5.0), Schedule(123.4, 5.0)
    for now in np.linspace(4.0, 30.0, 997):
        assert theirs.due(now) == ours.due(now)


def test_the_sentences_cycle_a_vocabulary_and_bytewax_builds_the_same_ones():
    from benchmarks.bench_peers import sentences

    # the default: each sentence brings a new word (n + 8 words)
    grown = sentences(50)
    assert len({w for s in grown for w in s.split()}) == 58
    # a given vocabulary is cycled: the paced runs reuse the throughput run's words
    cycled = sentences(300, vocab=108)
    assert {w for s in cycled for w in s.split()} == {f"w{i}" for i in range(108)}
    assert cycled[108] == cycled[0] and cycled[:100] == sentences(100)
    # the Bytewax script's own copy of the generator, fed the benchmark's arguments
    start = BYTEWAX_SCRIPT.index("\nrate, n")
    end = BYTEWAX_SCRIPT.index("schedule = [None]")
    for argv, expected in ((["x", "2.0", "300", "108"], cycled), (["x", "2.0", "50", "0"], grown)):
        namespace = {"sys": type("S", (), {"argv": argv})}
        exec(compile(BYTEWAX_SCRIPT[start:end], "<bytewax data>", "exec"), namespace)  # noqa: S102
        assert namespace["data"] == expected


# ----------------------------------------------------------------------------- the paced runs

@pytest.mark.parametrize("rate", [50_000.0, 1e12])
def test_the_paced_plain_loop_times_every_sentence(rate):
    from benchmarks.bench_latency import run_plain_paced
    from benchmarks.bench_peers import sentences

    lat = run_plain_paced(sentences(300), rate=rate)
    assert lat.shape == (300,)
    assert np.isfinite(lat).all() and (lat >= 0).all()  # each counted after it was due


@pytest.mark.parametrize("rate", [20_000.0, 1e12], ids=["paced", "all-due"])
@pytest.mark.parametrize("acking", [True, False], ids=["acking", "noacking"])
def test_gale_paced_runs_time_every_sentence_once_complete(acking, rate):
    """LocalCluster for real: every sentence gets a latency (its ack, or its last word counted), and
    none before it was due; with every sentence due at once (how the maximum rate is found) too."""
    from benchmarks.bench_latency import run_gale_paced
    from benchmarks.bench_peers import sentences

    lat = run_gale_paced(sentences(500), rate=rate, acking=acking)
    assert lat.shape == (500,)
    assert np.isfinite(lat).all() and (lat >= 0).all()
