"""Load-aware shuffle (Storm 2's default shuffle grouping): pure logic, then the runtime's wiring.

Tasks 1-3 are in this worker, 4-5 in another worker on this host, 6 on another host.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gale import config as gconfig
from gale.errors import ConfigError
from gale.topology.definition import GroupingDef, TopologyTasks
from gale.topology.tuple import Fields
from gale.worker.runtime.grouping import (
    EVERYTHING, HOST_LOCAL, MAX_SPILL, MAX_WEIGHT, WORKER_LOCAL, LoadAwareShuffleGrouper,
    ShuffleGrouper, make_grouper,
)

F = Fields(["word", "n"])
TASKS = [1, 2, 3, 4, 5, 6]
LOCAL = frozenset({1, 2, 3})
WHERE = {1: WORKER_LOCAL, 2: WORKER_LOCAL, 3: WORKER_LOCAL, 4: HOST_LOCAL, 5: HOST_LOCAL, 6: EVERYTHING}


def grouper(**kw) -> LoadAwareShuffleGrouper:
    return LoadAwareShuffleGrouper(TASKS, LOCAL, rng=random.Random(7), **kw)


def picks(g, n: int) -> Counter:
    out = Counter()
    for _ in range(n):
        (task,) = g.choose(["x", 0])
        out[task] += 1
    return out


def refresh(g, loads: dict[int, float], where=WHERE):
    g.refresh(lambda t: loads.get(t, 0.0), where.__getitem__)


def test_at_no_load_every_tuple_stays_in_the_worker_and_the_local_tasks_share_evenly():
    g = grouper()
    assert g.scope == WORKER_LOCAL
    assert picks(g, 3 * MAX_WEIGHT * 100) == {1: 1000, 2: 1000, 3: 1000}
    refresh(g, {})
    assert g.scope == WORKER_LOCAL
    assert picks(g, 3000) == {1: 1000, 2: 1000, 3: 1000}


def test_loaded_local_tasks_widen_the_scope_one_step_at_a_time_and_light_ones_narrow_it():
    g = grouper()
    refresh(g, {1: 0.9, 2: 0.9, 3: 0.9})  # local average 0.9 >= 0.8; with the host's 4-5 idle: 0.54
    assert g.scope == HOST_LOCAL
    # one cycle of choices: loaded tasks get one share, idle ones MAX_WEIGHT
    assert picks(g, 3 + 2 * MAX_WEIGHT) == {1: 1, 2: 1, 3: 1, 4: MAX_WEIGHT, 5: MAX_WEIGHT}
    refresh(g, {1: 0.9, 2: 0.9, 3: 0.9, 4: 1.0, 5: 1.0})  # the host's average 0.94: everything
    assert g.scope == EVERYTHING
    assert set(picks(g, 1000)) == set(TASKS)
    refresh(g, {1: 0.5, 2: 0.5, 3: 0.5})  # host average 0.3: not below 0.2, stays wide (hysteresis)
    assert g.scope == EVERYTHING
    refresh(g, {1: 0.3, 2: 0.3, 3: 0.3})  # host average 0.18 < 0.2 → host; local 0.3 is not < 0.2
    assert g.scope == HOST_LOCAL
    refresh(g, {1: 0.1, 2: 0.1, 3: 0.1})
    assert g.scope == WORKER_LOCAL
    assert set(picks(g, 1000)) == {1, 2, 3}
    refresh(g, {1: 0.5, 2: 0.5, 3: 0.5})  # between the bounds: the scope holds
    assert g.scope == WORKER_LOCAL


def test_the_bounds_come_from_the_caller():
    g = grouper(higher=0.5, lower=0.1)
    refresh(g, {1: 0.5, 2: 0.5, 3: 0.5})
    assert g.scope == HOST_LOCAL


def test_no_local_task_starts_everywhere_and_can_narrow_to_the_host():
    g = LoadAwareShuffleGrouper([4, 5, 6], frozenset(), rng=random.Random(1))
    assert g.scope == EVERYTHING and set(picks(g, 300)) == {4, 5, 6}
    refresh(g, {})
    assert g.scope == HOST_LOCAL and set(picks(g, 300)) == {4, 5}


def test_tasks_that_moved_are_relocated_on_refresh():
    g = grouper()
    moved = {**WHERE, 1: EVERYTHING, 2: EVERYTHING, 3: EVERYTHING}  # e.g. a rebalance moved them away
    refresh(g, {}, moved)
    assert g.scope == HOST_LOCAL and set(picks(g, 300)) == {4, 5}


@settings(max_examples=200, deadline=None)
@given(
    where=st.lists(st.sampled_from([WORKER_LOCAL, HOST_LOCAL, EVERYTHING]), min_size=1, max_size=8),
    loads=st.lists(st.lists(st.floats(0.0, 1.5, allow_nan=False), min_size=8, max_size=8), min_size=1, max_size=5),
)
def test_choices_always_come_from_the_current_scope_and_cover_it(where, loads):
    tasks = list(range(10, 10 + len(where)))
    located = dict(zip(tasks, where))
    g = LoadAwareShuffleGrouper(tasks, frozenset(t for t in tasks if located[t] == WORKER_LOCAL),
                                rng=random.Random(0))
    for round_loads in loads:
        load = dict(zip(tasks, round_loads))
        g.refresh(load.__getitem__, located.__getitem__)
        assert g.scope in set(where)
        in_scope = {t for t in tasks if located[t] <= g.scope}
        cycle = sum(max(1, round(MAX_WEIGHT * (1 - min(load[t], 1.0)))) for t in in_scope)
        assert set(picks(g, cycle)) == in_scope  # one cycle reaches every task in scope, and no other
        nearer = [s for s in set(where) if s < g.scope]
        if nearer:  # wider than the nearest scope only while the next nearer one is loaded
            near = [t for t in tasks if located[t] <= max(nearer)]
            assert sum(min(load[t], 1.0) for t in near) / len(near) >= 0.2


# ---------------------------------------------------------------------- spilling by CPU

TWO = {1: WORKER_LOCAL, 2: WORKER_LOCAL, 3: HOST_LOCAL, 4: HOST_LOCAL}  # this worker: 1-2; a peer: 3-4


def cpu_refresh(g, own: float | None, peer: float | None, loads=None):
    """A refresh where this worker's process is at ``own`` of a core and the peer's at ``peer``."""
    g.refresh(lambda t: (loads or {}).get(t, 0.0), TWO.__getitem__,
              lambda t: own if TWO[t] == WORKER_LOCAL else peer)


def two_workers() -> LoadAwareShuffleGrouper:
    return LoadAwareShuffleGrouper([1, 2, 3, 4], frozenset({1, 2}), rng=random.Random(3))


def far_share(g, n: int = 2000) -> float:
    got = picks(g, n)
    return (got[3] + got[4]) / n


def test_a_hot_worker_with_short_queues_spills_to_a_cool_peer_until_they_balance():
    g = two_workers()
    cpu_refresh(g, 0.95, 0.30)  # the spout's worker at a full core, its queues short; the peer idles
    assert g.spill == 0.0  # one hot second is not enough (a worker starting up is hot for a second)
    cpu_refresh(g, 0.95, 0.30)
    assert g.scope == WORKER_LOCAL  # queue loads alone would keep every tuple here
    assert g.spill == pytest.approx(0.5 * 0.65)
    assert far_share(g) == pytest.approx(g.spill, abs=0.02)
    cpu_refresh(g, 0.92, 0.55)  # still hotter than the peer: more
    assert g.spill == pytest.approx(0.325 + 0.5 * 0.37)
    spill = g.spill
    cpu_refresh(g, 0.88, 0.84)  # balanced within the dead band: held
    assert g.spill == spill and far_share(g) == pytest.approx(spill, abs=0.02)
    cpu_refresh(g, 0.70, 0.95)  # the peer is now the hotter one: back
    assert g.spill == pytest.approx(spill - 0.5 * 0.25)
    got = picks(g, 1000)
    assert set(got) == {1, 2, 3, 4}  # spilled choices reach every far task, kept ones every near one


def test_equally_hot_workers_keep_their_tuples_local():
    """Two workers each with a spout task, both at a full core: crossing would only add work."""
    g = two_workers()
    for own, peer in ((0.97, 0.95), (0.95, 1.0), (1.0, 0.93), (0.96, 0.96)):
        cpu_refresh(g, own, peer)
        assert g.spill == 0.0 and set(picks(g, 500)) == {1, 2}


def test_the_spill_ends_once_the_worker_has_cpu_to_spare_or_its_peer_stops_reporting():
    g = two_workers()
    for _ in range(6):
        cpu_refresh(g, 1.0, 0.2)
    assert g.spill == MAX_SPILL == 1.0  # everything the far workers will take...
    assert 0.0 < 1 - far_share(g) < 0.05  # ...but each near task keeps its one slot of the list
    assert {1, 2} <= set(picks(g, 500))
    cpu_refresh(g, 0.6, 0.5)  # neither hot nor cool: held
    assert g.spill == MAX_SPILL
    cpu_refresh(g, 0.3, 0.25)  # the input slowed: locality is free again
    assert g.spill == 0.0 and set(picks(g, 500)) == {1, 2}
    for _ in range(3):
        cpu_refresh(g, 1.0, 0.2)
    assert g.spill > 0
    cpu_refresh(g, 0.95, None)  # the peer's reports stopped (or never came): as Storm, by queues only
    assert g.spill == 0.0 and set(picks(g, 500)) == {1, 2}
    cpu_refresh(g, 1.0, 0.2)
    cpu_refresh(g, 1.0, 0.2)
    assert g.spill > 0
    g.refresh(lambda t: 0.0, TWO.__getitem__)  # no CPU readings at all
    assert g.spill == 0.0


def test_hot_seconds_apart_do_not_spill():
    g = two_workers()
    for own in (1.0, 0.7, 1.0, 0.75, 0.95, 0.6, 1.0):
        cpu_refresh(g, own, 0.2)
        assert g.spill == 0.0


def test_spilled_choices_follow_the_far_tasks_queue_loads():
    g = two_workers()
    for _ in range(6):
        cpu_refresh(g, 1.0, 0.2, loads={3: 0.9})  # task 3's queue nearly full: task 4 takes most
    got = picks(g, 2000)
    assert got[4] > 5 * got[3] > 0


@settings(max_examples=200, deadline=None)
@given(readings=st.lists(st.tuples(st.floats(0, 1), st.one_of(st.none(), st.floats(0, 1))), min_size=1, max_size=12))
def test_the_spill_stays_in_bounds_and_only_grows_for_a_hot_worker_hotter_than_its_peer(readings):
    g = two_workers()
    was_hot = False
    for own, peer in readings:
        before = g.spill
        cpu_refresh(g, own, peer)
        assert 0.0 <= g.spill <= MAX_SPILL
        if g.spill > before:
            assert own >= 0.8 and peer is not None and own - peer > 0.1 and was_hot
        was_hot = peer is not None and own >= 0.8 and own - peer > 0.1
        cycle = picks(g, 200)
        assert set(cycle) <= {1, 2, 3, 4} and (g.spill > 0 or set(cycle) == {1, 2})


def test_make_grouper_uses_it_only_for_shuffles_reaching_other_workers():
    locality = (0.8, 0.2)
    shuffle = GroupingDef(type="shuffle")
    assert isinstance(make_grouper(shuffle, TASKS, F, LOCAL, locality=locality), LoadAwareShuffleGrouper)
    # (a load-aware shuffle is a ShuffleGrouper too: the plain one is asked for by exact type)
    assert type(make_grouper(shuffle, [1, 2], F, LOCAL, locality=locality)) is ShuffleGrouper  # all here
    assert type(make_grouper(shuffle, TASKS, F, LOCAL, locality=None)) is ShuffleGrouper  # disabled
    assert type(make_grouper(GroupingDef(type="none"), TASKS, F, LOCAL, locality=locality)) is ShuffleGrouper


def test_the_bounds_are_checked_as_values_and_against_each_other():
    gconfig.validate({"topology.localityaware.higher.bound": 0.9, "topology.disable.loadaware.messaging": True},
                     allow_user_keys=True)
    with pytest.raises(ConfigError, match="topology.localityaware.higher.bound.*from 0.0 to 1.0"):
        gconfig.validate({"topology.localityaware.higher.bound": 1.5}, allow_user_keys=True)
    with pytest.raises(ConfigError, match="lower.bound \\(0.5\\) must be below topology.localityaware.higher.bound"):
        gconfig.check_bounds({"topology.localityaware.lower.bound": 0.5, "topology.localityaware.higher.bound": 0.5})
    gconfig.check_bounds({})


# ---------------------------------------------------------------------- the runtime's wiring


class Remote:
    """Another worker on this host runs every task not given to the runtime; its outbox is half full."""

    def __init__(self):
        self.sent = []

    def send_tuple(self, task, tup):
        self.sent.append(task)

    def send_acker(self, *a):
        pass

    def send_result(self, *a):
        pass

    def congested(self):
        return False

    def load_of(self, task):
        return 0.5

    def locate(self, task):
        return HOST_LOCAL

    cpu = {"own": None, "peer": None}

    def own_busy(self):
        return self.cpu["own"]

    def busy_of(self, task):
        return self.cpu["peer"]


def scopes(rt) -> dict[str, float]:
    """The worker's ``gale_worker_shuffle_scope`` gauge, by scope."""
    from types import SimpleNamespace

    from gale.worker.metrics import WorkerMetrics

    worker = SimpleNamespace(runtime=rt, transfer=None, topology_id="t", supervisor_id="s", port=1, worker_id="w",
                             started=0.0, conf={})
    return {s.labels["scope"]: s.value for fam in WorkerMetrics(worker).registry.collect()
            if fam.name == "gale_worker_shuffle_scope" for s in fam.samples}


