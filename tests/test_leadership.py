"""The leader-election recipe (gale.nimbus.leadership) against a real ZooKeeper: one leader, an
epoch per term that fences the last term's writes, stepping aside while not ready, and the
connection-state contract (SUSPENDED: not leading; LOST: the term ends, a new one begins)."""

from __future__ import annotations

import threading

import pytest
from kazoo.protocol.connection import _CONNECTION_DROP
from kazoo.protocol.states import KazooState

from gale.cluster_state import ClusterState, FencedError
from gale.layout import Layout
from gale.records import StormBase, TopologyStatus
from gale.nimbus.leadership import LeaderElection, Term
from tests.waiting import until

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

LAYOUT = Layout("/storm")


class Recorder:
    """Callbacks that record what the recipe told its owner, and whether it led at that moment."""

    def __init__(self):
        self.election: LeaderElection | None = None
        self.elected: list[tuple[Term, bool]] = []
        self.deposed: list[tuple[Term, bool]] = []

    def on_elected(self, term: Term) -> None:
        self.elected.append((term, self.election.is_leader()))

    def on_deposed(self, term: Term) -> None:
        self.deposed.append((term, self.election.is_leader()))


@pytest.fixture
def contenders(zk_client_factory):
    made: list[LeaderElection] = []

    def make(identifier: str, **kw) -> tuple[LeaderElection, Recorder]:
        rec = Recorder()
        client = zk_client_factory(timeout=6.0)
        election = LeaderElection(client, LAYOUT, identifier, on_elected=rec.on_elected,
                                  on_deposed=rec.on_deposed, **kw)
        rec.election = election
        made.append(election)
        return election, rec

    yield make
    for election in made:
        election.stop()


def base() -> StormBase:
    return StormBase(name="t", status=TopologyStatus.ACTIVE, num_workers=1, component_executors={}, launch_time_secs=1)


def test_one_leader_per_term_and_the_old_terms_writes_are_fenced(contenders, zk):
    e1, r1 = contenders("n1")
    e1.start()
    until(e1.is_leader, 10, lambda: "n1 never led")
    (term1, leading_when_told), = r1.elected
    assert term1.epoch == 1 and not leading_when_told  # told before is_leader() turned True
    assert term1.fence == (LAYOUT.leader_epoch, zk.exists(LAYOUT.leader_epoch).version)

    e2, r2 = contenders("n2")
    e2.start()
    until(lambda: e2.contenders() == ["n1", "n2"], 10, lambda: f"contenders: {e2.contenders()}")
    assert e2.current_leader() == "n1" and not e2.is_leader() and r2.elected == []

    # the leader's writes carry its term's fence
    old = ClusterState(zk, LAYOUT)
    old.fence = term1.fence
    old.set_storm_base("t-1", base())

    e1.stop()
    until(e2.is_leader, 15, lambda: "n2 never took over")
    assert [t.epoch for t, _ in r2.elected] == [2]
    assert r1.deposed == [(term1, False)]  # told after is_leader() turned False
    with pytest.raises(FencedError):
        old.set_storm_base("t-1", base())  # a deposed leader that has not noticed cannot write


def test_a_contender_that_is_not_ready_steps_aside(contenders):
    asked = threading.Event()

    def never_ready() -> bool:
        asked.set()
        return False

    e1, r1 = contenders("n1", ready=never_ready, retry_secs=0.2)
    e1.start()
    until(asked.is_set, 10, lambda: "n1 never won the lock")  # it won, and declined
    e2, r2 = contenders("n2")
    e2.start()
    until(e2.is_leader, 10, lambda: "n2 never led")
    assert not e1.is_leader() and r1.elected == [] and e2.epoch == 1


def test_step_down_hands_leadership_over(contenders):
    e1, r1 = contenders("n1")
    e1.start()
    until(e1.is_leader, 10, lambda: "n1 never led")
    e2, _ = contenders("n2")
    e2.start()
    until(lambda: len(e1.contenders()) == 2, 10, lambda: "n2 never contended")
    e1.step_down()
    assert not e1.is_leader()
    until(e2.is_leader, 10, lambda: "n2 never took over")
    assert e2.epoch == 2 and len(r1.deposed) == 1
    until(lambda: e2.contenders() == ["n2", "n1"], 10, lambda: f"contenders: {e2.contenders()}")


def test_lost_session_ends_the_term_and_a_new_one_begins(contenders, expire):
    e1, r1 = contenders("n1")
    e1.start()
    until(e1.is_leader, 10, lambda: "n1 never led")
    expire(e1.client)
    until(lambda: len(r1.elected) == 2 and e1.is_leader(), 20, lambda: f"terms: {r1.elected}")
    assert [t.epoch for t, _ in r1.elected] == [1, 2]
    assert [t.epoch for t, _ in r1.deposed] == [1]


def test_not_leading_while_suspended_and_the_same_term_resumes(contenders):
    e1, r1 = contenders("n1")
    e1.start()
    until(e1.is_leader, 10, lambda: "n1 never led")
    seen: list[tuple[KazooState, bool]] = []
    back = threading.Event()

    def listener(state: KazooState) -> bool:
        seen.append((state, e1.is_leader()))
        if state == KazooState.CONNECTED:
            back.set()
            return True
        return False

    e1.client.add_listener(listener)
    e1.client._call(_CONNECTION_DROP, None)  # kazoo's own test harness trick: drop the connection
    until(back.is_set, 15, lambda: f"states: {seen}")
    assert seen[0] == (KazooState.SUSPENDED, False)
    until(e1.is_leader, 10, lambda: "n1 did not resume")
    assert len(r1.elected) == 1 and r1.deposed == []  # the same session: the same term
