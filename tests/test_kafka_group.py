"""The ZooKeeper consumer group: pure range assignment and layout, then GroupMember on a real ZooKeeper."""

from __future__ import annotations

import json
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kazoo.protocol.states import KazooState

from gale.config import validate
from gale.worker.connectors.kafka_config import BOLT_KEYS, SPOUT_KEYS
from gale.worker.connectors.kafka_group import (
    BrokerPaths,
    ConsumerGroupPaths,
    GroupDataError,
    Registration,
    broker_address,
    consumer_id_string,
    parse_offset,
    parse_registration,
    parse_topic_partitions,
    range_assign,
    registration_json,
)
from gale.worker.connectors.kafka_member import GroupMember
from tests.waiting import until

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

# ------------------------------------------------------------------------------------ range assignment


def test_range_assignment_example_from_the_kafka_source():
    # 5 partitions, 2 consumers x 2 streams: C1-0 p0,p1; C1-1 p2; C2-0 p3; C2-1 p4
    got = range_assign({"t": range(5)}, {"C1": {"t": 2}, "C2": {"t": 2}})
    assert got == {
        "C1-0": [("t", 0), ("t", 1)],
        "C1-1": [("t", 2)],
        "C2-0": [("t", 3)],
        "C2-1": [("t", 4)],
    }


def test_thread_ids_sort_as_strings():
    # "c-10" sorts before "c-2": with 3 partitions and 11 threads only c-0, c-1, c-10 get one
    got = range_assign({"t": [0, 1, 2]}, {"c": {"t": 11}})
    assert got["c-0"] == [("t", 0)] and got["c-1"] == [("t", 1)] and got["c-10"] == [("t", 2)]
    assert got["c-2"] == [] and got["c-9"] == []


def test_partitions_sort_numerically_and_topics_are_independent():
    got = range_assign({"a": [10, 2, 1], "b": [0, 1]}, {"x": {"a": 1, "b": 1}, "y": {"a": 1}})
    assert got == {"x-0": [("a", 1), ("a", 2), ("b", 0), ("b", 1)], "y-0": [("a", 10)]}


def test_more_members_than_partitions_leaves_some_idle():
    got = range_assign({"t": [0, 1]}, {f"m{i}": {"t": 1} for i in range(4)})
    assert [got[f"m{i}-0"] for i in range(4)] == [[("t", 0)], [("t", 1)], [], []]


def test_wildcard_members_count_for_matching_topics():
    regs = {"java": Registration({"lo.*": 1}, "white_list"), "gale": Registration({"logs": 1}, "static")}
    got = range_assign({"logs": range(4)}, regs)
    assert sorted(got) == ["gale-0", "java-0"]
    black = {"java": Registration({"lo.*": 1}, "black_list"), "gale": Registration({"logs": 1}, "static")}
    assert sorted(range_assign({"logs": range(4)}, black)) == ["gale-0"]


@settings(max_examples=200, deadline=None)
@given(
    n_parts=st.integers(0, 40),
    members=st.dictionaries(st.text("abcxyz-_0123456789", min_size=1, max_size=12), st.integers(1, 4),
                            min_size=1, max_size=8),
)
def test_range_assignment_properties(n_parts, members):
    got = range_assign({"t": range(n_parts)}, {m: {"t": n} for m, n in members.items()})
    threads = sorted(got)
    assert len(threads) == sum(members.values())
    # every partition exactly once
    flat = [p for t in threads for (_, p) in got[t]]
    assert sorted(flat) == list(range(n_parts))
    # contiguous ranges in thread order, sizes differing by at most one, bigger ones first
    assert flat == list(range(n_parts))
    sizes = [len(got[t]) for t in threads]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)


# ------------------------------------------------------------------------------------ layout and payloads


