"""A persistent window (``with_persistence()``) on a real cluster with a real Redis: kill -9 of the
windowing worker in the middle of a window.

The window's tuples are acked when the checkpoint holding them commits, so the spout never replays
them: the tuples of the window in progress at the kill reach the sink only because the restarted
task restores its window from Redis. Every id reaches the sink at least once; the ids acked before
the kill (committed) are never replayed (the spout forgot them), so those in the window in progress
at the kill prove the restore.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from gale.redisserver import RedisServer
from tests.cluster import DurableInput, Topologies, cli, dump_logs, make_cluster, status
from tests.waiting import eventually, until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

PERSISTENT_WINDOWED = Path(__file__).resolve().parent / "cluster_topologies" / "persistent_windowed.py"


def test_kill_minus_9_of_a_persistent_windowing_worker_mid_window_restores_the_window(zk_server, tmp_path):
    cluster = make_cluster(zk_server, tmp_path, supervisors=2, slots=1)
    cluster.start()
    try:
        with RedisServer() as redis, Topologies(cluster) as topologies:
            work = DurableInput(tmp_path / "work", 20000)
            # a window's inputs are acked when their checkpoint commits: at most 2 spouts x 100 pending
            # per 200 ms checkpoint, 1,000 ids/s, so the input lasts about 20 s
            overrides = work.overrides(**{"test.window.ms": 2000, "topology.state.provider": "redis",
                                          "topology.state.redis.url": redis.url,
                                          "topology.max.spout.pending": 100})
            # submitted inactive, activated once the window's worker is known: the input starts
            # flowing only when the test is ready to watch it (it once was all acked before the test
            # had found the worker, and no moment was mid-stream)
            name, _tid = topologies.submit(PERSISTENT_WINDOWED, "pwindows-kill", *overrides, "--inactive")

            def window_worker():
                worker = status(cluster, name)["components"]["window"]["executor_list"][0]["worker"]
                assert worker and worker["pid"], "the windowed bolt's worker has not reported yet"
                return worker["pid"]

            pid = eventually(window_worker, 60)
            cli(cluster, "activate", name)

            def window_in_progress():
                """ids committed in the window (acked) but not yet fired (not in the sink), while some
                ids are not acked yet (mid-stream)."""
                acked = work.acked()
                waiting = acked - set(work.sink_counts())
                return (acked, waiting) if 300 < len(acked) < work.n and waiting else None

            def progress():
                acked, sunk = work.acked(), set(work.sink_counts())
                return (f"no committed window in progress yet: {len(acked)}/{work.n} ids acked, {len(sunk)} in the "
                        f"sink, {len(acked - sunk)} acked and not in the sink")

            acked_before, waiting = until(window_in_progress, 120, progress)
            os.kill(pid, signal.SIGKILL)
            assert len(acked_before) < work.n, "the kill came after the whole input was done: not mid-stream"
            work.wait_all_acked(180)

            def all_sunk():  # acked ids wait in their window (persistent: acked at commit, before it fires)
                sunk = work.sink_counts()
                missing = set(range(work.n)) - set(sunk)
                assert not missing, f"{len(missing)} ids never reached the sink, e.g. {sorted(missing)[:10]}"
                return sunk

            sunk = eventually(all_sunk, 60)
            # the window in progress at the kill was restored from Redis: its ids, acked (so never replayed
            # by the spout) before the kill, reached the sink afterwards
            assert waiting <= set(sunk)

            def restarted():
                assert window_worker() != pid

            eventually(restarted, 60)
            print(f"acked before the kill: {len(acked_before)}/{work.n}, {len(waiting)} of them in the window in "
                  f"progress; ids sunk more than once: {sum(1 for n in sunk.values() if n > 1)}")
    except BaseException:
        print(dump_logs(cluster))
        raise
    finally:
        cluster.cleanup()
