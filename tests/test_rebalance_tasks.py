"""Rebalance to a new task count (Gale's extension of Storm's rebalance; ``gale.nimbus.rescale``):
the pure decisions (validation, the new counts), the task layout they give, key-group ownership for
every task count, state moving by key groups between task counts, and nimbus applying it on a real
ZooKeeper (everything validated before anything is written)."""

from __future__ import annotations

import socket

import pytest

from gale.bundle import make_bundle
from gale.config import defaults
from gale.errors import TopologyError
from gale.records import StormBase, TopologyStatus
from gale.topology.builder import TopologyBuilder
from gale.topology.definition import ACKER_COMPONENT, TopologyTasks, component_parallelism
from gale.topology.keygroups import key_group, owned_groups, owner_index, owner_task
from gale.topology.tuple import Fields
from gale.nimbus import transitions as tr
from gale.nimbus.daemon import Nimbus
from gale.nimbus.rescale import plan_rescale, state_kind
from gale.worker.state.provider import MemoryStateProvider
from gale.worker.state.routing import KeyGroupGrouper
from gale.worker.state.task_state import TaskState
from gale.config_keys import Config
from tests.state_topologies import NumberedItems, NumberedSentences, PersistentTens, StatefulCount, TaskTotals
from tests.topologies import Identity
from tests.waiting import until


def stateful_topology(count_tasks: int = 2, key_groups: int | None = None):
    """sentences → split (shuffle) → count (keyed, fields on word) and totals (per-task, shuffle)."""
    b = TopologyBuilder()
    b.set_spout("sentences", NumberedSentences, 1)
    b.set_bolt("split", Identity, 2).shuffle_grouping("sentences")
    count = b.set_bolt("count", StatefulCount, count_tasks).fields_grouping("split", ["v"])
    if key_groups is not None:
        count.add_configuration("topology.state.key.groups", key_groups)
    b.set_bolt("totals", TaskTotals, 2).shuffle_grouping("split")
    b.set_spout("items", NumberedItems, 1)
    b.set_bolt("windows", PersistentTens, 1).shuffle_grouping("items")
    return b.create_topology(name="st", conf={"topology.workers": 2})


CONF = {**defaults(), "topology.workers": 2}
CONFIG = Config.resolve(CONF, allow_user_keys=False)


def plan(defn, executors=None, tasks=None, component_tasks=None, component_executors=None):
    ce = component_executors or component_parallelism(defn, CONF, 2, tasks=component_tasks)
    return plan_rescale(defn, CONFIG, ce, component_tasks or {}, executors or {}, tasks)


# ------------------------------------------------------------------------------ decisions (pure)


def test_the_definition_marks_stateful_bolts_and_their_kind_of_state():
    defn = stateful_topology().definition
    assert [c for c, d in sorted(defn.components.items()) if d.stateful] == ["count", "totals"]
    kinds = {c: state_kind(defn, CONFIG, c) for c in defn.components}
    assert kinds == {"sentences": None, "split": None, "count": "keyed", "totals": "per-task", "items": None,
                     "windows": "per-task", "$checkpointspout": None}


def test_executors_within_the_task_count_keep_storms_meaning():
    defn = stateful_topology(count_tasks=3).definition
    p = plan(defn, {"count": 1, "split": 2, "totals": 1})
    assert p.executors == {"count": 1, "split": 2, "totals": 1} and p.tasks == {}


def test_executors_above_the_task_count_grow_the_tasks():
    defn = stateful_topology(count_tasks=2).definition
    p = plan(defn, {"count": 3, "split": 5})
    assert p.executors == {"count": 3, "split": 5} and p.tasks == {"count": 3, "split": 5}
    # after one rescale, the next compares with the tasks it set
    assert plan(defn, {"count": 3}, component_tasks={"count": 3}).tasks == {}
    assert plan(defn, {"count": 4}, component_tasks={"count": 3}).tasks == {"count": 4}


def test_tasks_option_sets_the_task_count_up_or_down():
    defn = stateful_topology(count_tasks=4).definition
    down = plan(defn, tasks={"count": 1})
    assert down.tasks == {"count": 1} and down.executors == {"count": 1}
    up = plan(defn, tasks={"count": 8})
    assert up.tasks == {"count": 8} and up.executors == {"count": 4}  # the executors it has, now 2 tasks each
    both = plan(defn, {"count": 6}, tasks={"count": 8})
    assert both.tasks == {"count": 8} and both.executors == {"count": 6}
    same = plan(defn, tasks={"count": 4})
    assert same.tasks == {} and same.executors == {"count": 4}