def test_paths_under_the_default_and_a_custom_root():
    p = ConsumerGroupPaths("/", "g")
    assert p.member("c1") == "/consumers/g/ids/c1"
    assert p.owner("t", 3) == "/consumers/g/owners/t/3"
    assert p.offset("t", 3) == "/consumers/g/offsets/t/3"
    q = ConsumerGroupPaths("/kafka/", "g")
    assert q.ids_dir == "/kafka/consumers/g/ids"
    b = BrokerPaths("/kafka")
    assert b.broker(1) == "/kafka/brokers/ids/1"
    assert b.partition_state("t", 0) == "/kafka/brokers/topics/t/partitions/0/state"
    with pytest.raises(ValueError, match="legal Kafka name"):
        ConsumerGroupPaths("/", "bad/group")


def test_consumer_id_and_registration_payload():
    cid = consumer_id_string("g", "host1", 1700000000123, "0123456789abcdef")
    assert cid == "g_host1-1700000000123-01234567"
    doc = json.loads(registration_json({"t": 1}, 1700000000123))
    assert doc == {"version": 1, "subscription": {"t": 1}, "pattern": "static", "timestamp": "1700000000123"}
    assert parse_registration(registration_json({"t": 1}, 5)).streams_for("t") == 1
    with pytest.raises(GroupDataError, match="/x"):
        parse_registration(b"{nope", "/x")
    assert parse_offset(b"42") == 42
    with pytest.raises(GroupDataError, match="not a decimal"):
        parse_offset(b"{\"offset\": 1}", "/o")


def test_broker_and_topic_payloads():
    v1 = json.dumps({"version": 1, "host": "h", "port": 9092, "jmx_port": -1, "timestamp": "1"}).encode()
    assert broker_address(v1) == "h:9092"
    v4 = json.dumps({"version": 4, "host": None, "port": -1, "endpoints": ["CLIENT://a:1", "SSL://b:2"],
                     "listener_security_protocol_map": {"CLIENT": "PLAINTEXT", "SSL": "SSL"}}).encode()
    assert broker_address(v4) == "a:1"
    ssl_only = json.dumps({"version": 4, "host": None, "port": -1, "endpoints": ["SSL://b:2"],
                           "listener_security_protocol_map": {"SSL": "SSL"}}).encode()
    assert broker_address(ssl_only) is None
    assert parse_topic_partitions(b'{"version":1,"partitions":{"1":[0],"0":[0],"10":[0]}}') == [0, 1, 10]


def test_connector_keys_are_accepted_as_topology_config():
    from gale.worker.connectors.rabbitmq_bolt import KEYS as RABBIT_BOLT_KEYS
    from gale.worker.connectors.rabbitmq_spout import KEYS as RABBIT_SPOUT_KEYS

    # user keys must not look like typos of Gale's own keys (gale.config refuses those)
    keys = {*SPOUT_KEYS, *BOLT_KEYS, "kafka.spout.parallelism", *RABBIT_SPOUT_KEYS, *RABBIT_BOLT_KEYS}
    validate({k: "x" for k in keys}, allow_user_keys=True)


# ------------------------------------------------------------------------------------ GroupMember on ZooKeeper


class FakeSpout:
    """Stands in for the spout: reports offsets for the member's current generation."""

    def __init__(self):
        self.member = None
        self.offsets = {}
        self.pending = {}

    def snapshot(self):
        return self.member.assignment.generation, dict(self.offsets)

    def pending_of(self, partitions):
        return sum(n for tp, n in self.pending.items() if tp in partitions)


def make_member(client, topics=("t",), partitions=4, backoff=0.1, name="m", **kwargs):
    fake = FakeSpout()
    if kwargs.get("drain"):
        kwargs["pending"] = fake.pending_of
    n = {"t": partitions} if isinstance(partitions, int) else partitions
    member = GroupMember(
        client, ConsumerGroupPaths("/", "g"), consumer_id_string("g", "host", int(time.time() * 1000)),
        list(topics), fake.snapshot, partitions=kwargs.pop("parts_fn", lambda t: list(range(n[t]))),
        commit_interval=kwargs.pop("commit_interval", 0.2), backoff=backoff, max_retries=3, name=name, **kwargs,
    )
    fake.member = member
    return member, fake




def ready(*members):
    return all(not m.paused for m in members)


