"""A windowed bolt on a real cluster: kill -9 of the windowing worker in the middle of a window.

The source replays every id not acked (at least once); the windowed bolt's tuples are acked only when
their window has fired and its output was acked by the sink, so the tuples of the windows lost with
the worker time out and replay into the windows of the restarted worker (with event time, those
behind its watermark through the late-tuple stream): every id reaches the sink at least once, and
every id is acked.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.cluster import DurableInput, Topologies, cli, dump_logs, make_cluster, status
from tests.waiting import eventually, until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

WINDOWED_WC = Path(__file__).resolve().parent / "cluster_topologies" / "windowed_wc.py"


@pytest.mark.parametrize("time", ["processing", "event"])
def test_kill_minus_9_of_the_windowing_worker_mid_window_loses_no_tuple(zk_server, tmp_path, time):
    """With event time, replayed tuples may come back behind the restarted task's watermark: they
    reach the sink through the late-tuple stream."""
    cluster = make_cluster(zk_server, tmp_path, supervisors=2, slots=1)
    cluster.start()
    try:
        with Topologies(cluster) as topologies:
            if time == "processing":  # the submit rule, with the effective config: a -c override the file never saw
                refused = cli(cluster, "submit", str(WINDOWED_WC), "--name", "windows-refused",
                              "-c", "test.window.ms=8000", "-c", "topology.message.timeout.secs=10", check=False)
                assert refused.returncode == 1, refused.stdout + refused.stderr
                assert "rule 'window duration <= topology.message.timeout.secs'" in refused.stderr, refused.stderr
                assert "windowed bolt 'window'" in refused.stderr
            work = DurableInput(tmp_path / "work", 4000)
            overrides = work.overrides(**{"test.window.ms": 2000, "test.event.time": time == "event"})
            name, _tid = topologies.submit(WINDOWED_WC, "windows-kill", *overrides)
            # windows have fired and been acked, and more input is still in flight
            work.wait_acked_beyond(300, 90)

            def window_worker():
                worker = status(cluster, name)["components"]["window"]["executor_list"][0]["worker"]
                assert worker and worker["pid"], "the windowed bolt's worker has not reported yet"
                return worker["pid"]

            pid = eventually(window_worker, 30)
            acked_before = len(work.acked())
            os.kill(pid, signal.SIGKILL)
            assert acked_before < work.n, "the kill came after the whole input was done: not mid-stream"
            work.wait_all_acked(180)
            sunk = work.sink_counts()
            missing = set(range(work.n)) - set(sunk)
            assert not missing, f"{len(missing)} ids never reached the sink, e.g. {sorted(missing)[:10]}"

            def restarted():
                assert window_worker() != pid

            eventually(restarted, 60)
            print(f"{time} time: acked before the kill: {acked_before}/{work.n}; ids sunk more than once: "
                  f"{sum(1 for n in sunk.values() if n > 1)}")
    except BaseException:
        print(dump_logs(cluster))
        raise
    finally:
        cluster.cleanup()
