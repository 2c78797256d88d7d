"""The supervisor daemon decides its periods by the injected clock (a real ZooKeeper, simulated
time): its znode heartbeat follows the clock, not the wall."""

from __future__ import annotations

import socket

import pytest

from gale.clock import SimulatedClock
from gale.config_keys import Config
from gale.supervisor.daemon import Supervisor
from tests.waiting import eventually

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_supervisor_heartbeats_to_zookeeper_by_its_injected_clock(conf):
    clock = SimulatedClock()
    port = free_port()
    # a heartbeat period no test waits for in real time; no worker is launched, so no fork server either
    c = {**conf, "supervisor.slots.ports": [port], "supervisor.heartbeat.frequency.secs": 600,
         "supervisor.id": "sup-sim", "supervisor.worker.fork.server": False}
    sup = Supervisor(Config.resolve(c, allow_user_keys=False), clock=clock)
    sup.start()
    try:
        started = clock.time()
        info = sup.state.supervisor_info("sup-sim")
        assert (info.time_secs, info.uptime_secs) == (int(started), 0)
        assert sup.slots[port].since == started  # the slots' timeouts count from the same clock

        clock.advance(600)

        def registered_again():
            info = sup.state.supervisor_info("sup-sim")
            assert (info.time_secs, info.uptime_secs) == (int(started) + 600, 600), info

        eventually(registered_again, timeout=10)
    finally:
        sup.stop()