@pytest.mark.timeout(60)
def test_members_split_partitions_and_a_leaving_member_hands_them_over(zk, zk_client_factory):
    a, _ = make_member(zk_client_factory(), name="a")
    b, _ = make_member(zk_client_factory(), name="b")
    a.start()
    b.start()
    try:
        until(lambda: ready(a, b) and len(a.owned) + len(b.owned) == 4, 20, "2+2 split")
        first, second = sorted([a, b], key=lambda m: m.thread_id)
        assert sorted(first.owned) == [("t", 0), ("t", 1)] and sorted(second.owned) == [("t", 2), ("t", 3)]
        owners = {p: zk.get(f"/consumers/g/owners/t/{p}")[0].decode() for p in range(4)}
        assert owners == {0: first.thread_id, 1: first.thread_id, 2: second.thread_id, 3: second.thread_id}
        a.stop()
        until(lambda: ready(b) and len(b.owned) == 4, 20, "b owning everything")
        assert zk.get_children("/consumers/g/ids") == [b.consumer_id]
        assert {zk.get(f"/consumers/g/owners/t/{p}")[0].decode() for p in range(4)} == {b.thread_id}
    finally:
        a.stop()
        b.stop()


@pytest.mark.timeout(60)
def test_a_rebalance_waits_for_the_tuples_in_flight_from_the_partitions_given_up(zk, zk_client_factory):
    a, fake = make_member(zk_client_factory(), name="a", drain=30.0, commit_interval=60.0)
    a.start()
    try:
        until(lambda: ready(a) and len(a.owned) == 4, 20, "a owning everything")
        with a.lock:  # a emitted offsets 0..4 of partitions 2 and 3; 4 is still in flight in each
            fake.offsets = {("t", p): 4 for p in range(4)}
            fake.pending = {("t", 2): 1, ("t", 3): 1, ("t", 0): 7}  # partition 0 stays a's: not waited for
        b, _ = make_member(zk_client_factory(), name="b")
        b.start()
        try:
            until(lambda: a.paused, 20, "a pausing for the rebalance")
            # meanwhile the spout may re-emit the failed tuples of what a gives up, and only those
            until(lambda: a.draining == frozenset({("t", 2), ("t", 3)}), 20, "a draining partitions 2 and 3")
            # a still holds everything it gives up: b cannot own partitions 2 and 3 yet
            with pytest.raises(AssertionError):
                until(lambda: ready(b) and b.owned, 1.0, "b owning something")
            with a.lock:  # the acks arrive: offsets 4 of partitions 2 and 3 are done
                fake.offsets = {("t", p): 5 for p in range(4)}
                fake.pending = {("t", 0): 7}
            until(lambda: ready(a, b) and len(a.owned) + len(b.owned) == 4, 20, "2+2 split")
            assert a.thread_id < b.thread_id  # registered later: b sorts after a and takes 2 and 3
            assert sorted(b.owned) == [("t", 2), ("t", 3)]
            for topic, p in b.owned:  # committed before the hand-over: the acks during the drain count
                assert zk.get(f"/consumers/g/offsets/{topic}/{p}")[0] == b"5"
            assert a.drain_timeouts == 0 and a.draining == frozenset()
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.mark.timeout(60)
def test_a_drain_that_does_not_finish_in_time_is_logged_and_the_partitions_are_handed_over(zk, zk_client_factory):
    a, fake = make_member(zk_client_factory(), name="a", drain=0.3)
    a.start()
    try:
        until(lambda: ready(a) and len(a.owned) == 4, 20, "a owning everything")
        with a.lock:
            fake.pending = {("t", p): 1 for p in range(4)}  # never acked
        b, _ = make_member(zk_client_factory(), name="b")
        b.start()
        try:
            until(lambda: ready(a, b) and len(a.owned) + len(b.owned) == 4, 20, "2+2 split")
            assert a.drain_timeouts + b.drain_timeouts == 1
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.mark.timeout(60)
def test_claim_conflict_releases_and_retries_until_the_old_owner_is_gone(zk, zk_client_factory):
    stale = zk_client_factory()
    stale.create("/consumers/g/owners/t/3", b"g_dead-1-deadbeef-0", ephemeral=True, makepath=True)
    m, _ = make_member(zk_client_factory(), backoff=0.1)
    m.start()
    try:
        until(lambda: m.rebalance_failures >= 3, 20, "failed claim attempts")
        # it released what it had claimed in each failed attempt and does not emit
        assert m.paused and m.owned == frozenset()
        assert sorted(zk.get_children("/consumers/g/owners/t")) == ["3"]
        stale.stop()  # the dead owner's session ends: its ephemeral owner node vanishes
        until(lambda: ready(m) and len(m.owned) == 4, 20, "claim after the stale owner left")
        assert zk.get("/consumers/g/owners/t/3")[0].decode() == m.thread_id
    finally:
        m.stop()


