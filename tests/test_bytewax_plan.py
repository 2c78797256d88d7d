"""A Bytewax dataflow read as a topology (pure): its core steps, the components and streams they
become, the routing values each receiving task is reached by, and every refusal naming the step and
the feature."""

from __future__ import annotations

import pickle
import socket

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.inputs import DynamicSource, StatelessSourcePartition
from bytewax.testing import TestingSink, TestingSource

from gale.bytewax.plan import check_version, plan_flow
from gale.bytewax.topology import build_definition, is_flow_definition
from gale.errors import TopologyError
from gale.topology.tuple import Fields
from gale.worker.bytewax.routing import CannotSerialize, KeyOwner, pack_batch, route_values, unpack_batch
from gale.worker.runtime.grouping import FieldsGrouper
from gale.worker.state.routing import KeyGroupGrouper


def word_count(name="wc", source=None):
    flow = Dataflow(name)
    s = op.input("inp", flow, source or TestingSource(["a b"]))
    s = op.flat_map("split", s, str.split)
    s = op.key_on("key", s, lambda w: w)
    s = op.stateful_map("count", s, lambda c, _w: ((c or 0) + 1,) * 2)
    op.output("out", s, TestingSink([]))
    return flow


def test_the_core_steps_of_a_word_count_and_their_streams():
    plan = plan_flow(word_count())
    assert [(s.step_id, s.kind) for s in plan.steps] == [
        ("wc.inp", "input"), ("wc.split.flat_map_batch", "flat_map_batch"),
        ("wc.key.map.flat_map_batch", "flat_map_batch"),
        ("wc.count.stateful_flat_map.stateful.stateful_batch", "stateful_batch"), ("wc.out", "output")]
    count = plan.step("wc.count.stateful_flat_map.stateful.stateful_batch")
    assert count.ancestors == ("stateful_map", "stateful_flat_map", "stateful")
    assert plan.producer(count.inputs[0])[0].step_id == "wc.key.map.flat_map_batch"


def test_the_topology_routes_every_stream_by_its_writer_and_keeps_state_with_recovery():
    plain = build_definition(plan_flow(word_count()), "wc:flow", {"topology.workers": 3})
    assert is_flow_definition(plain)
    count = plain.components["wc.count.stateful_flat_map.stateful.stateful_batch"]
    assert (count.parallelism, count.stateful, count.class_path) == (3, False, "gale.worker.bytewax.components:Stateful")
    (inp,) = count.inputs
    assert (inp.component, inp.stream, inp.grouping.type, inp.grouping.fields) == (
        "wc.key.map.flat_map_batch", "down>wc.count.stateful_flat_map.stateful.stateful_batch", "fields", ["route"])
    assert count.kwargs["edges"] == [{"stream": "down>wc.out", "port": "down", "to": "wc.out", "route": "local",
                                      "keygroups": False}]
    assert "$checkpointspout" not in plain.components
    recovered = build_definition(plan_flow(word_count()), "wc:flow", {"topology.bytewax.recovery": True})
    count = recovered.components["wc.count.stateful_flat_map.stateful.stateful_batch"]
    assert count.stateful and count.class_path.endswith(":ManagedStateful")
    assert "$checkpointspout" in recovered.components
    assert recovered.conf["topology.state.guarantee"] == "exactly-once"  # every input can rewind
    assert recovered.components["wc.key.map.flat_map_batch"].kwargs["edges"][0]["keygroups"] is True


def test_a_loaded_file_keeps_only_its_own_configuration():
    conf = {"topology.workers": 2, "topology.secret": "x" * 64, "topology.bytewax.recovery": True}
    defn = build_definition(plan_flow(word_count()), "wc:flow", conf, keep_conf=False)
    assert defn.conf == {"topology.state.guarantee": "exactly-once"}
    assert defn.components["wc.inp"].parallelism == 2


