"""Lineage ids: a stable identity for every tracked tuple, the same when its spout message replays.

Storm's tuple ids (root and edge ids) are random and a replay is a new tuple tree, so they cannot
tell a sink that a tuple is one it has already written. A **lineage id** can: a 64-bit number
derived only from what a replay repeats —

* a spout tuple emitted with a message id: the spout component, the stream, the message id
  (``repr``, so ints, strings and tuples of them are stable across processes) and the spout task
  — unless the spout class sets ``unique_message_ids = True`` (its ids name the message whatever
  task emits it, as the Kafka spout's ``(topic, partition, offset)`` do; a replay from another
  task after a rebalance is then recognised too);
* a tuple a bolt emits anchored to inputs: the inputs' lineage ids, the emitting component and
  stream, and the emit's ordinal among the emits anchored to that input (the 0th, 1st, ... word of
  a sentence), so a deterministic bolt gives a replayed input's outputs the same ids again.

Untracked tuples (no message id, unanchored emits, acking off) are never replayed and have
lineage ``0``. Ids are signed or unsigned 64-bit integers (msgpack carries both between workers);
one that hashes to 0 by chance (one in 2**64) reads as untracked, so its rows are written again
on replay rather than lost. Spark sinks de-duplicate replays by lineage (:mod:`gale.worker.spark.commit`).

Cost on the emit path: one tuple hash per anchored emit (:func:`child`); spout emits hash the
message id once (:func:`message`). Pure functions; the collector inlines :func:`child`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big") or 1


def stream_salt(component: str, stream: str) -> int:
    """The salt of tuples emitted by ``component`` on ``stream`` (the same in every process)."""
    return _digest(f"{component}\0{stream}")


def spout_salt(component: str, stream: str, task: int | None) -> int:
    """The salt of a spout task's messages; ``task=None`` when message ids are unique across tasks."""
    return _digest(f"{component}\0{stream}\0{'' if task is None else task}\0spout")


def message(salt: int, msg_id: Any) -> int:
    """The lineage id of a spout message (never 0)."""
    if msg_id.__class__ is int:
        return hash((salt, msg_id)) or 1
    return _digest(f"{salt}\0{msg_id!r}")


def child(parent: int, salt: int, ordinal: int) -> int:
    """The lineage id of the ``ordinal``-th emit anchored to a tuple with lineage ``parent``
    (CPython's tuple hash of 64-bit ints: the same in every process and run)."""
    return hash((parent, salt, ordinal))


def combined(parents: Iterable[tuple[int, int]], salt: int) -> int:
    """The lineage id of an emit anchored to several inputs: ``(lineage, ordinal)`` per input.
    Independent of the order the anchors were given in; 0 if no input has a lineage."""
    tracked = [(lin, n) for lin, n in parents if lin]
    if not tracked:
        return 0
    if len(tracked) == 1:  # the same id as the single-anchor emit
        return child(tracked[0][0], salt, tracked[0][1])
    return hash((*sorted(hash(p) for p in tracked), salt))