@pytest.mark.timeout(60)
def test_session_expiry_re_registers_and_rebalances(zk, zk_client_factory, expire):
    a_client = zk_client_factory()
    a, _ = make_member(a_client, name="a")
    b, _ = make_member(zk_client_factory(), name="b")
    a.start()
    b.start()
    try:
        until(lambda: ready(a, b) and len(a.owned) == 2 and len(b.owned) == 2, 20, "2+2 split")
        old_session = zk.get(f"/consumers/g/ids/{a.consumer_id}")[1].ephemeralOwner
        rebalances = b.rebalances
        expire(a_client)
        # b sees a's registration vanish and rebalances; a registers again with its new session
        until(lambda: b.rebalances > rebalances, 20, "b rebalancing")
        until(lambda: ready(a, b) and len(a.owned) == 2 and len(b.owned) == 2
                 and zk.exists(f"/consumers/g/ids/{a.consumer_id}") is not None, 20, "2+2 split again")
        assert zk.get(f"/consumers/g/ids/{a.consumer_id}")[1].ephemeralOwner != old_session
        owners = {zk.get(f"/consumers/g/owners/t/{p}")[0].decode() for p in range(4)}
        assert owners == {a.thread_id, b.thread_id}
    finally:
        a.stop()
        b.stop()


@pytest.mark.timeout(60)
def test_commits_write_only_changed_offsets_of_owned_partitions(zk, zk_client_factory):
    m, fake = make_member(zk_client_factory(), partitions=2, commit_interval=60)
    m.start()
    try:
        until(lambda: ready(m) and len(m.owned) == 2, 20, "ownership")
        fake.offsets = {("t", 0): 5, ("t", 1): 7, ("t", 9): 100}  # t-9: not owned, never written
        assert m.commit(wait=5)
        assert zk.get("/consumers/g/offsets/t/0")[0] == b"5" and zk.get("/consumers/g/offsets/t/1")[0] == b"7"
        assert zk.exists("/consumers/g/offsets/t/9") is None
        writes = m.commit_writes
        assert writes == 2
        assert m.commit(wait=5)
        assert m.commit_writes == writes  # unchanged: skipped
        fake.offsets[("t", 1)] = 8
        assert m.commit(wait=5)
        assert m.commit_writes == writes + 1 and zk.get("/consumers/g/offsets/t/1")[0] == b"8"
    finally:
        m.stop()
    # stop committed, released and left
    assert zk.get_children("/consumers/g/ids") == []
    assert zk.get_children("/consumers/g/owners/t") == []


@pytest.mark.timeout(60)
def test_watch_events_coalesce_into_one_rebalance(zk_client_factory):
    m, _ = make_member(zk_client_factory())
    for _ in range(20):
        m._on_watch(None)  # what kazoo would call: a burst before the thread runs
    m.start()
    try:
        until(lambda: ready(m), 20, "first rebalance")
        # the marker that the member thread handled every event queued so far: a commit round trip
        # through its queue (events are handled in order)
        assert m.commit(wait=5)
        assert m.rebalances == 1
    finally:
        m.stop()


