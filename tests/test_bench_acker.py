"""The acker benchmark's stream (``benchmarks.bench_acker``) does what it says."""

from __future__ import annotations

from benchmarks import bench_acker


def test_the_stream_keeps_the_asked_number_of_trees_pending_and_completes_the_rest():
    messages, in_flight = 20_000, 700
    ns, completed, left = bench_acker.run(in_flight, messages, repeat=1)
    # every tree begun more than in_flight trees before the end is acked; the last in_flight wait
    assert (completed, left) == (messages // 2 - in_flight, in_flight)
    assert ns > 0
