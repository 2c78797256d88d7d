"""Load reports between workers (``LOADS`` messages): the meter, the message and its checks, the
receiver's table, and two real transfers reporting to each other over ZeroMQ."""

from __future__ import annotations

import threading

import msgpack
import pytest

from gale import Bolt, Spout, TopologyBuilder
from gale.topology.definition import TopologyTasks
from gale.topology.tuple import Fields
from gale.worker.loads import FRESH_SECS, BusyMeter, PeerLoads, encode_report
from gale.worker.daemon import attach
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


# ---------------------------------------------------------------------- backpressure between workers


def test_a_task_reported_full_holds_back_until_a_report_says_it_drained_or_reports_go_stale():
    clock = Ticks(10.0)
    peers = PeerLoads(clock)
    assert not peers.full()
    peers.take(500, [3, 1000, 4, 10])  # worker B: task 3's queue is full
    assert peers.full()
    peers.take(500, [5, 999])  # worker C, not full, does not clear B's task
    assert peers.full()
    peers.take(500, [3, 998, 4, 10])  # B's task 3 drained
    assert not peers.full() and peers.full_tasks == {}
    peers.take(500, [5, 1000])
    clock.t += FRESH_SECS
    assert peers.full()
    clock.t += 0.5  # C stopped reporting while full: it holds no one back any longer
    assert not peers.full()


def test_a_worker_reports_when_it_gets_a_full_queue_or_drains_it_not_only_once_a_second():
    state = {"full": False}
    t = _transfer(1, {})
    t.local_loads = lambda: [(3, 1.0 if state["full"] else 0.2)]
    t.local_full = lambda: state["full"]
    now = 100.0
    assert msgpack.unpackb(t._load_report(now))[2] == [3, 200]
    assert t._load_report(now + 0.5) is None  # within the period, nothing changed
    state["full"] = True
    assert msgpack.unpackb(t._load_report(now + 0.5))[2] == [3, 1000]
    assert t._load_report(now + 0.6) is None
    state["full"] = False
    assert msgpack.unpackb(t._load_report(now + 0.6))[2] == [3, 200]
    assert t._load_report(now + 0.7) is None and t._load_report(now + 1.6) is not None


def test_a_worker_whose_peer_reports_a_full_queue_is_congested_until_the_peer_reports_it_drained():
    a_port, b_port = free_port(), free_port()
    state = {"full": False}
    a, b = _transfer(a_port, {1: 0.0}), _transfer(b_port, {})
    b.local_loads = lambda: [(3, 1.0 if state["full"] else 0.2)]
    b.local_full = lambda: state["full"]
    try:
        a.set_routes({3: f"127.0.0.1:{b_port}"})
        b.set_routes({1: f"127.0.0.1:{a_port}"})
        a.start()
        b.start()
        eventually(lambda: _equal(a.load_of(3), 0.2), 15)
        assert not a.congested()
        state["full"] = True
        eventually(lambda: _equal(a.congested(), True), 15)
        assert a.load_of(3) == 1.0
        state["full"] = False
        eventually(lambda: _equal(a.congested(), False), 15)
    finally:
        a.close(0.1)
        b.close(0.1)


class Flood(Spout):
    """Emits unanchored tuples as fast as it is asked (no pending limit applies) until ``stopped``."""

    stopped = False
    emitted = 0

    def declare_output_fields(self, declarer):
        declarer.declare(["v"])

    def next_tuple(self):
        if not Flood.stopped:
            Flood.emitted += 1
            self.collector.emit([Flood.emitted])


class Blocked(Bolt):
    """Waits inside its first ``execute`` until the test releases it; counts what it executes."""

    released = threading.Event()
    executed = 0

    def execute(self, tup):
        Blocked.released.wait()
        Blocked.executed += 1


class _Worker:
    """A worker runtime and its transfer, wired as ``gale.worker.daemon.Worker`` wires them."""

    def __init__(self, topo, conf, layout, component: str):
        self.port = free_port()
        self.transfer = Transfer(
            bind_host="127.0.0.1", port=self.port, secret=SECRET,
            deliver=lambda task, payload: self.runtime.deliver(task, payload),
            deliver_many=lambda task, payloads: self.runtime.deliver_many(task, payloads),
            fields_for=lambda c, s: self.runtime._stream_fields.get((c, s)))
        self.runtime = WorkerRuntime(topo, topology_id="bp", conf=conf, layout=layout,
                                     executors=layout.component_executors[component],
                                     remote=self.transfer, io=self.transfer)
        attach(self.transfer, self.runtime)
        self.tasks = [t for start, end in layout.component_executors[component] for t in range(start, end + 1)]


def test_a_full_queue_in_one_worker_pauses_the_spout_in_another_and_nothing_is_lost():
    """A bolt stuck in a call (its worker's only executor thread with it) lets its queue fill; its
    worker's standby thread still takes batches and reports the full queue, and the spout's worker
    stops emitting instead of piling the flood into that queue. Released, every tuple arrives."""
    builder = TopologyBuilder()
    builder.set_spout("flood", Flood, 1)
    builder.set_bolt("stuck", Blocked, 1).shuffle_grouping("flood")
    topo = builder.create_topology()
    conf = local_conf(topo, {"topology.workers": 2, "topology.acker.executors": 0,
                             "topology.executor.receive.buffer.size": 100})
    layout = TopologyTasks(topo.definition, conf, 2)
    Flood.emitted, Flood.stopped, Blocked.executed = 0, False, 0
    Blocked.released.clear()
    a, b = _Worker(topo, conf, layout, "flood"), _Worker(topo, conf, layout, "stuck")
    a.transfer.set_routes({t: f"127.0.0.1:{b.port}" for t in b.tasks})
    b.transfer.set_routes({t: f"127.0.0.1:{a.port}" for t in a.tasks})
    for w in (a, b):
        w.transfer.start()
    b.runtime.start(active=True)
    a.runtime.start(active=True)
    try:
        eventually(lambda: _equal(a.transfer.peer_loads.full(), True), 15)
        held_at = Flood.emitted
        reports = b.transfer.stats["load_reports_sent"]
        # two more of the stuck worker's periodic reports: a second and more with the spout held
        eventually(lambda: _equal(b.transfer.stats["load_reports_sent"] >= reports + 2, True), 15)
        # the flood has no end of its own (how many it emits before the full report lands varies with
        # the host: 900-7,900 here, 16,100 once under CI's load, over 100,000 once with the Python
        # source beside a chaos run), so a spout that was not held would have gone on emitting
        assert a.runtime.congested
        assert Flood.emitted - held_at < 1000, (held_at, Flood.emitted)  # a round's emits at most
        Flood.stopped = True
        Blocked.released.set()
        eventually(lambda: _equal(Blocked.executed, Flood.emitted), 30)
        assert a.transfer.stats["dropped_messages"] == 0
        assert a.transfer.stats["invalid_messages"] == b.transfer.stats["invalid_messages"] == 0
        eventually(lambda: _equal(a.runtime.congested, False), 15)
    finally:
        Blocked.released.set()
        for w in (a, b):
            w.runtime.stop()
            w.transfer.close(0.1)
