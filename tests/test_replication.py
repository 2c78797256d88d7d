"""Code replication between nimbuses (gale.nimbus.replication) against a real ZooKeeper: the
submit's wait for copies decided by the injected clock, the standby's one /blobstore watch, and a
submit that waits for copies without holding nimbus's lock (scheduling goes on; nothing is left
half-written when leadership moves during the wait)."""

from __future__ import annotations

import socket
import threading

import pytest

from gale.bundle import make_bundle
from gale.clock import SimulatedClock
from gale.cluster_state import ClusterState
from gale.config import defaults
from gale.layout import Layout
from gale.records import NimbusSummary
from gale.topology.loader import load_topology_file
from gale.nimbus.blobstore import BlobStore
from gale.nimbus.daemon import Nimbus, NotLeaderError
from gale.nimbus.replication import POLL_SECS, CodeReplication
from gale.config_keys import Config
from tests.cluster import DURABLE_WC
from tests.waiting import until

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

LAYOUT = Layout("/storm")
DIGEST = "d" * 64
WAIT = {"topology.min.replication.count": 2, "topology.max.replication.wait.time.sec": 60}
WAIT_CONFIG = Config.resolve(WAIT, allow_user_keys=False)


@pytest.fixture
def state(zk) -> ClusterState:
    s = ClusterState(zk, LAYOUT)
    s.ensure_layout()
    return s


def nimbuses(state: ClusterState, *addresses: str) -> None:
    for a in addresses:
        host, port = a.split(":")
        state.set_nimbus_summary(a, NimbusSummary(host=host, port=int(port)))


def replication(state, tmp_path, clock) -> CodeReplication:
    return CodeReplication(state, BlobStore(tmp_path), "n1:1", clock=clock)


# ----------------------------------------------------------------------------- the wait, simulated time


def test_the_wait_for_copies_ends_at_its_deadline_by_the_injected_clock(state, tmp_path):
    clock = SimulatedClock()
    nimbuses(state, "n1:1", "n2:2")
    r = replication(state, tmp_path, clock)
    r.announce("t-1", DIGEST)
    state.set_blob_holder("t-1", "n2:2", "e" * 64)  # n2 holds other code: not a copy
    start = clock.monotonic()
    assert r.wait_for_replicas("t-1", DIGEST, WAIT_CONFIG) == 1
    waited = clock.monotonic() - start
    assert 60 <= waited < 60 + 2 * POLL_SECS


def test_the_wait_ends_as_soon_as_enough_nimbuses_hold_the_code(state, tmp_path):
    clock = SimulatedClock()
    nimbuses(state, "n1:1", "n2:2", "n3:3")
    r = replication(state, tmp_path, clock)
    r.announce("t-1", DIGEST)
    state.set_blob_holder("t-1", "n2:2", DIGEST)
    start = clock.monotonic()
    assert r.wait_for_replicas("t-1", DIGEST, WAIT_CONFIG) == 2
    assert clock.monotonic() == start  # no waiting at all
    # without a limit (-1) it waits past the default 60 s, until the third copy appears
    three = Config.resolve({"topology.min.replication.count": 3, "topology.max.replication.wait.time.sec": -1},
                           allow_user_keys=False)

    def third_copy_after_five_minutes() -> None:
        until(lambda: clock.monotonic() - start >= 300, 60, lambda: "the wait did not go on")
        state.set_blob_holder("t-1", "n3:3", DIGEST)

    helper = threading.Thread(target=third_copy_after_five_minutes)
    helper.start()
    assert r.wait_for_replicas("t-1", DIGEST, three) == 3
    helper.join(10)
    assert clock.monotonic() - start >= 300


def test_the_wait_asks_only_for_the_nimbuses_that_are_alive(state, tmp_path):
    clock = SimulatedClock()
    nimbuses(state, "n1:1")
    r = replication(state, tmp_path, clock)
    r.announce("t-1", DIGEST)
    start = clock.monotonic()
    assert r.wait_for_replicas("t-1", DIGEST, WAIT_CONFIG) == 1
    assert clock.monotonic() == start


# ----------------------------------------------------------------------------- in-process nimbuses


