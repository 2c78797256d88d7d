"""Where the topology graph's nodes go: a layered drawing, left to right (pure; no I/O).

Components are nodes and subscriptions edges (source → subscriber). :func:`layout`:

1. breaks cycles (a bolt may subscribe to a stream of one downstream of it): an edge that closes a
   cycle in a depth-first walk from the sources, in name order, is drawn backwards and ignored for
   layering;
2. puts each node in a layer: the longest path from a node without inputs (spouts), so every
   forward edge goes at least one layer right;
3. orders each layer to cut edge crossings: a few sweeps of the barycenter heuristic (a node's
   position is the mean of its neighbours' in the layer before, then after), ties broken by name so
   the same topology always gets the same drawing;
4. gives coordinates: layers are columns ``NODE_W + GAP_X`` apart, nodes within a column
   ``NODE_H + GAP_Y`` apart, each column centred on the tallest.

At 30 components in six layers the drawing is about 1,300 × 500 units; the page scales it to its
width and the browser keeps text readable (the SVG's ``viewBox``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

NODE_W = 180
NODE_H = 58
GAP_X = 90
GAP_Y = 22
MARGIN = 16
SWEEPS = 6


@dataclass(frozen=True)
class Placed:
    x: int
    y: int
    layer: int
    order: int


@dataclass(frozen=True)
class Drawing:
    nodes: dict[str, Placed]
    #: edges drawn right to left (they close a cycle)
    back_edges: frozenset[tuple[str, str]]
    width: int
    height: int
    layers: int


def _back_edges(nodes: list[str], succ: Mapping[str, list[str]]) -> set[tuple[str, str]]:
    """Edges that close a cycle in a depth-first walk (iterative: topologies can be deep)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    back: set[tuple[str, str]] = set()
    preds = {n: 0 for n in nodes}
    for n in nodes:
        for m in succ[n]:
            preds[m] += 1
    roots = [n for n in nodes if preds[n] == 0] + nodes  # sources first, then whatever a cycle hides
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(succ[root]))]
        while stack:
            node, children = stack[-1]
            for child in children:
                if state.get(child) == 1:
                    back.add((node, child))
                elif child not in state:
                    state[child] = 1
                    stack.append((child, iter(succ[child])))
                    break
            else:
                state[node] = 2
                stack.pop()
    return back


def _layers(nodes: list[str], succ: Mapping[str, list[str]], back: set[tuple[str, str]]) -> dict[str, int]:
    """Longest path from a source over the forward edges (Kahn's order)."""
    indeg = {n: 0 for n in nodes}
    for n in nodes:
        for m in succ[n]:
            if (n, m) not in back:
                indeg[m] += 1
    layer = {n: 0 for n in nodes}
    ready = sorted(n for n in nodes if indeg[n] == 0)
    while ready:
        n = ready.pop(0)
        for m in succ[n]:
            if (n, m) in back:
                continue
            layer[m] = max(layer[m], layer[n] + 1)
            indeg[m] -= 1
            if indeg[m] == 0:
                ready.append(m)
        ready.sort()
    return layer


def crossings(columns: list[list[str]], edges: Iterable[tuple[str, str]]) -> int:
    """How many pairs of edges between adjacent columns cross (for tests and the ordering)."""
    where = {n: (i, j) for i, col in enumerate(columns) for j, n in enumerate(col)}
    spans = []
    for a, b in edges:
        (la, pa), (lb, pb) = where[a], where[b]
        if la > lb:
            (la, pa), (lb, pb) = (lb, pb), (la, pa)
        if lb == la + 1:
            spans.append((la, pa, pb))
    count = 0
    for i, (l1, a1, b1) in enumerate(spans):
        for l2, a2, b2 in spans[i + 1:]:
            if l1 == l2 and (a1 - a2) * (b1 - b2) < 0:
                count += 1
    return count


def _order(columns: list[list[str]], succ: Mapping[str, list[str]], pred: Mapping[str, list[str]],
           edges: list[tuple[str, str]]) -> list[list[str]]:
    best = [list(c) for c in columns]
    best_cross = crossings(best, edges)
    cols = [list(c) for c in columns]
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        rng = range(1, len(cols)) if down else range(len(cols) - 2, -1, -1)
        for i in rng:
            ref = cols[i - 1] if down else cols[i + 1]
            pos = {n: j for j, n in enumerate(ref)}
            neighbours = pred if down else succ
            current = {n: j for j, n in enumerate(cols[i])}

            def key(n: str) -> tuple[float, str]:
                near = [pos[m] for m in neighbours[n] if m in pos]
                return (sum(near) / len(near) if near else float(current[n]), n)

            cols[i] = sorted(cols[i], key=key)
        cross = crossings(cols, edges)
        if cross < best_cross:
            best, best_cross = [list(c) for c in cols], cross
    return best


def layout(nodes: Iterable[str], edges: Iterable[tuple[str, str]]) -> Drawing:
    """Coordinates (top-left corners) of ``nodes`` for a left-to-right drawing of ``edges``."""
    names = sorted(set(nodes))
    edge_list = sorted({(a, b) for a, b in edges if a in names and b in names and a != b})
    succ: dict[str, list[str]] = {n: [] for n in names}
    pred: dict[str, list[str]] = {n: [] for n in names}
    for a, b in edge_list:
        succ[a].append(b)
        pred[b].append(a)
    back = _back_edges(names, succ)
    layer = _layers(names, succ, back)
    n_layers = max(layer.values(), default=-1) + 1
    columns: list[list[str]] = [[] for _ in range(n_layers)]
    for n in names:
        columns[layer[n]].append(n)
    columns = _order(columns, succ, pred, edge_list)
    tallest = max((len(c) for c in columns), default=0)
    height = 2 * MARGIN + tallest * NODE_H + max(0, tallest - 1) * GAP_Y
    width = 2 * MARGIN + n_layers * NODE_W + max(0, n_layers - 1) * GAP_X
    placed = {}
    for i, col in enumerate(columns):
        col_h = len(col) * NODE_H + max(0, len(col) - 1) * GAP_Y
        top = MARGIN + (height - 2 * MARGIN - col_h) // 2
        for j, n in enumerate(col):
            placed[n] = Placed(x=MARGIN + i * (NODE_W + GAP_X), y=top + j * (NODE_H + GAP_Y), layer=i, order=j)
    return Drawing(nodes=placed, back_edges=frozenset(back), width=width, height=height, layers=n_layers)
