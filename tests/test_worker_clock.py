"""The worker stamps what others judge its liveness by (its LocalState heartbeat, which its
supervisor reports to nimbus) with its injected clock, not the wall clock."""

from __future__ import annotations

import pytest

from gale.clock import SimulatedClock
from gale.config_keys import Config
from gale.worker.daemon import HEARTBEAT_KEY, Worker

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def test_the_local_heartbeat_is_stamped_by_the_injected_clock(tmp_path):
    clock = SimulatedClock(start=1_000_000.0)
    config = Config.resolve({"storm.local.dir": str(tmp_path)}, allow_user_keys=False)
    worker = Worker(config, "t-1-1", "sup-1", 6700, "w-1", clock=clock)
    worker.executors = [(1, 2)]
    worker.write_local_heartbeat()
    first = worker.hb_state.get(HEARTBEAT_KEY)
    clock.advance(42.0)
    worker.write_local_heartbeat()
    second = worker.hb_state.get(HEARTBEAT_KEY)
    assert (first["time_secs"], second["time_secs"]) == (1_000_000.0, 1_000_042.0)
    assert second["executors"] == [[1, 2]] and second["port"] == 6700