@pytest.mark.parametrize("tasks", [1, 2, 3, 7])
@pytest.mark.parametrize("groups", [None, 128])
def test_route_values_reach_their_task_through_the_runtimes_own_groupers(tasks, groups):
    """The value of task index i is routed to task i by the grouper Gale's runtime uses for the stream
    (a fields grouping, or by key group into a stateful step), in one process and across processes."""
    task_ids = [10 + i for i in range(tasks)]
    fields = Fields(["route", "batch"], "x:s")
    if groups is None:
        groupers = [FieldsGrouper(task_ids, fields, ["route"], builtin_hash=b) for b in (True, False)]
    else:
        groupers = [KeyGroupGrouper(task_ids, fields, ["route"], groups)]
    for grouper in groupers:
        assert [grouper.choose([r, None]) for r in route_values(tasks, groups)] == [[t] for t in task_ids]


def test_a_key_goes_to_the_task_owning_its_key_group():
    owner = KeyOwner(4, 128)
    grouper = KeyGroupGrouper([1, 2, 3, 4], Fields(["route", "batch"], "x:s"), ["route"], 128)
    for key in (f"k{i}" for i in range(200)):
        assert grouper.choose([key, None]) == [owner(key) + 1]


def test_an_item_that_cannot_cross_workers_is_named_with_its_step_and_type():
    items = [("a", 1), ("b", socket.socket())]
    try:
        with pytest.raises(CannotSerialize, match=r"step 'wc.key': an item of type builtins.tuple holding a socket.socket cannot be serialized"):
            pack_batch(items, "wc.key")
    finally:
        items[1][1].close()
    assert unpack_batch(pack_batch([("a", 1)], "s")) == [("a", 1)]
    assert pickle.loads(pack_batch([1], "s")) == [1]


def test_another_bytewax_version_is_refused_naming_the_supported_one():
    with pytest.raises(TopologyError, match=r"bytewax 0.20.0 is installed, but Gale runs dataflows of bytewax 0.21.1"):
        check_version("0.20.0")
    check_version("0.21.1")


def test_a_step_id_that_cannot_name_a_component_is_refused():
    flow = Dataflow("bad")
    s = op.input("in put", flow, TestingSource([1]))
    op.output("out", s, TestingSink([]))
    with pytest.raises(TopologyError, match=r"step 'bad.in put'.*whitespace"):
        plan_flow(flow)


class Dyn(DynamicSource):
    def build(self, step_id, worker_index, worker_count):
        return _Never()


class _Never(StatelessSourcePartition):
    def next_batch(self):
        return []


def test_exactly_once_with_a_dynamic_source_is_refused_naming_the_input():
    flow = word_count("dyn", Dyn())
    recovered = build_definition(plan_flow(flow), "dyn:flow", {"topology.bytewax.recovery": True})
    assert recovered.conf.get("topology.state.guarantee") is None  # at least once: it cannot rewind
    with pytest.raises(TopologyError, match=r"spout 'dyn.inp' \(DynamicInput\) cannot rewind"):
        build_definition(plan_flow(flow), "dyn:flow", {"topology.bytewax.recovery": True,
                                                       "topology.state.guarantee": "exactly-once"})


def test_a_source_of_neither_kind_is_refused():
    from bytewax.inputs import Source

    class Odd(Source):
        pass

    flow = Dataflow("odd")
    op.output("out", op.input("inp", flow, Odd()), TestingSink([]))
    with pytest.raises(TopologyError, match=r"step 'odd.inp': source Odd is neither a FixedPartitionedSource"):
        plan_flow(flow)


def test_a_dataflow_without_an_input_or_an_output_is_refused_as_bytewax_refuses_it():
    with pytest.raises(TopologyError, match=r"dataflow 'none' must have at least one input step"):
        plan_flow(Dataflow("none"))
    flow = Dataflow("noout")
    op.input("inp", flow, TestingSource([1]))
    with pytest.raises(TopologyError, match=r"dataflow 'noout' must have at least one output step"):
        plan_flow(flow)