@pytest.mark.parametrize("executors,tasks,message", [
    ({"count": 0}, None, r"executors for 'count' must be an integer >= 1, got 0"),
    ({"count": -2}, None, r"executors for 'count' must be an integer >= 1, got -2"),
    ({"count": True}, None, r"executors for 'count' must be an integer >= 1, got True"),
    ({"count": "3"}, None, r"executors for 'count' must be an integer >= 1, got '3'"),
    (None, {"count": 0}, r"the task count for 'count' must be an integer >= 1, got 0"),
    (None, {"count": -1}, r"the task count for 'count' must be an integer >= 1, got -1"),
    ({"nope": 2}, None, r"unknown component 'nope'; components: \['\$checkpointspout', 'count'"),
    ({ACKER_COMPONENT: 2}, None, r"unknown component '__acker' \(the acker's executors follow the workers\)"),
    ({"count": 5}, {"count": 4}, r"'count' would have 4 tasks; it cannot run 5 executors"),
    (None, {"count": 129}, r"component 'count' has keyed state in 128 key groups \(topology.state.key.groups\): "
                           r"it can have at most 128 tasks, not 129"),
    ({"count": 200}, None, r"at most 128 tasks, not 200"),
    ({"totals": 3}, None, r"component 'totals' has per-task state .* cannot change from 2 to 3"),
    (None, {"totals": 1}, r"component 'totals' has per-task state .* cannot change from 2 to 1"),
    (None, {"windows": 2}, r"component 'windows' has per-task state .*persistent window"),
    ({"$checkpointspout": 2}, None, r"'\$checkpointspout' \(the checkpoint spout\) runs exactly one task"),
])
def test_bad_counts_are_refused_naming_the_component_and_the_limit(executors, tasks, message):
    defn = stateful_topology().definition
    with pytest.raises(TopologyError, match=message):
        plan(defn, executors, tasks)


def test_the_key_group_limit_is_the_components_own():
    defn = stateful_topology(key_groups=4).definition
    assert plan(defn, tasks={"count": 4}).tasks == {"count": 4}
    with pytest.raises(TopologyError, match=r"keyed state in 4 key groups .* at most 4 tasks, not 5"):
        plan(defn, tasks={"count": 5})
    # stateless components have no such limit; per-task state within its task count is Storm's rebalance
    assert plan(defn, {"split": 300, "totals": 1}).tasks == {"split": 300}


# ------------------------------------------------------------------------------ the layout


def test_a_new_task_count_shifts_the_ids_of_the_components_sorted_after_it():
    defn = stateful_topology(count_tasks=2).definition
    ce = component_parallelism(defn, CONF, 2)
    before = TopologyTasks(defn, CONF, 2, ce)
    after = TopologyTasks(defn, CONF, 2, {**ce, "count": 3}, {"count": 3})
    order = sorted(before.task_counts)
    assert order[:3] == ["$checkpointspout", "__acker", "count"]
    assert before.component_tasks("count") == [4, 5] and after.component_tasks("count") == [4, 5, 6]
    assert after.task_counts == {**before.task_counts, "count": 3}
    for comp in order:
        n = after.task_counts[comp]
        first = before.component_tasks(comp)[0]
        shift = 1 if comp > "count" else 0
        assert after.component_tasks(comp) == list(range(first + shift, first + shift + n)), comp
    # every task is in exactly one executor of its component
    for layout in (before, after):
        covered = sorted(t for ex in layout.executors for t in range(ex[0], ex[1] + 1))
        assert covered == sorted(layout.task_to_component)
        for ex, comp in layout.executor_to_component.items():
            assert {layout.task_to_component[t] for t in range(ex[0], ex[1] + 1)} == {comp}
    # a StormBase carries the counts; a record without them (written before) reads as the definition's
    base = StormBase(name="st", status=TopologyStatus.ACTIVE, num_workers=2, component_executors={**ce, "count": 3},
                     component_tasks={"count": 3}, launch_time_secs=1)
    assert TopologyTasks.of(defn, CONF, base).task_to_component == after.task_to_component
    old = StormBase.decode(b'{"version": 1, "name": "st", "status": "ACTIVE", "num_workers": 2, '
                           b'"component_executors": {"count": 2}, "launch_time_secs": 1}', "/storms/st")
    assert old.component_tasks == {}


