"""Who moves a transfer's batches: the executor thread that owns it (``pump`` between rounds,
``idle`` when it has nothing to do), or the standby thread while the owner is busy elsewhere."""

from __future__ import annotations

import threading
import time

from gale import TopologyBuilder
from gale.topology.definition import TopologyTasks
from gale.topology.tuple import Fields, Tuple
from gale.worker.local import local_conf
from gale.worker.runtime.runtime import WorkerRuntime
from gale.worker.transfer import TUPLE, Transfer
from gale.zkserver import free_port
from tests.topologies import QuietSpout, Sink
from tests.waiting import eventually

SECRET = b"0123456789abcdef0123456789abcdef"
F = Fields(["v"], "src:default")


def _pair(delivered: list) -> tuple[Transfer, Transfer]:
    """A sender (no owner: its standby sends) and a receiver that records each value it delivers
    with the name of the thread that delivered it."""
    port = free_port()
    receiver = Transfer(bind_host="127.0.0.1", port=port, secret=SECRET, roles={7: TUPLE}, fields_for=lambda c, s: F,
                        deliver=lambda task, tup: delivered.append((tup.values[0], threading.current_thread().name))
                        or True)
    sender = Transfer(bind_host="127.0.0.1", port=free_port(), secret=SECRET, roles={}, deliver=lambda *_: True,
                      fields_for=lambda c, s: F)
    sender.set_routes({7: f"127.0.0.1:{port}"})
    return sender, receiver


def _send(sender: Transfer, values) -> None:
    for v in values:
        sender.send_tuple(7, Tuple([v], F, "src", "default", 1, {5: 6}))


def _all_arrived(delivered: list, n: int) -> None:
    assert sorted(v for v, _ in delivered) == list(range(n)), f"{len(delivered)} of {n} arrived"


def test_the_owner_moves_every_batch_while_it_pumps_and_the_standby_stays_out():
    delivered: list = []
    sender, receiver = _pair(delivered)
    receiver.takeover_secs = 60.0  # an owner that pumps never looks absent in this test
    stop = threading.Event()

    def owner() -> None:
        while not stop.is_set():
            receiver.pump()
            receiver.idle(0.001)

    thread = threading.Thread(target=owner, name="owner")
    receiver.start()
    sender.start()
    thread.start()
    try:
        _send(sender, range(3000))
        eventually(lambda: _all_arrived(delivered, 3000), 15)
        assert {name for _, name in delivered} == {"owner"}
        assert [v for v, _ in delivered] == list(range(3000))  # one source task, one stream: in order
    finally:
        stop.set()
        thread.join(5)
        sender.close(0.1)
        receiver.close(0.1)


def test_the_standby_moves_batches_while_the_owner_is_stuck_in_a_long_call():
    """The owner pumped, then went into a long call (a bolt waiting on a database): batches still
    arrive, delivered by the standby thread, while the owner is away."""
    delivered: list = []
    sender, receiver = _pair(delivered)
    receiver.takeover_secs = 0.05
    pumped, back = threading.Event(), threading.Event()

    def owner() -> None:
        receiver.pump()
        pumped.set()
        back.wait(30)  # the long call
        receiver.pump()

    thread = threading.Thread(target=owner, name="owner")
    receiver.start()
    sender.start()
    thread.start()
    try:
        assert pumped.wait(10)
        _send(sender, range(500))
        eventually(lambda: _all_arrived(delivered, 500), 15)
        assert thread.is_alive(), "the owner came back before the batches arrived"
        assert {name for _, name in delivered} == {"transfer-standby"}
    finally:
        back.set()
        thread.join(5)
        sender.close(0.1)
        receiver.close(0.1)


def test_idle_returns_when_a_batch_arrives_and_when_woken():
    delivered: list = []
    sender, receiver = _pair(delivered)
    receiver.takeover_secs = 60.0
    receiver.start()
    sender.start()
    returned: list = []

    def sleep_in_idle() -> None:
        receiver.pump()  # an owner: the standby stays out
        receiver.idle(60.0)
        receiver.pump()  # takes what woke it, at once
        returned.append(list(delivered))

    try:
        thread = threading.Thread(target=sleep_in_idle, name="owner")
        thread.start()
        eventually(lambda: _locked(receiver), 10)  # asleep in idle, holding the transfer
        _send(sender, [0])
        thread.join(20)
        assert not thread.is_alive(), "idle did not return when a batch arrived"
        assert returned == [[(0, "owner")]]  # what woke it, taken by the pump right after

        thread = threading.Thread(target=sleep_in_idle, name="owner")
        thread.start()
        eventually(lambda: _locked(receiver), 10)
        receiver.wake()
        thread.join(20)
        assert not thread.is_alive(), "idle did not return on wake()"
        assert len(returned) == 2 and returned[1] == [(0, "owner")]
    finally:
        sender.close(0.1)
        receiver.close(0.1)


def test_a_wait_under_a_millisecond_sleeps_rather_than_returning_at_once():
    """zmq_poll counts whole milliseconds and pyzmq truncates a float: a wait for a flush due in
    0.4 ms was a poll of 0 ms, so an owner with acks queued went round ``idle`` tens of thousands of
    times a second until its next flush (177,000 idles for 3,500 batches in ``bench_crossing``)."""
    sender, receiver = _pair([])
    sender.start()
    try:
        with sender._lock:
            for wait in (0.0004, 0.00001):
                t0 = time.monotonic()
                sender._wait(wait)
                assert time.monotonic() - t0 >= wait
    finally:
        sender.close(0.1)
        receiver.close(0.1)


def _locked(transfer: Transfer) -> None:
    assert transfer._lock.locked()


def test_close_sends_what_is_queued_before_it_stops():
    delivered: list = []
    sender, receiver = _pair(delivered)
    sender.takeover_secs = 60.0  # the standby waits: only close() can send
    receiver.start()
    sender.start()
    try:
        _send(sender, range(100))
        assert not delivered and sender.queued() == 100
        sender.close(5.0)
        assert sender.queued() == 0 and sender.stats["sent_messages"] == 100
        eventually(lambda: _all_arrived(delivered, 100), 10)
    finally:
        receiver.close(0.1)


def test_the_first_executor_thread_owns_the_transfer_and_is_woken_through_it():
    class IO:
        wakes = 0

        def pump(self):
            pass

        def idle(self, timeout):
            time.sleep(timeout)

        def wake(self):
            IO.wakes += 1

    builder = TopologyBuilder()
    builder.set_spout("s", QuietSpout, 1)
    builder.set_bolt("b", Sink, 2).shuffle_grouping("s")
    topo = builder.create_topology()
    conf = local_conf(topo, {"topology.acker.executors": 0})
    layout = TopologyTasks(topo.definition, conf, 1)
    io = IO()
    rt = WorkerRuntime(topo, topology_id="t", conf=conf, layout=layout, executors=layout.executors, io=io)
    rt.start(threads=2, spawn=False)
    assert rt.threads[0].io is io and rt.threads[1].io is None
    rt.threads[0].wake()
    rt.threads[1].wake()
    assert IO.wakes == 1
    rt.stop()