def test_a_worker_runtime_keeps_shuffled_tuples_local_until_its_queues_fill():
    from gale import TopologyBuilder
    from gale.worker.local import local_conf
    from gale.worker.runtime.runtime import WorkerRuntime
    from tests.topologies import ListSpout, Sink

    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[[]])
    b.set_bolt("sink", Sink, 4).shuffle_grouping("src")
    topo = b.create_topology()
    conf = local_conf(topo, {"topology.workers": 2, "topology.acker.executors": 0,
                             "topology.executor.receive.buffer.size": 100})
    layout = TopologyTasks(topo.definition, conf, 1)
    sink_execs = layout.component_executors["sink"]
    mine = layout.component_executors["src"] + sink_execs[:2]
    rt = WorkerRuntime(topo, topology_id="t", conf=conf, layout=layout, executors=mine, remote=Remote())
    routes = rt.routes_for("src")
    (g,) = rt.load_aware
    local_sinks = {t for ex in sink_execs[:2] for t in range(ex[0], ex[1] + 1)}
    assert set(picks(g, 500)) == local_sinks and routes["default"].single is g
    for task in local_sinks:  # the local sinks' queues 90% full
        rt.queue_of(task).extend([None] * 90)
    assert {rt.task_load(t) for t in local_sinks} == {0.9}
    assert scopes(rt) == {"worker-local": 1, "host-local": 0, "everything": 0}
    rt.refresh_loads(0.0)
    assert g.scope == HOST_LOCAL and set(picks(g, 500)) > local_sinks
    assert scopes(rt) == {"worker-local": 0, "host-local": 1, "everything": 0}
    for task in local_sinks:
        rt.queue_of(task).clear()
    rt.refresh_loads(1.0)
    assert g.scope == WORKER_LOCAL
    assert g.spill == 0.0
    rt.remote.cpu = {"own": 1.0, "peer": 0.3}  # this worker at a core, its peer idle: spill
    rt.refresh_loads(2.0)
    rt.refresh_loads(3.0)
    assert g.scope == WORKER_LOCAL and g.spill > 0.3 and set(picks(g, 500)) > local_sinks
    off = WorkerRuntime(topo, topology_id="t", conf={**conf, "topology.disable.loadaware.messaging": True},
                        layout=layout, executors=mine, remote=Remote())
    off.routes_for("src")
    assert off.load_aware == []


def test_the_transfer_places_and_loads_other_workers_tasks():
    from gale.worker.transfer import Transfer

    t = Transfer(bind_host="0.0.0.0", port=1, secret=b"k" * 32, deliver=lambda *_: True,
                 fields_for=lambda c, s: None, high_water=100)
    t.set_routes({7: "node-a:6700", 8: "node-b:6700"}, host="node-a")
    assert (t.locate(7), t.locate(8), t.locate(99)) == (HOST_LOCAL, EVERYTHING, EVERYTHING)
    assert (t.load_of(7), t.load_of(99)) == (0.0, 1.0)  # nowhere to send: as good as full
    for root in range(25):
        t.send_acker(7, (1, root, 1, 3))
    assert t.load_of(7) == 0.25 and t.load_of(8) == 0.0
    for root in range(200):
        t.send_acker(8, (1, root, 1, 3))
    assert t.load_of(8) == 1.0
