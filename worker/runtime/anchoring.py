"""Storm's anchoring arithmetic, once, as pure functions — the reference for the collectors.

Reliability rests on one invariant (``docs/storm-model.md`` §6): for every tracked
spout tuple (a *root*), the acker XORs together every edge id it is told about, and each edge id is
told exactly twice — once when the tuple carrying it is created, once when that tuple is acked — so
the value reaches 0 exactly when every tuple of the tree has been acked. The pieces:

* **spout emit** with a message id: a random root id (never 0 or 1, which the acker table reserves;
  optionally *steered* so ``root % n`` picks an acker in the spout's own worker); one fresh edge id
  per outgoing copy, the copy's message id ``{root: edge}``; the acker is told
  ``(INIT, root, XOR of the edges, spout task)``.
* **bolt emit** anchored to input tuples (its *anchors*, the parent tuples): per outgoing copy, one
  fresh edge id per tracked anchor, XORed into that anchor's ``ack_val`` and, for every root of the
  anchor, into the copy's message id (two anchors sharing a root give that root the XOR of both
  edges). Untracked anchors (no message id) contribute nothing; no tracked anchor → untracked copy.
* **bolt ack**: for every root of the input, ``(ACK, root, edge XOR input.ack_val, 0)`` — "remove my
  own id, add my children's".
* **bolt fail**: ``(FAIL, root, 0, 0)`` for every root; **reset timeout**: ``(RESET, root, 0, 0)``.
* **ack buffer**: the acks the bolt executors of one executor thread make in one round are folded
  per root (:func:`combine_ack`) and sent after the round as one ``ACK`` per root (:func:`buffered_messages`);
  a fail or reset of a tree first sends that tree's buffered value, so the acker sees the same
  order. The acker reaches the same values, so the same completions, failures and timeouts.

The functions below take the random ids as arguments, so they are deterministic; callers draw them
with :func:`new_root_id` / :func:`new_edge_id` from a ``getrandbits``-like function. The collectors
(:mod:`gale.worker.runtime.collector`) inline this arithmetic on the hot path for speed; they draw
their random numbers from an injectable source in the same order as :class:`AnchoringModel`, and
``tests/test_anchoring_model.py`` drives both with the same random numbers through random tuple
trees and asserts identical message ids, ``ack_val`` s and acker messages — and checks this module
against the reference acker (the spout is acked iff every tuple of its tree was acked).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from gale.worker.runtime.acker import ACK, FAIL, INIT, RESET

#: a tuple's message id: root id → the tuple's edge id in that root's tree
MessageId = dict[int, int]
#: ``random.Random().getrandbits``-like: ``rand(64)`` is a uniform 64-bit integer
Rand = Callable[[int], int]
AckerMessage = tuple[int, int, int, int]


# ---------------------------------------------------------------------------------- random ids


def new_root_id(rand: Rand) -> int:
    """A random root id; never 0 or 1 (reserved by the acker table)."""
    return rand(64) | 2


def steer_root(root: int, n_ackers: int, acker_index: int) -> int:
    """``root`` moved so that ``root % n_ackers == acker_index`` (an acker in the spout's worker),
    still never 0 or 1."""
    root = root - root % n_ackers + acker_index
    if root < 2:
        root += n_ackers
    return root


def new_edge_id(rand: Rand) -> int:
    """A random edge id; never 0 (0 would be invisible to the XOR)."""
    return rand(64) or 1


# ---------------------------------------------------------------------------------- the arithmetic


def xor_all(values: Iterable[int]) -> int:
    out = 0
    for v in values:
        out ^= v
    return out


def spout_emit(root: int, edges: Sequence[int]) -> tuple[list[MessageId], int]:
    """A tracked spout emit to ``len(edges)`` targets: each copy's message id, and the value of the
    acker's INIT message (the XOR of the edges)."""
    return [{root: edge} for edge in edges], xor_all(edges)


def init_message(root: int, init_val: int, spout_task: int) -> AckerMessage:
    return (INIT, root, init_val, spout_task)


def tracked(anchors: Iterable[MessageId | None]) -> list[MessageId]:
    """The message ids of the anchors that belong to some tuple tree (the others are ignored)."""
    return [a for a in anchors if a]


def bolt_emit(anchor_ids: Sequence[MessageId], edges: Sequence[int]) -> MessageId | None:
    """The message id of one outgoing copy anchored to tuples with message ids ``anchor_ids``
    (tracked ones only, see :func:`tracked`), with one fresh edge per anchor (``None`` without
    anchors). Each anchor's ``ack_val`` takes its edge too: :func:`add_child`."""
    if len(edges) != len(anchor_ids):
        raise ValueError(f"{len(anchor_ids)} anchors need as many edges, got {len(edges)}")
    if not anchor_ids:
        return None
    ids: MessageId = {}
    for anchor, edge in zip(anchor_ids, edges):
        for root in anchor:
            ids[root] = ids.get(root, 0) ^ edge
    return ids


def add_child(ack_val: int, edge: int) -> int:
    """An anchor's ``ack_val`` after a child with edge ``edge`` was anchored to it."""
    return ack_val ^ edge


def ack_messages(message_id: MessageId | None, ack_val: int) -> list[AckerMessage]:
    """What acking a tuple tells the acker: per root, the tuple's edge XOR its ``ack_val``."""
    return [(ACK, root, edge ^ ack_val, 0) for root, edge in (message_id or {}).items()]


def combine_ack(buffer: dict[int, int], message_id: MessageId | None, ack_val: int) -> None:
    """Fold an ack into an ack buffer (root → XOR of the ack values not sent yet). XOR being
    associative and commutative, sending :func:`buffered_messages` later tells the acker what the
    :func:`ack_messages` of every folded ack would have, in one message per root."""
    for root, edge in (message_id or {}).items():
        buffer[root] = buffer.get(root, 0) ^ edge ^ ack_val


def buffered_messages(buffer: dict[int, int]) -> list[AckerMessage]:
    """The acker messages of an ack buffer: one ``(ACK, root, value, 0)`` per root."""
    return [(ACK, root, val, 0) for root, val in buffer.items()]


def fail_messages(message_id: MessageId | None) -> list[AckerMessage]:
    return [(FAIL, root, 0, 0) for root in (message_id or {})]


def reset_messages(message_id: MessageId | None) -> list[AckerMessage]:
    return [(RESET, root, 0, 0) for root in (message_id or {})]


# ---------------------------------------------------------------------------------- a whole tree


class ModelTuple:
    """A tuple as the model sees it: its message id and the XOR of its children's edges."""

    __slots__ = ("message_id", "ack_val", "done")

    def __init__(self, message_id: MessageId | None):
        self.message_id = message_id
        self.ack_val = 0
        self.done = False  # acked or failed: a second ack or fail is ignored


class AnchoringModel:
    """The collectors' behaviour built from the functions above, drawing random ids from ``rand``
    in the collectors' order (root, then per target: one edge per tracked anchor). Every acker
    message goes to :attr:`messages`. ``steer`` is ``(n_ackers, acker_index)`` or ``None``."""

    def __init__(self, rand: Rand, steer: tuple[int, int] | None = None):
        self.rand = rand
        self.steer = steer
        self.messages: list[AckerMessage] = []

    def spout_emit(self, n_targets: int, spout_task: int) -> tuple[int, list[ModelTuple]]:
        root = new_root_id(self.rand)
        if self.steer is not None:
            root = steer_root(root, *self.steer)
        edges = [new_edge_id(self.rand) for _ in range(n_targets)]
        ids, init_val = spout_emit(root, edges)
        self.messages.append(init_message(root, init_val, spout_task))
        return root, [ModelTuple(i) for i in ids]

    def bolt_emit(self, anchors: Sequence[ModelTuple], n_targets: int) -> list[ModelTuple]:
        live = [a for a in anchors if a.message_id]
        out = []
        for _ in range(n_targets):
            edges = [new_edge_id(self.rand) for _ in live]
            for a, edge in zip(live, edges):
                a.ack_val = add_child(a.ack_val, edge)
            out.append(ModelTuple(bolt_emit([a.message_id for a in live], edges)))
        return out

    def ack(self, tup: ModelTuple) -> None:
        if not tup.done:
            tup.done = True
            self.messages.extend(ack_messages(tup.message_id, tup.ack_val))

    def fail(self, tup: ModelTuple) -> None:
        if not tup.done:
            tup.done = True
            self.messages.extend(fail_messages(tup.message_id))


# ---------------------------------------------------------------------- generations in root ids
# Exactly-once topologies (gale.worker.state.epochs) tell the tuples of one generation from those of
# an older one by their roots: the generation is the root id's top byte, stamped by the spout's
# collector, so no wire change and no per-tuple field is needed.

GENERATION_BITS = 8
_GEN_SHIFT = 64 - GENERATION_BITS
_GEN_MASK = (1 << GENERATION_BITS) - 1
_LOW_MASK = (1 << _GEN_SHIFT) - 1


def with_generation(root: int, generation: int, n_ackers: int = 1, acker_index: int = 0) -> int:
    """A root id with ``generation`` (mod 256) in its top byte, random below it (from ``root``), and
    ``result % n_ackers == acker_index`` (the acker the spout steers its roots to); never 0 or 1. The
    generation must survive the steering exactly: a current tuple taken for a stale one would be
    acked without effect — lost."""
    base = (generation & _GEN_MASK) << _GEN_SHIFT
    r = base | (root & _LOW_MASK)
    if n_ackers == 1:  # one acker (local mode, a worker's own acker): no steering
        return r if r >= 2 else r + 2
    r = r - r % n_ackers + acker_index  # within n_ackers of where it was
    while r < max(base, 2):
        r += n_ackers
    while r >= base + (1 << _GEN_SHIFT):
        r -= n_ackers
    return r


def generation_of(root: int) -> int:
    return (root >> _GEN_SHIFT) & _GEN_MASK


def generation_range(generation: int) -> tuple[int, int]:
    """``(lo, hi)``: the root ids of ``generation`` (mod 256) are exactly those with
    ``lo <= root < hi`` (root ids are 64-bit: the generation is their top byte). One comparison per
    root, for the stateful executors' per-tuple check (:func:`is_current` is defined by it)."""
    lo = (generation & _GEN_MASK) << _GEN_SHIFT
    return lo, lo + (1 << _GEN_SHIFT)


def is_current(roots: dict[int, int] | None, generation: int) -> bool:
    """Whether a tuple whose anchors are ``roots`` (root → edge) belongs to ``generation``. A tuple
    without roots (emitted unanchored or without a message id) cannot be told apart: it counts as
    current (exactly-once needs anchored emits from spouts with message ids; docs/state.md)."""
    lo, hi = generation_range(generation)
    return all(lo <= root < hi for root in roots) if roots else True
