"""Topology building and validation: errors name the component, stream and field."""

import json

import pytest

from gale import TopologyBuilder
from gale.errors import TopologyError
from gale.topology.definition import (
    TopologyDef,
    TopologyTasks,
    compute_executors,
    partition_fixed,
    round_order,
    task_to_component,
)
from tests.topologies import DirectEmitter, FanOut, Identity, ListSpout, Sink, WrongArity


def base():
    b = TopologyBuilder()
    b.set_spout("src", ListSpout, 1, args=[[1, 2]])
    return b


def test_valid_topology_serializes_and_round_trips():
    b = base()
    b.set_bolt("fan", FanOut, 2, kwargs={"n": 2}).shuffle_grouping("src")
    b.set_bolt("sink", Sink, 3, tasks=6).fields_grouping("fan", ["v"])
    topo = b.create_topology(name="t", conf={"topology.workers": 2, "my.key": 1})
    data = json.loads(topo.to_json())
    assert data["components"]["fan"]["class"] == "tests.topologies:FanOut"
    assert data["components"]["fan"]["kwargs"] == {"n": 2}
    assert data["components"]["sink"]["tasks"] == 6
    assert data["components"]["sink"]["inputs"] == [
        {"component": "fan", "stream": "default", "grouping": {"type": "fields", "fields": ["v"]}}
    ]
    assert data["components"]["src"]["streams"] == {"default": {"fields": ["v"], "direct": False}}
    again = TopologyDef.from_json(topo.to_json())
    assert again == topo.definition


@pytest.mark.parametrize(
    "build,message",
    [
        (lambda b: b.set_bolt("x", Sink).shuffle_grouping("nope"), "bolt 'x' subscribes to unknown component 'nope'"),
        (lambda b: b.set_bolt("x", Sink).shuffle_grouping("src", "other"),
         "bolt 'x' subscribes to stream 'other' of 'src', which does not declare it"),
        (lambda b: b.set_bolt("x", Sink).fields_grouping("src", ["w"]),
         "fields grouping on field 'w', which stream 'default' of 'src' does not declare; its fields are ['v']"),
        (lambda b: b.set_bolt("src", Sink), "duplicate component id 'src'"),
        (lambda b: b.set_bolt("__mine", Sink), "ids starting with '__' belong to system components"),
        (lambda b: b.set_bolt("x", Sink, 0), "component 'x': parallelism must be an integer >= 1"),
        (lambda b: b.set_bolt("x", Sink, 2, tasks=0), "component 'x': task count must be an integer >= 1"),
        (lambda b: b.set_bolt("x", Sink), "bolt 'x' has no inputs"),
        (lambda b: b.set_bolt("x", Sink).direct_grouping("src"), "which is not declared direct"),
        (lambda b: b.set_bolt("x", ListSpout), "is not a Bolt subclass"),
        (lambda b: b.set_bolt("x", "no.such.module:Bolt"), "cannot import module 'no.such.module'"),
        (lambda b: b.set_bolt("x", "tests.topologies:Missing"), "has no class 'Missing'"),
        (lambda b: b.set_bolt("x", Sink(), 1), "give a class"),
    ],
)
def test_validation_errors_name_the_problem(build, message):
    b = base()
    with pytest.raises(TopologyError) as info:
        build(b)
        b.create_topology()
    assert message in str(info.value)


def test_no_spout_and_bad_conf():
    b = TopologyBuilder()
    with pytest.raises(TopologyError, match="no spout"):
        b.create_topology()
    with pytest.raises(TopologyError, match="did you mean 'topology.workers'"):
        base().create_topology(conf={"topology.wrokers": 2})
    with pytest.raises(TopologyError, match="not JSON-serializable"):
        b = TopologyBuilder()
        b.set_spout("s", ListSpout, 1, args=[[object()]])
        b.create_topology()


def test_direct_stream_must_use_direct_grouping():
    b = base()
    b.set_bolt("d", DirectEmitter).shuffle_grouping("src")
    b.set_bolt("direct_target", Sink).shuffle_grouping("d")
    with pytest.raises(TopologyError, match="is direct and must be subscribed with direct_grouping"):
        b.create_topology()