@pytest.mark.timeout(60)
def test_zookeeper_discovery_rebalances_when_a_topic_grows(zk, zk_client_factory):
    zk.create("/brokers/topics/t", b'{"version":1,"partitions":{"0":[1],"1":[1]}}', makepath=True)
    client = zk_client_factory()
    fake = FakeSpout()
    m = GroupMember(client, ConsumerGroupPaths("/", "g"), consumer_id_string("g", "h", 1), ["t"], fake.snapshot,
                    broker_paths=BrokerPaths("/"), backoff=0.1, commit_interval=1.0)
    fake.member = m
    m.start()
    try:
        until(lambda: ready(m) and len(m.owned) == 2, 20, "two partitions")
        zk.set("/brokers/topics/t", b'{"version":1,"partitions":{"0":[1],"1":[1],"2":[1]}}')
        until(lambda: ready(m) and len(m.owned) == 3, 20, "the new partition claimed")
        assert m.assignment.retained == {("t", 0), ("t", 1)}
    finally:
        m.stop()


class _Unreachable:
    """A ZooKeeper client the member cannot use: its session is down (``connected`` False)."""

    connected = True
    client_id = None

    def add_listener(self, listener):
        pass

    def remove_listener(self, listener):
        pass

    def stop(self):
        pass

    def close(self):
        pass


@pytest.mark.timeout(60)
def test_a_member_whose_rebalance_failed_waits_quietly_while_zookeeper_is_unreachable():
    """A failed rebalance sets a retry time; if ZooKeeper is then unreachable when it comes, the
    member thread waits for the session to come back (a state event) or for its next commit — it
    does not spin on an empty queue, burning a core, until the session returns."""
    client = _Unreachable()
    member, _ = make_member(client, commit_interval=0.2, backoff=0.05)
    member._registered = True
    attempts = []

    def rebalance():  # fails (an owner node still held), and the session goes before the retry is due
        attempts.append(time.monotonic())
        client.connected = False
        return False

    member._rebalance = rebalance
    member._shutdown = lambda: None
    polls = [0]
    next_events = member._next_events

    def counted(timeout):
        polls[0] += 1
        return next_events(timeout)

    member._next_events = counted
    commits = [0]
    commit = member._commit

    def counted_commit(*args, **kwargs):
        commits[0] += 1
        return commit(*args, **kwargs)

    member._commit = counted_commit
    member._thread = threading.Thread(target=member._run, daemon=True)
    member._thread.start()
    try:
        member._events.put(("rebalance", None))
        until(lambda: attempts, 10, "the first rebalance attempt")
        before, since = polls[0], commits[0]
        # three commit rounds (0.2 s apart) while ZooKeeper is unreachable: the thread wakes about once
        # for each; a spin polls its queue hundreds of thousands of times meanwhile
        until(lambda: commits[0] >= since + 3, 10, "three commit rounds")
        during = polls[0] - before
        assert during <= 10, f"{during} polls of the event queue over 3 commit rounds while ZooKeeper was unreachable"
        assert len(attempts) == 1, "a rebalance was attempted without a session"
        member._rebalance = lambda: attempts.append(time.monotonic()) or True
        client.connected = True
        member._events.put(("state", KazooState.CONNECTED))
        until(lambda: len(attempts) == 2, 10, "the retry once the session is back")
        assert member.rebalance_failures == 1
    finally:
        member._events.put(("stop", None))
        member._thread.join(10)
    assert not member._thread.is_alive()


class _Counters(dict):
    def incr(self, name, by=1):
        self[name] = self.get(name, 0) + by

    def __missing__(self, name):
        return 0


@pytest.mark.timeout(60)
def test_closing_a_spout_while_zookeeper_is_unreachable_ends_its_group_thread():
    """The spout cannot leave the group without ZooKeeper (its nodes go with the session), but its
    member thread must end with it, not live on beside a closed client."""
    from gale.log import get_logger
    from gale.worker.connectors.kafka_spout import KafkaSpout

    client = _Unreachable()
    member, _ = make_member(client, commit_interval=0.2)
    member._thread = threading.Thread(target=member._run, daemon=True)
    member._thread.start()
    client.connected = False
    spout = KafkaSpout.__new__(KafkaSpout)
    spout._member, spout.zk_client, spout.consumer = member, client, None
    spout.log, spout.counters = get_logger("test"), _Counters()
    spout._seen = {"rebalances": 0, "rebalance_failures": 0, "commit_writes": 0, "drain_timeouts": 0}
    spout.close()
    until(lambda: not member._thread.is_alive(), 10, "the member thread still runs after close()")
