"""Load reports between workers (``LOADS`` messages): the meter, the message and its checks, the
receiver's table, and two real transfers reporting to each other over ZeroMQ."""

from __future__ import annotations

import threading

import msgpack
import pytest

from gale import TopologyBuilder
from gale.topology.definition import TopologyTasks
from gale.topology.tuple import Fields
from gale.worker.loads import FRESH_SECS, BusyMeter, PeerLoads, encode_report
from gale.worker.transfer import TUPLE, Transfer
from gale.worker.local import local_conf
from gale.worker.runtime.runtime import WorkerRuntime
from gale.worker.wire import BatchDecoder
from gale.zkserver import free_port
from tests.topologies import QuietSpout
from tests.waiting import eventually

SECRET = b"0123456789abcdef0123456789abcdef"
F = Fields(["v"], "src:default")


class Ticks:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_meter_gives_the_share_of_a_core_between_samples_capped_at_one():
    cpu, wall = Ticks(10.0), Ticks(100.0)
    meter = BusyMeter(cpu, wall)
    assert meter.share is None
    cpu.t, wall.t = 10.5, 101.0
    assert meter.sample() == 0.5
    cpu.t, wall.t = 12.5, 102.0  # two threads on two cores: one interpreter can use one
    assert meter.sample() == 1.0
    assert meter.sample() == 1.0  # no time passed: the last share stands
    cpu.t, wall.t = 12.6, 104.0
    assert meter.sample() == pytest.approx(0.05)


def decode(*messages, roles=None):
    got = []
    dec = BatchDecoder(lambda c, s: F if (c, s) == ("src", "default") else None, roles or {7: TUPLE},
                       on_loads=lambda cpu, flat: got.append((cpu, flat)))
    delivered = []
    seen, _ = dec.decode(b"".join(msgpack.packb(m) for m in messages), lambda t, p: delivered.append(p) or True)
    return got, {k: v for k, v in dec.invalid.items() if v}, seen, delivered


def test_a_report_goes_to_its_handler_and_is_not_counted_as_a_message():
    report = encode_report(0.734, [(7, 0.25), (9, 1.7)])
    assert report == [6, 734, [7, 250, 9, 1000]]
    got, invalid, seen, delivered = decode(report, [0, 7, "src", "default", 1, ["x"], [], 0])
    assert got == [(734, [7, 250, 9, 1000])] and invalid == {} and seen == 1 and len(delivered) == 1
    assert decode(encode_report(None, []))[0] == [(-1, [])]  # before the first CPU sample


@pytest.mark.parametrize("report, reason", [
    ([6, 500], "malformed"),
    ([6, 500, [7, 250], 1], "malformed"),
    ([6, 0.5, [7, 250]], "malformed"),
    ([6, 500, [7]], "malformed"),
    ([6, 500, [7, 0.25]], "malformed"),
    ([6, 500, {"7": 250}], "malformed"),
    ([6, 1001, [7, 250]], "out_of_range"),
    ([6, -2, [7, 250]], "out_of_range"),
    ([6, 500, [7, 1001]], "out_of_range"),
    ([6, 500, [-1, 250]], "out_of_range"),
    ([6, 500, [2**31, 250]], "out_of_range"),
])
def test_a_bad_report_is_dropped_under_its_reason_and_the_rest_of_the_batch_delivered(report, reason):
    got, invalid, _, delivered = decode(report, [0, 7, "src", "default", 1, ["x"], [], 0])
    assert got == [] and invalid == {reason: 1} and len(delivered) == 1


def test_reports_are_kept_while_fresh_and_a_later_one_replaces_an_earlier():
    clock = Ticks(50.0)
    peers = PeerLoads(clock)
    assert peers.load(7) is None and peers.busy(7) is None
    peers.take(900, [7, 250, 8, 0])
    assert (peers.load(7), peers.busy(7), peers.load(8)) == (0.25, 0.9, 0.0)
    clock.t += 1.0
    peers.take(-1, [7, 500])  # its worker's CPU not measured yet
    assert (peers.load(7), peers.busy(7), peers.busy(8)) == (0.5, None, 0.9)
    clock.t += FRESH_SECS - 0.5
    assert peers.load(7) == 0.5 and peers.load(8) is None  # 8's report is too old now: unknown
    clock.t += 1.0
    assert peers.load(7) is None and peers.busy(7) is None