class GatedClock(SimulatedClock):
    """Simulated time whose sleep() holds the sleeper until the test opens the gate."""

    def __init__(self):
        super().__init__()
        self.sleeping = threading.Event()
        self.gate = threading.Event()

    def sleep(self, secs: float) -> None:
        self.sleeping.set()
        self.gate.wait(60)
        self.advance(secs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def pair(conf, tmp_path):
    """A leader and a standby nimbus in this process, without HTTP servers: the standby cannot
    copy the leader's code. Rounds run only when something wakes a loop."""
    made: list[Nimbus] = []

    def make(i: int, clock=None, **extra) -> Nimbus:
        c = {**conf, "nimbus.http.port": free_port(), "storm.local.dir": str(tmp_path / f"nimbus-{i}"),
             "nimbus.monitor.freq.secs": 600, **WAIT, **extra}
        n = Nimbus(Config.resolve(c, allow_user_keys=False), host="127.0.0.1",
                   **({"clock": clock} if clock else {}))
        made.append(n)
        n.start()
        return n

    yield make
    for n in reversed(made):
        n.stop()


def watch_count(nimbus: Nimbus, under: str = "/") -> int:
    """The watches the nimbus's client holds on ``under`` and the paths below it."""
    client = nimbus.client
    prefix = under.rstrip("/") + "/"
    return sum(len(w) for watchers in (client._child_watchers, client._data_watchers)
               for path, w in watchers.items() if path == under or path.startswith(prefix))


def test_the_standby_registers_its_blobstore_watch_once(pair):
    leader = pair(0)
    zk = leader.client
    until(leader.is_leader, 15, lambda: "no leader")
    standby = pair(1)
    until(lambda: standby.iterations >= 1, 10, lambda: "the standby's loop never ran")
    blobstore = leader.layout.dir("blobstore")
    # the watches on the blobstore and below it (the total also counts one-shot watches elsewhere,
    # such as the leader's node, that come and go: comparing totals raced with them). A fired watch
    # is off kazoo's books until its ChildrenWatch has re-read the children and armed it again, so
    # each check waits for the count it asserts; a second watch would stay and fail it
    def one_watch(when: str) -> None:
        until(lambda: watch_count(standby, under=blobstore) == 1, 10,
              lambda: f"{when}: {watch_count(standby, under=blobstore)} watches on the blobstore, not 1")

    one_watch("at start")
    for i in range(5):
        n = standby.iterations
        # a topology announced by some nimbus: the one watch wakes the standby's loop for a round
        zk.create(f"{blobstore}/t-{i}/127.0.0.1:9", DIGEST.encode(), makepath=True)
        until(lambda: standby.iterations > n, 10, lambda: f"announcement {i} did not wake the standby")
        one_watch(f"after announcement {i}")


def bundle() -> bytes:
    topo = load_topology_file(DURABLE_WC, defaults())
    return make_bundle(DURABLE_WC.parent, topo.to_json(), {"topology.workers": 1})


def submit_in_thread(leader: Nimbus, name: str) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["id"] = leader.submit(name, bundle())
        except Exception as exc:  # noqa: BLE001 - the test asserts it
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_a_submit_waits_for_copies_while_scheduling_goes_on(pair):
    clock = GatedClock()
    leader = pair(0, clock=clock)
    until(leader.is_leader, 15, lambda: "no leader")
    pair(1)
    until(lambda: len(leader.state.nimbus_summaries()) == 2, 10, lambda: "the standby never registered")
    t, out = submit_in_thread(leader, "wc")
    until(clock.sleeping.is_set, 20, lambda: f"the submit did not wait for copies: {out}")
    (tid,) = leader.pending
    rounds = leader.rounds
    leader.wakeup.set()
    until(lambda: leader.rounds > rounds, 10, lambda: "no scheduling round ran during the wait")
    # that round's cleanup kept the code of the topology being submitted; nothing else is written yet
    assert leader.blobs.has(tid) and leader.state.storm_base(tid) is None
    clock.gate.set()  # the wait reaches its deadline (60 s, simulated): submit goes on with one copy
    t.join(20)
    assert out.get("id") == tid, out
    assert leader.state.storm_base(tid).name == "wc" and leader.state.assignment(tid) is not None
    assert leader.pending == {}


def test_a_submit_whose_leadership_ends_during_the_wait_leaves_nothing_behind(pair):
    clock = GatedClock()
    leader = pair(0, clock=clock)
    zk = leader.client
    until(leader.is_leader, 15, lambda: "no leader")
    pair(1)
    until(lambda: len(leader.state.nimbus_summaries()) == 2, 10, lambda: "the standby never registered")
    t, out = submit_in_thread(leader, "wc")
    until(clock.sleeping.is_set, 20, lambda: f"the submit did not wait for copies: {out}")
    (tid,) = leader.pending
    layout = leader.layout
    assert zk.exists(layout.blobstore_dir(tid)) is not None
    # a successor's election bumps the epoch; the old leader has not noticed yet
    epoch, _ = zk.get(layout.leader_epoch)
    zk.set(layout.leader_epoch, str(int(epoch) + 1).encode())
    clock.gate.set()
    t.join(20)
    assert isinstance(out.get("error"), NotLeaderError), out
    assert leader.pending == {} and not leader.blobs.has(tid)
    for path in (layout.storm(tid), layout.blobstore_dir(tid), layout.workerbeats_dir(tid), layout.errors_dir(tid)):
        assert zk.exists(path) is None, path
