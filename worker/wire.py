"""The messages inside a batch, and their validation on arrival (pure: bytes in, messages out).

Message kinds (msgpack arrays):

* ``[0, task, component, stream, source_task, values, [root, edge, ...], lineage]`` — a tuple for a bolt
  task (``lineage``: :mod:`gale.worker.runtime.lineage`, a signed or unsigned 64-bit integer);
* ``[1, task, kind, root, val, spout_task]`` — for an acker task (INIT, ACK, FAIL, RESET);
* ``[2, task, outcome, root]`` — an acker's verdict for a spout task (ACKED, FAILED, RESET_TIMEOUT).

Even an authenticated batch is checked message by message before anything is delivered: the kind
is known, the task is one this worker hosts and takes that kind of message, every field has its
type (``bool`` is not an integer here), root ids, edge ids and ack values are unsigned 64-bit
(msgpack also carries negative integers), the spout task fits the acker's table, the stream is one
the topology declares, the receiving task's component subscribes to it (a tuple an older worker
addressed by a task id that now belongs to another component, during a rescale, is refused), and
the tuple has its number of fields. A message that fails is dropped and
counted under its reason (:data:`INVALID_REASONS`); the rest of the batch is delivered. A payload
that is not msgpack loses the messages from the broken one on (``undecodable``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import msgpack

from gale.topology.tuple import Fields, new_tuple
from gale.worker.arrow_codec import ext_hook
from gale.worker.runtime.acker import ACK, ACKED, FAIL, FAILED, INIT, RESET, RESET_TIMEOUT

TUPLE, ACKER, RESULT = 0, 1, 2
KINDS = (TUPLE, ACKER, RESULT)
MAX_U64 = (1 << 64) - 1
MIN_I64 = -(1 << 63)
MAX_TASK = (1 << 31) - 1
ACKER_KINDS = frozenset((INIT, ACK, FAIL, RESET))
OUTCOMES = frozenset((ACKED, FAILED, RESET_TIMEOUT))

#: message rejection reasons (counted per reason by the transfer)
UNKNOWN_KIND = "unknown_kind"      # the first element is not a message kind
UNKNOWN_TASK = "unknown_task"      # not a task of this worker, or one that takes another kind of message
MALFORMED = "malformed"            # wrong length, a field of the wrong type, a tuple with the wrong field count
OUT_OF_RANGE = "out_of_range"      # root / edge id / ack value outside unsigned 64 bits, bad spout task
UNKNOWN_STREAM = "unknown_stream"  # a component/stream the topology does not declare
NOT_SUBSCRIBED = "not_subscribed"  # a declared stream the receiving task's component does not subscribe to
UNDECODABLE = "undecodable"        # the payload is not msgpack from this point on
INVALID_REASONS = (UNKNOWN_KIND, UNKNOWN_TASK, MALFORMED, OUT_OF_RANGE, UNKNOWN_STREAM, NOT_SUBSCRIBED, UNDECODABLE)


class BatchDecoder:
    """Checks the messages of an authenticated payload and hands the valid ones to ``deliver``.

    ``roles`` maps each task of this worker to the one message kind it takes (:data:`TUPLE` for
    bolts, :data:`ACKER` for ``__acker`` tasks, :data:`RESULT` for spouts); ``fields_for`` gives the
    Fields of a declared ``(component, stream)`` or ``None``; ``inputs`` maps each bolt task to the
    ``(component, stream)`` pairs its component subscribes to (``None``: not checked).
    ``invalid`` counts drops per reason.
    """

    def __init__(self, fields_for: Callable[[str, str], Fields | None], roles: Mapping[int, int] | None = None,
                 inputs: Mapping[int, Collection[tuple[str, str]]] | None = None):
        self.fields_for = fields_for
        self.invalid: dict[str, int] = {reason: 0 for reason in INVALID_REASONS}
        self.set_roles(roles or {}, inputs)

    def set_roles(self, roles: Mapping[int, int], inputs: Mapping[int, Collection[tuple[str, str]]] | None = None) -> None:
        self.roles = dict(roles)
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

    def _misrouted(self, msg: Any, kind: Any, task: Any) -> str:
        """Why a message whose (kind, task) is not one of this worker's roles is refused."""
        if type(msg) is not list:
            return MALFORMED
        if type(kind) is not int or kind not in KINDS:
            return UNKNOWN_KIND
        if type(task) is not int:
            return MALFORMED
        return UNKNOWN_TASK

    def decode(self, payload: bytes, deliver: Callable[[int, Any], bool]) -> tuple[int, int]:
        """Hand each valid message to ``deliver(task, payload)`` (False: the task refused it);
        count invalid ones in :attr:`invalid`. Returns (messages seen, messages ``deliver`` refused).

        The checks are ordered for the common case (a valid tuple costs a handful of type tests);
        a message of the wrong shape raises inside the loop and is counted as malformed.
        """
        refused = 0
        invalid = self.invalid
        roles = self.roles
        streams = self._fields
        unpacker = msgpack.Unpacker(raw=False, use_list=True, strict_map_key=False, ext_hook=ext_hook,
                                    max_buffer_size=max(len(payload), 1024))
        unpacker.feed(payload)
        seen = 0
        try:
            for msg in unpacker:
                seen += 1
                try:
                    kind = msg[0]
                    task = msg[1]
                    if type(task) is not int or type(kind) is not int or roles.get(task) != kind:
                        invalid[self._misrouted(msg, kind, task)] += 1
                        continue
                    if kind == TUPLE:
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
                        if type(akind) is not int or type(root) is not int or type(val) is not int \
                                or type(spout_task) is not int:
                            invalid[MALFORMED] += 1
                        elif akind not in ACKER_KINDS:
                            invalid[UNKNOWN_KIND] += 1
                        elif root < 0 or val < 0 or not 0 <= spout_task <= MAX_TASK or root > MAX_U64 or val > MAX_U64:
                            invalid[OUT_OF_RANGE] += 1
                        elif not deliver(task, (akind, root, val, spout_task)):
                            refused += 1
                    else:  # RESULT
                        _, _, outcome, root = msg
                        if type(outcome) is not int or type(root) is not int:
                            invalid[MALFORMED] += 1
                        elif outcome not in OUTCOMES:
                            invalid[UNKNOWN_KIND] += 1
                        elif root < 0 or root > MAX_U64:
                            invalid[OUT_OF_RANGE] += 1
                        elif not deliver(task, (outcome, root)):
                            refused += 1
                except (IndexError, KeyError, TypeError, ValueError):
                    # not an array, too short or too long, an unhashable task or stream name
                    invalid[MALFORMED] += 1
        except Exception:  # noqa: BLE001 - bad msgpack, bad UTF-8, nesting too deep: the rest is lost
            invalid[UNDECODABLE] += 1
            seen += 1
        return seen, refused


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