def _transfer(port: int, tasks: dict[int, float]) -> Transfer:
    t = Transfer(bind_host="127.0.0.1", port=port, secret=SECRET, roles={task: TUPLE for task in tasks},
                 deliver=lambda *_: True, fields_for=lambda c, s: F, high_water=100)
    t.local_loads = lambda: list(tasks.items())
    return t


def test_two_transfers_report_their_loads_to_each_other_with_nothing_else_to_send():
    a_port, b_port = free_port(), free_port()
    a_loads, b_loads = {1: 0.0, 2: 0.4}, {3: 0.9, 4: 0.1}
    a, b = _transfer(a_port, a_loads), _transfer(b_port, b_loads)
    try:
        a.set_routes({3: f"127.0.0.1:{b_port}", 4: f"127.0.0.1:{b_port}"})
        b.set_routes({1: f"127.0.0.1:{a_port}", 2: f"127.0.0.1:{a_port}"})
        a.start()
        b.start()

        def reported():
            assert (a.load_of(3), a.load_of(4), b.load_of(1), b.load_of(2)) == (0.9, 0.1, 0.0, 0.4)
            # each has sampled its CPU at least once before a report carried it
            assert a.busy_of(3) is not None and 0.0 <= a.busy_of(3) <= 1.0
            assert b.busy_of(1) is not None and b.own_busy() is not None

        eventually(reported, 15)
        b_loads[3] = 0.2  # the next report replaces the last
        eventually(lambda: _equal(a.load_of(3), 0.2), 15)

        def counted():
            assert a.stats["load_reports_sent"] >= 2 and b.stats["load_reports_received"] >= 2
            # reports travel in batches of their own here, and are not counted as messages
            assert a.stats["sent_batches"] >= 2 and a.stats["sent_messages"] == b.stats["received_messages"] == 0

        eventually(counted, 15)
        assert a.stats["load_reports_received"] >= 2
        assert a.stats["invalid_messages"] == 0 and b.stats["invalid_messages"] == 0
    finally:
        a.close(0.1)
        b.close(0.1)


def _equal(got, want):
    assert got == want


def test_a_remote_task_is_as_loaded_as_the_worse_of_the_way_to_it_and_its_reported_queue():
    t = _transfer(1, {})
    t.set_routes({3: "127.0.0.1:9", 4: "127.0.0.1:9"})
    t.peer_loads.take(500, [3, 100, 4, 900])
    for root in range(30):  # 30 of 100 queued for task 3's worker (not started: nothing drains)
        t.send_acker(3, (1, root, 1, 1))
    assert (t.load_of(3), t.load_of(4)) == (0.3, 0.9)
    assert t.busy_of(3) == 0.5 and t.busy_of(99) is None


class Waiting(QuietSpout):
    """Inside a call that waits (a database that does not answer, say) until the test releases it."""

    released = threading.Event()

    def next_tuple(self):
        self.released.wait()
        self.collector.emit([1])


@pytest.mark.parametrize(("spout", "low", "high"), [(QuietSpout, 0.0, 0.3), (Waiting, 0.7, 1.0)])
def test_a_workers_busy_share_is_the_time_its_executor_thread_does_not_wait_for_work(spout, low, high):
    """A worker whose executor thread waits for work reads as idle; one whose thread is always in
    its components' code reads as busy, though that code may use little CPU: it cannot take more
    work (what a peer's spill needs to know)."""
    builder = TopologyBuilder()
    builder.set_spout("s", spout, 1)
    topo = builder.create_topology()
    conf = local_conf(topo, {"topology.acker.executors": 0})
    layout = TopologyTasks(topo.definition, conf, 1)
    rt = WorkerRuntime(topo, topology_id="t", conf=conf, layout=layout, executors=layout.executors)
    rt.start()
    try:
        meter, cpu = BusyMeter(rt.busy_time), BusyMeter()

        def share_in_range():
            before = meter.share
            share, cpu_share = meter.sample(), cpu.sample()
            assert before is not None and low <= share <= high, share  # a full period, then in range
            if spout is Waiting:
                assert cpu_share < 0.5, cpu_share  # process CPU time would call it idle

        eventually(share_in_range, 15, interval=0.3)
    finally:
        Waiting.released.set()
        rt.stop()
        Waiting.released.clear()