def test_tasks_down_to_fewer_than_executors_clamps_the_executors():
    defn = stateful_topology(count_tasks=4).definition
    ce = component_parallelism(defn, CONF, 2, tasks={"count": 1})
    assert ce["count"] == 1
    layout = TopologyTasks(defn, CONF, 2, {**ce, "count": 4}, {"count": 1})
    assert [ex for ex, c in layout.executor_to_component.items() if c == "count"] == [(4, 4)]


def test_rebalance_options_carry_the_task_counts_into_the_record():
    base = StormBase(name="wc", status="ACTIVE", num_workers=2, component_executors={"count": 2, "__acker": 2},
                     component_tasks={"split": 6}, launch_time_secs=1)
    r = tr.rebalance(base, 0, 100.0, None, {"count": 3}, {"count": 3})
    again = StormBase.decode(r.encode(), "/storms/wc")  # a new leader reads the pending options back
    assert again.topology_action_options.rebalance.num_tasks == {"count": 3}
    done = tr.do_rebalance(again)
    assert done.component_tasks == {"split": 6, "count": 3}
    assert done.component_executors == {"count": 3, "__acker": 2}
    assert tr.do_rebalance(tr.rebalance(done, 0, 0.0, 1, {})).component_tasks == {"split": 6, "count": 3}


# ------------------------------------------------------------------------------ key-group ownership


@pytest.mark.parametrize("groups", [1, 2, 3, 7, 16, 128])
def test_every_task_count_owns_every_key_group_exactly_once(groups):
    for n in range(1, groups + 1):
        owners = [i for i in range(n) for _ in owned_groups(i, groups, n)]
        flat = [kg for i in range(n) for kg in owned_groups(i, groups, n)]
        assert flat == list(range(groups)), (groups, n)  # each exactly once, in order
        assert all(owner_index(kg, groups, n) == owners[kg] for kg in range(groups))
        assert all(len(owned_groups(i, groups, n)) >= 1 for i in range(n))  # n <= groups: none idle


def test_the_fields_grouping_routes_each_key_to_the_task_owning_its_group_for_every_task_count():
    words = [f"w{i}" for i in range(500)]
    for n in range(1, 129):
        tasks = list(range(10, 10 + n))
        grouper = KeyGroupGrouper(tasks, Fields(["word"]), ["word"], 128)
        for w in words:
            (task,) = grouper.choose([w])
            assert key_group(w, 128) in owned_groups(tasks.index(task), 128, n), (n, w)


def test_the_fields_grouping_remembers_targets_of_str_keys_without_changing_them():
    words = [f"w{i}" for i in range(500)] + ["", "é", "\udc80"]
    tasks = list(range(10, 17))
    grouper = KeyGroupGrouper(tasks, Fields(["word"]), ["word"], 128, cache_keys=64)  # fills and starts afresh
    for _ in range(3):
        for w in words:
            assert grouper.choose([w]) == [owner_task(w, 128, tasks)], w
            assert len(grouper._cache) <= 64


# ------------------------------------------------------------------------------ state moves by key groups


def write_counts(provider, counts, tasks, txid):
    """``tasks`` tasks each count the words they own and commit checkpoint ``txid``."""
    for i in range(tasks):
        st = TaskState(provider, "wc", "count", i, tasks, 128, [["word"]])
        st.load()
        for w, c in counts.items():
            if key_group(w, 128) in st.owned:
                st.kv.put(w, st.kv.get(w, 0) + c)
        st.prepare(txid)
        st.commit(txid)


def loaded(provider, tasks):
    out = []
    for i in range(tasks):
        st = TaskState(provider, "wc", "count", i, tasks, 128, [["word"]])
        st.load()
        out.append(dict(st.kv.items()))
    return out


@pytest.mark.parametrize("before,after", [(2, 3), (3, 1), (1, 128), (128, 5), (4, 4)])
def test_keyed_state_written_by_n_tasks_is_loaded_exactly_by_m(before, after):
    provider = MemoryStateProvider()
    words = {f"w{i}": i % 7 + 1 for i in range(1000)}
    write_counts(provider, words, before, 1)
    parts = loaded(provider, after)
    for i, part in enumerate(parts):
        assert all(key_group(w, 128) in owned_groups(i, 128, after) for w in part), i
    merged = {w: c for part in parts for w, c in part.items()}
    assert sum(len(p) for p in parts) == len(merged) == len(words)
    assert merged == words
    # and counting goes on from there under the new count
    write_counts(provider, words, after, 2)
    assert {w: c for part in loaded(provider, before) for w, c in part.items()} == {w: 2 * c for w, c in words.items()}


