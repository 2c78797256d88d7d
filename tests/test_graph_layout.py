"""The topology graph's layout (gale.nimbus.graph_layout, pure) and the view it feeds
(gale.nimbus.graph_view): layers left to right, no overlapping nodes, fewer crossings than the
name order, cycles drawn as back edges, readable at 30 components."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from gale.nimbus.graph_layout import GAP_Y, NODE_H, NODE_W, crossings, layout
from gale.nimbus.graph_view import backpressure, component_details
from gale.records import ExecutorStats

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


def thirty() -> tuple[list[str], list[tuple[str, str]]]:
    """A 30-component topology: 3 spouts feeding a fan-out of parsers, enrichers, aggregators, sinks."""
    spouts = [f"source-{i}" for i in range(3)]
    parse = [f"parse-{i}" for i in range(6)]
    enrich = [f"enrich-{i}" for i in range(8)]
    agg = [f"aggregate-{i}" for i in range(7)]
    sinks = [f"sink-{i}" for i in range(6)]
    edges = [(spouts[i % 3], p) for i, p in enumerate(parse)]
    edges += [(parse[(i * 5) % 6], e) for i, e in enumerate(enrich)] + [(parse[i % 6], enrich[(i + 3) % 8]) for i in range(6)]
    edges += [(enrich[(i * 3) % 8], a) for i, a in enumerate(agg)] + [(enrich[i], agg[(i * 2) % 7]) for i in range(8)]
    edges += [(agg[(i * 4) % 7], s) for i, s in enumerate(sinks)] + [(spouts[0], sinks[5])]
    return spouts + parse + enrich + agg + sinks, edges


def overlaps(drawing) -> list[tuple[str, str]]:
    out = []
    for (a, pa), (b, pb) in itertools.combinations(drawing.nodes.items(), 2):
        if abs(pa.x - pb.x) < NODE_W and abs(pa.y - pb.y) < NODE_H + GAP_Y / 2:
            out.append((a, b))
    return out


def test_thirty_components_are_laid_out_in_readable_layers():
    nodes, edges = thirty()
    d = layout(nodes, edges)
    assert set(d.nodes) == set(nodes) and len(nodes) == 30
    assert overlaps(d) == []
    assert d.layers == 5
    for a, b in edges:  # every subscription goes right
        assert d.nodes[b].layer > d.nodes[a].layer, (a, b)
    assert all(0 <= p.x <= d.width - NODE_W and 0 <= p.y <= d.height - NODE_H for p in d.nodes.values())
    # the tallest column holds 8 nodes: the drawing stays about 3:1, which a page scales to its width
    assert d.height < 8 * (NODE_H + GAP_Y) + 60 and d.width < 5 * (NODE_W + 100)
    # ordering cuts crossings compared with the name order
    columns = [[n for n in sorted(nodes) if d.nodes[n].layer == i] for i in range(d.layers)]
    ordered = [sorted(col, key=lambda n: d.nodes[n].order) for col in columns]
    assert crossings(ordered, edges) < crossings(columns, edges)


def test_the_same_topology_always_gets_the_same_drawing():
    nodes, edges = thirty()
    assert layout(nodes, edges) == layout(list(reversed(nodes)), list(reversed(edges)))


def test_a_cycle_is_drawn_with_a_back_edge():
    d = layout(["spout", "a", "b", "c"], [("spout", "a"), ("a", "b"), ("b", "c"), ("c", "a")])
    assert d.back_edges == {("c", "a")}
    assert [d.nodes[n].layer for n in ("spout", "a", "b", "c")] == [0, 1, 2, 3]


def test_edges_to_unknown_components_and_self_loops_are_ignored():
    d = layout(["s", "b"], [("s", "b"), ("b", "b"), ("x", "b")])
    assert (d.nodes["s"].layer, d.nodes["b"].layer, d.back_edges) == (0, 1, frozenset())


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 18).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))))
def test_any_graph_gets_a_layering_without_overlaps(case):
    n, pairs = case
    nodes = [f"c{i}" for i in range(n)]
    edges = [(nodes[a], nodes[b]) for a, b in pairs if a != b]
    d = layout(nodes, edges)
    assert overlaps(d) == []
    for a, b in set(edges):
        if (a, b) not in d.back_edges:
            assert d.nodes[b].layer > d.nodes[a].layer
    # removing the back edges leaves no cycle: the layering is a topological order of the rest
    assert all(d.nodes[a].layer >= d.nodes[b].layer for a, b in d.back_edges)


def stats(component: str, **kw) -> ExecutorStats:
    return ExecutorStats(component=component, kind=kw.pop("kind", "bolt"), **kw)


def test_details_merge_per_label_and_keep_the_ten_biggest_key_groups():
    a = stats("count", details={"state_keygroup_keys": {str(g): g for g in range(0, 24, 2)},
                                "state_keygroup_bytes": {str(g): 100 * g for g in range(0, 24, 2)}})
    b = stats("count", details={"state_keygroup_keys": {str(g): g for g in range(1, 24, 2)},
                                "state_keygroup_bytes": {str(g): 100 * g for g in range(1, 24, 2)}})
    out = component_details([a, b])
    assert [g["keyGroup"] for g in out["keyGroups"]] == list(range(23, 13, -1))
    assert out["keyGroups"][0] == {"keyGroup": 23, "keys": 23, "bytes": 2300} and out["keyGroupsReported"] == 24
    lag = component_details([stats("kafka", kind="spout", details={"kafka_lag": {"t/10": 5, "t/2": 0}}),
                             stats("kafka", kind="spout", details={"kafka_lag": {"t/1": 7}})])
    assert lag == {"kafkaLag": [{"partition": "t/1", "lag": 7}, {"partition": "t/2", "lag": 0},
                                {"partition": "t/10", "lag": 5}]}
    assert component_details([stats("plain")]) == {}


def test_backpressure_is_a_queue_over_the_receive_buffer():
    assert not backpressure([stats("b", queue_depth=1024)], 1024)
    assert backpressure([stats("b", queue_depth=10), stats("b", queue_depth=1025)], 1024)