def test_partition_fixed_and_executors_as_storm():
    assert [len(c) for c in partition_fixed(3, list(range(10)))] == [4, 3, 3]
    assert partition_fixed(2, [1]) == [[1]]
    tasks = task_to_component({"b": 2, "__acker": 1, "a": 10, "C": 1})
    # sorted component order (byte order): "C" < "__acker" < "a" < "b"; task ids from 1
    assert tasks == {1: "C", 2: "__acker", **{i: "a" for i in range(3, 13)}, 13: "b", 14: "b"}
    ex = compute_executors(tasks, {"a": 3, "b": 2, "C": 1, "__acker": 1})
    assert ex["a"] == [(3, 6), (7, 9), (10, 12)]
    assert ex["b"] == [(13, 13), (14, 14)]


def test_layout_adds_ackers_one_per_worker_by_default():
    b = base()
    b.set_bolt("x", Identity, 3, tasks=7).shuffle_grouping("src")
    topo = b.create_topology(conf={"topology.workers": 2})
    layout = TopologyTasks(topo.definition, {"topology.workers": 2}, 2)
    assert layout.parallelism == {"src": 1, "x": 3, "__acker": 2}
    assert len(layout.component_tasks("__acker")) == 2
    assert len(layout.component_executors["x"]) == 3
    assert len(layout.component_tasks("x")) == 7
    none = TopologyTasks(topo.definition, {"topology.acker.executors": 0}, 2)
    assert none.component_tasks("__acker") == []


def test_wrong_arity_detected_at_emit(tmp_path):
    from gale import complete_topology

    b = base()
    b.set_bolt("w", WrongArity).shuffle_grouping("src")
    res = complete_topology(b.create_topology(), {"src": [[1]]})
    assert res.failed == [0]
    assert "component 'w' emitted 1 values on stream 'default', which declares 2 fields ['a', 'b']" in res.errors["w"][0]


def test_round_order_runs_spouts_first_then_each_bolt_after_what_it_subscribes_to():
    b = TopologyBuilder()
    b.set_spout("z_src", ListSpout, 1)
    b.set_spout("a_src", ListSpout, 1)
    b.set_bolt("b", Identity, 1).shuffle_grouping("a_src")
    b.set_bolt("a", Identity, 1).shuffle_grouping("b")  # sorts before "b", runs after it
    b.set_bolt("c", Sink, 1).shuffle_grouping("a").shuffle_grouping("z_src")
    b.set_bolt("y", Identity, 1).shuffle_grouping("a_src").shuffle_grouping("x")  # a cycle: x <-> y
    b.set_bolt("x", Identity, 1).shuffle_grouping("y")
    order = round_order(b.create_topology().definition)
    assert sorted(order.values()) == list(range(7))
    ranked = sorted(order, key=order.get)
    assert ranked[:2] == ["a_src", "z_src"]
    assert ranked.index("b") < ranked.index("a") < ranked.index("c")
    assert set(ranked[-2:]) == {"x", "y"}  # the cycle after everything that does not depend on it
    assert "__acker" not in order  # components the definition does not hold go last (the runtime's)


@pytest.mark.parametrize("source,expected", [
    ("import sys\nsys.exit(0)\n", r"exits\.py:2: the file called sys.exit\(0\) while it was imported"),
    ("import sys\n\nsys.exit(3)\n", r"exits\.py:3: the file called sys.exit\(3\)"),
    ("raise SystemExit('usage: ...')\n", r"called sys.exit\('usage: \.\.\.'\)"),
    ("def topology(conf):\n    raise SystemExit(2)\n", r"topology\(\) called sys.exit\(2\); nothing to submit"),
])
def test_a_topology_file_that_exits_while_loaded_is_refused_by_name_not_submitted_silently(tmp_path, source, expected):
    from gale.topology.loader import load_topology_file

    path = tmp_path / "exits.py"
    path.write_text(source)
    with pytest.raises(TopologyError, match=expected):
        load_topology_file(path)