def test_staged_keys_of_the_old_tasks_are_committed_by_the_new_ones():
    """COMMITTING(n) recorded, then the rescale: the recovery's COMMIT(n) reaches the new tasks,
    which commit what the old ones staged in their key groups' namespaces."""
    provider = MemoryStateProvider()
    words = {f"w{i}": 1 for i in range(300)}
    for i in range(2):
        st = TaskState(provider, "wc", "count", i, 2, 128, [["word"]])
        st.load()
        for w in words:
            if key_group(w, 128) in st.owned:
                st.kv.put(w, 1)
        st.prepare(7)  # staged, not committed: the old workers are gone
    for i in range(3):
        TaskState(provider, "wc", "count", i, 3, 128, [["word"]]).commit(7)
    assert {w: c for part in loaded(provider, 3) for w, c in part.items()} == words


# ------------------------------------------------------------------------------ nimbus (real ZooKeeper)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def leader(conf, tmp_path):
    c = {**conf, "nimbus.http.port": free_port(), "storm.local.dir": str(tmp_path / "nimbus"),
         "nimbus.monitor.freq.secs": 600}
    n = Nimbus(Config.resolve(c, allow_user_keys=False), host="127.0.0.1")
    n.start()
    until(n.is_leader, 15, lambda: "no leader")
    yield n
    n.stop()


def test_nimbus_refuses_before_writing_and_applies_a_new_task_count(leader):
    topo = stateful_topology(count_tasks=2)
    tid = leader.submit("st", make_bundle(None, topo.to_json(), {"topology.workers": 2}))
    before = leader.state.storm_base(tid)
    assignment = leader.state.assignment(tid)
    for executors, tasks, message in [({"count": 0}, None, "must be an integer >= 1"),
                                      (None, {"count": 129}, "at most 128 tasks, not 129"),
                                      ({"totals": 3}, None, "'totals' has per-task state")]:
        with pytest.raises(TopologyError, match=message):
            leader.rebalance("st", 0, None, executors, tasks)
        assert leader.state.storm_base(tid) == before and leader.state.assignment(tid) == assignment
    leader.rebalance("st", 0, None, {"count": 3})
    pending = leader.state.storm_base(tid)
    assert pending.status == TopologyStatus.REBALANCING
    assert pending.topology_action_options.rebalance.num_tasks == {"count": 3}
    leader.monitor_round()  # the wait (0 s) is over: apply it and re-plan from scratch
    after = leader.state.storm_base(tid)
    assert after.status == TopologyStatus.ACTIVE and after.component_tasks == {"count": 3}
    defn, config = leader.definition(tid)
    layout = TopologyTasks.of(defn, config.to_dict(), after)
    assert layout.component_tasks("count") == [4, 5, 6]
    # the assignment of the new layout (no supervisor: nothing placed), and the views see it
    from gale.nimbus.views import topology_detail
    detail = topology_detail(leader, tid)
    assert (detail["components"]["count"]["tasks"], detail["components"]["count"]["executors"]) == (3, 3)
    assert detail["tasks"] == len(layout.task_to_component)
    # down to one task with -t
    leader.rebalance("st", 0, None, None, {"count": 1})
    leader.monitor_round()
    assert leader.state.storm_base(tid).component_tasks == {"count": 1}
    assert topology_detail(leader, tid)["components"]["count"]["tasks"] == 1


# ------------------------------------------------------------------------------ the command line


@pytest.mark.parametrize("args,message", [
    (["-t", "count"], "-t expects COMPONENT=N with N a positive integer, got 'count'"),
    (["-t", "count=0"], "-t expects COMPONENT=N with N a positive integer, got 'count=0'"),
    (["-t", "count=-1"], "-t expects COMPONENT=N with N a positive integer, got 'count=-1'"),
    (["-e", "count=0"], "-e expects COMPONENT=N with N a positive integer, got 'count=0'"),
])
def test_the_cli_refuses_bad_counts_before_calling_nimbus(args, message, tmp_path):
    from click.testing import CliRunner

    from gale.nimbus.cli import main

    # no nimbus at this address: the arguments are refused before any call
    conf = tmp_path / "gale.yaml"
    conf.write_text("nimbus.seeds: ['127.0.0.1']\nnimbus.http.port: 1\n")
    result = CliRunner().invoke(main, ["rebalance", "wc", *args, "--config", str(conf)])
    assert result.exit_code == 1, result.output
    assert message in result.output
