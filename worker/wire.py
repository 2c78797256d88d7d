"""The messages inside a batch, and their validation on arrival (pure: bytes in, messages out).

Message kinds (msgpack arrays). Workers send the grouped kinds (3, 4, 5: :mod:`gale.worker.outbox`
groups them); the single-message kinds (0, 1, 2) are still taken:

* ``[0, task, component, stream, source_task, values, [root, edge, ...], lineage]`` — a tuple for a bolt
  task (``lineage``: :mod:`gale.worker.runtime.lineage`, a signed or unsigned 64-bit integer);
* ``[1, task, kind, root, val, spout_task]`` — for an acker task (INIT, ACK, FAIL, RESET);
* ``[2, task, outcome, root]`` — an acker's verdict for a spout task (ACKED, FAILED, RESET_TIMEOUT);
* ``[3, task, component, stream, source_task, [body, ...]]`` — tuples for one bolt task from one
  source task and stream, each ``body`` being ``[values, lineage, root, edge, ...]`` (the tuple's
  anchors flattened after its lineage; none for an untracked tuple);
* ``[4, task, [kind, root, val, spout_task, ...]]`` — acker messages for one acker task, flattened
  four integers each;
* ``[5, task, [outcome, root, ...]]`` — verdicts for one spout task, two integers each;
* ``[8, task, [bin, ...]]`` — acks for one acker task, packed: each bin holds whole acks of 16 bytes,
  the root and the ack value as little-endian unsigned 64-bit integers (one bin per flush of a
  worker's ack buffer); delivered as ``(ACK, root, val, 0)``;
* ``[7, task, [kind, a, b, c, ...]]`` — control messages for one spout task, four unsigned 64-bit
  integers each (exactly-once epochs and the sources' reports: ``gale.worker.runtime.control``);
  delivered as ``(CONTROL, (kind, a, b, c))``, which the task's executor hands to its handler;
* ``[6, busy, [task, load, ...]]`` — the sending worker's load report (:mod:`gale.worker.loads`):
  how busy its executor threads were and its tasks' queue loads, per mille (0..1000; busy −1: not measured
  yet). Handed to ``on_loads``; it is not counted among the messages seen.

A grouped message counts as the messages it carries: what is said of a message below holds for
each tuple of a ``TUPLES`` message, each four (two) integers of an ``ACKERS`` (``RESULTS``) one and
each ack of an ``ACK_PACKS`` one; a bin that is not bytes or not whole acks is one malformed message.
A field the whole group shares (task, component, stream, source task) that fails a check fails
every message of the group, each counted; a group whose list is not a list, or whose integers do not
divide into messages, is one malformed message, and so is a message whose kind is unknown.

Even an authenticated batch is checked message by message before anything is delivered: the kind
is known, the task is one this worker hosts and takes that kind of message, every field has its
type (``bool`` is not an integer here), root ids, edge ids and ack values are unsigned 64-bit
(msgpack also carries negative integers), the spout task fits the acker's table, the stream is one
the topology declares, the receiving task's component subscribes to it (a tuple an older worker
addressed by a task id that now belongs to another component, during a rescale, is refused), and
the tuple has its number of fields. A message that fails is dropped and
counted under its reason (:data:`INVALID_REASONS`); the rest of the batch is delivered. A payload
that is not msgpack loses the messages from the broken one on (``undecodable``).

A group whose every message passes is checked with a few whole-column tests (types, lengths,
minimum and maximum) and delivered in one call (``deliver_many``); a group where any test fails is
checked message by message, to drop and count exactly the invalid ones.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Mapping
from typing import Any

import cython
import msgpack

from gale.topology.tuple import Fields, Tuple, new_tracked, new_tuple
from gale.worker.arrow_codec import ext_hook
from gale.worker.runtime.acker import ACK, CONTROL, INIT
from gale.worker.wire_fast import read_fast
from gale.worker.wire_kinds import (ACK_PACK_BYTES, ACK_PACKS, ACKER, ACKER_KINDS, ACKERS, CONTROLS, GROUP_WIDTH, INVALID_REASONS, KINDS,
                                    LOAD_SCALE, LOADS, MALFORMED, NOT_A_SPOUT, MAX_TASK, MAX_U64, MIN_I64, NOT_SUBSCRIBED, OUT_OF_RANGE, OUTCOMES,
                                    RESULTS, ROLE_OF, TUPLE, TUPLES, UNDECODABLE, UNKNOWN_KIND, UNKNOWN_STREAM,
                                    UNKNOWN_TASK)

#: an ack in an ``ACK_PACKS`` bin: root and value, little-endian unsigned 64-bit
_ACK_LAYOUT = struct.Struct("<QQ")


class BatchDecoder:
    """Checks the messages of an authenticated payload and hands the valid ones to ``deliver``.

    ``roles`` maps each task of this worker to the one message kind it takes (:data:`TUPLE` for
    bolts, :data:`ACKER` for ``__acker`` tasks, :data:`RESULT` for spouts); ``fields_for`` gives the
    Fields of a declared ``(component, stream)`` or ``None``; ``inputs`` maps each bolt task to the
    ``(component, stream)`` pairs its component subscribes to (``None``: not checked).
    ``invalid`` counts drops per reason. ``on_loads(busy_permille, [task, load_permille, ...])``
    takes each valid ``LOADS`` report (None: reports are checked and dropped).
    """

    #: read a payload of plain groups in C first (compiled build; False: always msgpack and the
    #: checks — the reference the fast path is tested against)
    fast = True

    def __init__(self, fields_for: Callable[[str, str], Fields | None], roles: Mapping[int, int] | None = None,
                 inputs: Mapping[int, Collection[tuple[str, str]]] | None = None,
                 on_loads: Callable[[int, list], None] | None = None):
        self.fields_for = fields_for
        self.on_loads = on_loads
        self.invalid: dict[str, int] = {reason: 0 for reason in INVALID_REASONS}
        self.set_roles(roles or {}, inputs)

    def set_roles(self, roles: Mapping[int, int], inputs: Mapping[int, Collection[tuple[str, str]]] | None = None,
                  spout_tasks: Collection[int] | None = None) -> None:
        self.roles = dict(roles)
        #: every spout task of the topology: an INIT names one as its tree's spout (None: not checked)
        self.spout_tasks = None if spout_tasks is None else frozenset(spout_tasks)
        self.inputs = None if inputs is None else {task: frozenset(pairs) for task, pairs in inputs.items()}
        #: (receiving task, component, stream) → (fields, field count): the streams a task takes
        self._fields: dict[tuple[int, str, str], tuple[Fields, int]] = {}

    def _stream(self, task: int, component: Any, stream: Any) -> tuple[Fields, int] | str:
        """Fields and field count of a declared stream the task subscribes to, or the reason it is
        refused (cache miss path)."""
        if type(component) is not str or type(stream) is not str:
            return MALFORMED
        fields = self.fields_for(component, stream)
        if fields is None:
            return UNKNOWN_STREAM
        if self.inputs is not None and (component, stream) not in self.inputs.get(task, ()):
            return NOT_SUBSCRIBED
        entry = self._fields[(task, component, stream)] = (fields, len(fields))
        return entry

    def _misrouted(self, msg: Any, kind: Any, task: Any) -> tuple[str, int]:
        """Why a message whose (kind, task) is not one of this worker's roles is refused, and how
        many messages that refuses (a well-formed group: each of its messages)."""
        if type(msg) is not list:
            return MALFORMED, 1
        if type(kind) is not int or kind not in KINDS:
            return UNKNOWN_KIND, 1
        if type(task) is not int:
            return MALFORMED, 1
        count = 1
        if kind in GROUP_WIDTH and len(msg) == (6 if kind == TUPLES else 3) and type(msg[-1]) is list:
            if kind == ACK_PACKS:
                acks, bad = _packed_acks(msg[-1])
                count = max(1, len(acks) + bad)
            elif len(msg[-1]) % GROUP_WIDTH[kind] == 0:
                count = max(1, len(msg[-1]) // GROUP_WIDTH[kind])
        return UNKNOWN_TASK, count

    def decode(self, payload: bytes, deliver: Callable[[int, Any], bool],
               deliver_many: Callable[[int, list], int] | None = None) -> tuple[int, int]:
        """Hand each valid message to ``deliver(task, payload)`` (False: the task refused it), or a
        group's valid messages to ``deliver_many(task, payloads)`` in one call (it returns how many
        the task refused; default: ``deliver`` for each); count invalid ones in :attr:`invalid`.
        Returns (messages seen, messages refused).

        The checks are ordered for the common case (a valid tuple costs a handful of type tests);
        a message of the wrong shape raises inside the loop and is counted as malformed.
        """
        if deliver_many is None:
            def deliver_many(task: int, items: list) -> int:
                return sum(not deliver(task, item) for item in items)
        if cython.compiled and self.fast:
            try:
                parsed = read_fast(self, payload)
            except Exception:  # noqa: BLE001 - whatever it is, the checks below judge the payload
                parsed = None
            if parsed is not None:
                groups, seen = parsed
                refused = 0
                for task, items in groups:
                    refused += deliver_many(task, items)
                return seen, refused
        refused = 0
        invalid = self.invalid
        roles = self.roles
        streams = self._fields
        role_of = ROLE_OF
        unpacker = msgpack.Unpacker(raw=False, use_list=True, strict_map_key=False, ext_hook=ext_hook,
                                    max_buffer_size=max(len(payload), 1024))
        unpacker.feed(payload)
        seen = 0
        consumed = 0  # the end of the last whole message
        try:
            for msg in unpacker:
                consumed = unpacker.tell()
                seen += 1
                try:
                    kind = msg[0]
                    task = msg[1]
                    if type(task) is not int or type(kind) is not int or roles.get(task, -1) != role_of.get(kind, -2):
                        if kind == LOADS and type(kind) is int:  # no task role takes it: checked here
                            seen -= 1
                            self._loads(msg)
                            continue
                        reason, count = self._misrouted(msg, kind, task)
                        invalid[reason] += count
                        seen += count - 1
                        continue
                    if kind == TUPLES:
                        _, _, component, stream, source_task, bodies = msg
                        if type(bodies) is not list:
                            invalid[MALFORMED] += 1
                            continue
                        count = len(bodies)
                        seen += count - 1
                        if type(component) is not str or type(stream) is not str:
                            invalid[MALFORMED] += count
                            continue
                        entry = streams.get((task, component, stream))
                        if entry is None:
                            entry = self._stream(task, component, stream)
                            if type(entry) is str:
                                invalid[entry] += count
                                continue
                        if type(source_task) is not int:
                            invalid[MALFORMED] += count
                        elif not 0 <= source_task <= MAX_TASK:
                            invalid[OUT_OF_RANGE] += count
                        elif count:
                            tuples = _tuples(bodies, entry[0], entry[1], source_task) \
                                or self._checked_tuples(bodies, entry[0], entry[1], source_task)
                            if tuples:
                                refused += deliver_many(task, tuples)
                    elif kind == ACKERS or kind == RESULTS or kind == CONTROLS:
                        _, _, ints = msg
                        if type(ints) is not list:
                            invalid[MALFORMED] += 1
                            continue
                        width = GROUP_WIDTH[kind]
                        count, rest = divmod(len(ints), width)
                        if rest:
                            invalid[MALFORMED] += 1
                            continue
                        seen += count - 1
                        if not count:
                            continue
                        if kind == ACKERS:
                            messages = _acker_messages(ints, self.spout_tasks) or self._checked_acker_messages(ints)
                        elif kind == CONTROLS:
                            messages = self._checked_controls(ints)
                        else:
                            messages = _results(ints) or self._checked_results(ints)
                        if messages:
                            refused += deliver_many(task, messages)
                    elif kind == ACK_PACKS:
                        _, _, packs = msg
                        if type(packs) is not list:
                            invalid[MALFORMED] += 1
                            continue
                        messages, bad = _packed_acks(packs)
                        invalid[MALFORMED] += bad
                        seen += len(messages) + bad - 1
                        if messages:
                            refused += deliver_many(task, messages)
                    elif kind == TUPLE:
                        _, _, component, stream, source_task, values, flat, lineage = msg
                        entry = streams.get((task, component, stream))
                        if entry is None:
                            entry = self._stream(task, component, stream)
                            if type(entry) is str:
                                invalid[entry] += 1
                                continue
                        # msgpack integers lie in [-2**63, 2**64): ">= 0" is the unsigned 64-bit check
                        if type(values) is list and len(values) == entry[1] and type(source_task) is int \
                                and 0 <= source_task <= MAX_TASK and type(flat) is list and type(lineage) is int \
                                and MIN_I64 <= lineage <= MAX_U64:
                            if not flat:
                                anchors = None
                            elif len(flat) == 2:
                                root, edge = flat
                                if type(root) is int and type(edge) is int and root >= 0 and edge >= 0:
                                    anchors = {root: edge}
                                else:
                                    invalid[_anchor_problem(flat)] += 1
                                    continue
                            else:
                                problem = _anchor_problem(flat)
                                if problem is not None:
                                    invalid[problem] += 1
                                    continue
                                anchors = dict(zip(flat[0::2], flat[1::2]))
                            if not deliver(task, new_tuple(values, entry[0], source_task, anchors, lineage)):
                                refused += 1
                        elif type(source_task) is int and type(values) is list and type(flat) is list \
                                and len(values) == entry[1] and type(lineage) is int:
                            invalid[OUT_OF_RANGE] += 1
                        else:
                            invalid[MALFORMED] += 1
                    elif kind == ACKER:
                        _, _, akind, root, val, spout_task = msg
                        reason = _acker_problem(akind, root, val, spout_task, self.spout_tasks)
                        if reason is not None:
                            invalid[reason] += 1
                        elif not deliver(task, (akind, root, val, spout_task)):
                            refused += 1
                    else:  # RESULT
                        _, _, outcome, root = msg
                        reason = _result_problem(outcome, root)
                        if reason is not None:
                            invalid[reason] += 1
                        elif not deliver(task, (outcome, root)):
                            refused += 1
                except (IndexError, KeyError, TypeError, ValueError):
                    # not an array, too short or too long, an unhashable task or stream name
                    invalid[MALFORMED] += 1
        except Exception:  # noqa: BLE001 - bad msgpack, bad UTF-8, nesting too deep: the rest is lost
            invalid[UNDECODABLE] += 1
            seen += 1
        else:
            if consumed < len(payload):  # the last message is cut short: msgpack would wait for the rest
                invalid[UNDECODABLE] += 1
                seen += 1
        return seen, refused

    def _loads(self, msg: Any) -> None:
        """Check a ``LOADS`` report and hand it on; a bad one is counted (as one message)."""
        if type(msg) is not list or len(msg) != 3 or type(msg[1]) is not int or type(msg[2]) is not list:
            self.invalid[MALFORMED] += 1
            return
        cpu, flat = msg[1], msg[2]
        if len(flat) & 1 or any(type(x) is not int for x in flat):
            self.invalid[MALFORMED] += 1
            return
        if not -1 <= cpu <= LOAD_SCALE or not all(0 <= t <= MAX_TASK for t in flat[0::2]) \
                or not all(0 <= x <= LOAD_SCALE for x in flat[1::2]):
            self.invalid[OUT_OF_RANGE] += 1
            return
        if self.on_loads is not None:
            self.on_loads(cpu, flat)

    # ------------------------------------------------------------------ a group, message by message

    def _checked_tuples(self, bodies: list, fields: Fields, n_fields: int, source_task: int) -> list[Tuple]:
        """The valid tuples of a group that failed the whole-group checks; the rest counted."""
        invalid = self.invalid
        out = []
        for body in bodies:
            if type(body) is not list or len(body) < 2:
                invalid[MALFORMED] += 1
                continue
            values, lineage = body[0], body[1]
            flat = body[2:]
            if type(values) is not list or len(values) != n_fields or type(lineage) is not int:
                invalid[MALFORMED] += 1
                continue
            problem = _anchor_problem(flat)
            if problem is None and not MIN_I64 <= lineage <= MAX_U64:
                problem = OUT_OF_RANGE
            if problem is not None:
                invalid[problem] += 1
                continue
            anchors = dict(zip(flat[0::2], flat[1::2])) if flat else None
            out.append(new_tuple(values, fields, source_task, anchors, lineage))
        return out

    def _checked_acker_messages(self, ints: list) -> list[tuple]:
        invalid = self.invalid
        out = []
        it = iter(ints)
        for m in zip(it, it, it, it):
            reason = _acker_problem(*m, self.spout_tasks)
            if reason is None:
                out.append(m)
            else:
                invalid[reason] += 1
        return out

    def _checked_controls(self, ints: list) -> list[tuple]:
        """Control messages: four unsigned 64-bit integers each (what they mean is their
        handler's to check); each bad one is counted."""
        invalid = self.invalid
        out = []
        it = iter(ints)
        for m in zip(it, it, it, it):
            if not all(type(x) is int for x in m):
                invalid[MALFORMED] += 1
            elif not all(0 <= x <= MAX_U64 for x in m):
                invalid[OUT_OF_RANGE] += 1
            else:
                out.append((CONTROL, m))
        return out

    def _checked_results(self, ints: list) -> list[tuple]:
        invalid = self.invalid
        out = []
        it = iter(ints)
        for m in zip(it, it):
            reason = _result_problem(*m)
            if reason is None:
                out.append(m)
            else:
                invalid[reason] += 1
        return out


# ---------------------------------------------------------------------- whole-group checks
# Each returns the group's messages when every one of them passes, or None — the caller then checks
# message by message (and counts each invalid one by its reason). One pass with a handful of type
# tests per message (C when compiled). msgpack integers lie in [-2**63, 2**64), so a decoded
# integer needs no upper-bound check to fit 64 bits: ">= 0" is the unsigned 64-bit check.


def _tuples(bodies: list, fields: Fields, n_fields: cython.Py_ssize_t, source_task: object) -> list | None:
    out: list = []
    append = out.append
    i: cython.Py_ssize_t
    width: cython.Py_ssize_t
    for i in range(len(bodies)):
        body = bodies[i]
        if type(body) is not list:
            return None
        b: list = cython.cast(list, body)
        width = len(b)
        if width != 4 and width != 2:
            return None
        values = b[0]
        lineage = b[1]
        if type(values) is not list or len(values) != n_fields or type(lineage) is not int:
            return None
        if width == 4:
            root = b[2]
            edge = b[3]
            if type(root) is not int or type(edge) is not int or root < 0 or edge < 0:
                return None
            append(new_tracked(values, fields, source_task, root, edge, lineage))
        else:
            append(new_tuple(values, fields, source_task, None, lineage))
    return out


def _acker_messages(ints: list, spout_tasks: frozenset | None) -> list | None:
    out: list = []
    append = out.append
    i: cython.Py_ssize_t
    for i in range(0, len(ints) - 3, 4):
        kind = ints[i]
        root = ints[i + 1]
        val = ints[i + 2]
        spout_task = ints[i + 3]
        if type(kind) is not int or type(root) is not int or type(val) is not int or type(spout_task) is not int \
                or kind not in ACKER_KINDS or root < 0 or val < 0 or spout_task < 0 or spout_task > MAX_TASK:
            return None
        if kind == INIT and spout_tasks is not None and spout_task not in spout_tasks:
            return None
        append((kind, root, val, spout_task))
    return out


def _packed_acks(packs: list) -> tuple[list, int]:
    """The ``(ACK, root, val, 0)`` messages of an ``ACK_PACKS`` group's bins, and how many bins are
    malformed (not bytes, or not whole acks)."""
    out: list = []
    bad = 0
    for pack in packs:
        if type(pack) is not bytes or len(pack) % ACK_PACK_BYTES:
            bad += 1
        else:
            out.extend((ACK, root, val, 0) for root, val in _ACK_LAYOUT.iter_unpack(pack))
    return out, bad


def _results(ints: list) -> list | None:
    out: list = []
    append = out.append
    i: cython.Py_ssize_t
    for i in range(0, len(ints) - 1, 2):
        outcome = ints[i]
        root = ints[i + 1]
        if type(outcome) is not int or type(root) is not int or outcome not in OUTCOMES or root < 0:
            return None
        append((outcome, root))
    return out


def _acker_problem(akind: Any, root: Any, val: Any, spout_task: Any, spout_tasks: frozenset | None = None) -> str | None:
    if type(akind) is not int or type(root) is not int or type(val) is not int or type(spout_task) is not int:
        return MALFORMED
    if akind not in ACKER_KINDS:
        return UNKNOWN_KIND
    if root < 0 or val < 0 or not 0 <= spout_task <= MAX_TASK or root > MAX_U64 or val > MAX_U64:
        return OUT_OF_RANGE
    if akind == INIT and spout_tasks is not None and spout_task not in spout_tasks:
        return NOT_A_SPOUT
    return None


def _result_problem(outcome: Any, root: Any) -> str | None:
    if type(outcome) is not int or type(root) is not int:
        return MALFORMED
    if outcome not in OUTCOMES:
        return UNKNOWN_KIND
    if root < 0 or root > MAX_U64:
        return OUT_OF_RANGE
    return None


def _anchor_problem(flat: list) -> str | None:
    if len(flat) & 1:
        return MALFORMED
    for x in flat:
        if type(x) is not int:
            return MALFORMED
    for x in flat:
        if not 0 <= x <= MAX_U64:
            return OUT_OF_RANGE
    return None
