"""Output collectors: what spouts and bolts call to emit, ack and fail.

The anchoring arithmetic is Storm's, defined once in :mod:`gale.worker.runtime.anchoring` (spout
emit: a root id and one edge id per copy, ``INIT(root, XOR of the edges)``; bolt emit: one edge per
copy and tracked anchor, XORed into the anchor's ``ack_val`` and the copy's message id; ack:
``edge XOR ack_val`` per root; fail: per root). It is inlined here because emit and ack are the
hottest code of a topology; the random ids come from ``rand`` (injectable) in the order
:class:`~gale.worker.runtime.anchoring.AnchoringModel` draws them, and
``tests/test_anchoring_model.py`` checks that both produce the same message ids and acker messages.

Tracked tuples also get a lineage id (:mod:`gale.worker.runtime.lineage`): from the spout's
message id, then per anchored emit from the anchor's lineage, the stream and the emit's ordinal.

Each collector belongs to one task and implements the user API's protocols
(:mod:`gale.topology.collector`). Emits return the list of target task ids, as in Storm.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import cython

from gale.topology.tuple import Fields, Tuple, new_tracked, new_tuple
from gale.worker.runtime import lineage as _lineage
from gale.worker.runtime.acker import ACK, FAIL, INIT, RESET
from gale.worker.runtime.anchoring import Rand, with_generation
from gale.worker.runtime.route import StreamRoute

if TYPE_CHECKING:  # pragma: no cover
    from gale.worker.runtime.bolt import BoltExecutor
    from gale.worker.runtime.spout import SpoutExecutor

#: the root and edge ids' generator; a worker forked from its supervisor's fork server (which
#: imported this module) draws from its own: reseeded in every forked child, else the workers of one
#: fork server — a killed worker and its replacement among them — would draw the same ids, and trees
#: of different spouts would collide in the ackers
_ids = random.Random()
os.register_at_fork(after_in_child=_ids.seed)
_rand: Rand = _ids.getrandbits
fromkeys = dict.fromkeys
#: the stream an emit without ``stream=`` goes to (Storm's ``default``)
DEFAULT_STREAM = cython.declare(str, "default")


def _hash3_agrees() -> bool:
    """Whether ``hash3`` (``tuplehash.pxd``: CPython's tuple hash in C) gives this interpreter's
    ``hash`` of a 3-tuple (checked at import; the collector uses ``hash`` itself when not, or when
    running as Python)."""
    if not cython.compiled:
        return False
    samples = [(0, 0, 0), (-1, -2, -3), (2**64 - 1, 2**63, -(2**63)), (123456789012345678, 7, 2**61 - 1),
               (-5555555555555555555, 18446744073709551557, 9), (1, 2**61, 2**61 - 2)]
    return all(hash3(a, b, c) == hash((a, b, c)) for a, b, c in samples)


_C_HASH3 = cython.declare(cython.bint, _hash3_agrees())

@cython.cfunc
@cython.inline
def _buffer_ack(buf: dict, root: object, v: cython.ulonglong) -> cython.void:
    """XOR ``v`` into ``buf[root]`` (anchoring.combine_ack for one root; no int objects but the one
    stored, when compiled)."""
    prev = buf.get(root)
    if prev is not None:
        pv: cython.ulonglong = prev
        v ^= pv
    buf[root] = v


def child_lineage(parent: int, salt: int, ordinal: int) -> int:
    """What the collector computes for :func:`gale.worker.runtime.lineage.child` (for tests)."""
    return _child_lineage(parent, salt, ordinal)


@cython.cfunc
@cython.inline
def _child_lineage(parent: object, salt: object, ordinal: object) -> object:
    """:func:`gale.worker.runtime.lineage.child`: ``hash((parent, salt, ordinal))``."""
    if _C_HASH3:
        return hash3(parent, salt, ordinal)
    return hash((parent, salt, ordinal))


@cython.cfunc
@cython.inline
def _route_lineage(parent: object, route: StreamRoute, ordinal: cython.Py_ssize_t) -> object:
    """:func:`_child_lineage` of a tuple emitted on ``route``: the salt's hash is the route's, and a
    non-negative int below 2**61 - 1 (an emit's ordinal) is its own hash."""
    if _C_HASH3:
        return hash3h(parent, route.salt_hash, ordinal)
    return hash((parent, route.salt, ordinal))


class _Collector:
    """Shared emit plumbing of spout and bolt collectors."""

    def __init__(self, executor: Any, task: int, routes: dict[str, StreamRoute], rand: Rand | None = None):
        #: the source of root and edge ids (``getrandbits``-like; injected by tests)
        self._rand = rand or _rand
        # the compiled build draws default ids from splitmix64 in C (see _new_id), seeded per collector
        self._c_rand = rand is None
        self._rng = int.from_bytes(os.urandom(8), "little")
        self._executor = executor
        self._runtime = executor.runtime
        self.task = task
        self.component = executor.component
        self._routes = routes
        #: the route of the default stream (most emits), found without a dict lookup
        self._default_route = routes.get(DEFAULT_STREAM)
        self._stats = executor.stats
        executor.stats.routes = routes
        self._send_tuple = self._runtime.send_tuple
        self._send_remote = self._runtime.send_remote
        self._queue_of = self._runtime.queue_of
        self._send_acker = self._runtime.send_acker
        self._acker_task = self._runtime.acker_task
        self._acking = self._runtime.acking
        # one acker task in this process (the common local case): append to its queue directly
        self._acker_queue = self._runtime.single_acker_queue()
        self._acker_append = self._acker_queue.append if self._acker_queue is not None else None
        self._capture: Callable[[str, str, Sequence[Any]], None] | None = self._runtime.capture

    def _new_id(self) -> cython.ulonglong:
        """A random 64-bit id (a root or edge id; the caller makes it non-zero). The compiled build,
        unless a ``rand`` was injected, takes the next number of splitmix64 over this collector's
        state in C (no call, no int object); the Python build calls ``rand(64)``."""
        if cython.compiled and self._c_rand:
            return splitmix64(cython.address(self._rng))  # splitmix.pxd
        return self._rand(64)

    def _route(self, stream: str, values: Sequence[Any]) -> StreamRoute:
        route = self._routes.get(stream)
        if route is not None and len(values) == route.n:
            return route
        if route is None:
            raise ValueError(
                f"component {self.component!r} emitted to undeclared stream {stream!r}; "
                f"declared streams: {sorted(self._routes) or 'none'} (declare it in declare_output_fields)"
            )
        if len(values) != len(route.fields):
            raise ValueError(
                f"component {self.component!r} emitted {len(values)} values on stream {stream!r}, "
                f"which declares {len(route.fields)} fields {list(route.fields.names)}: {list(values)!r}"
            )
        return route

    def _direct_targets(self, route: StreamRoute, task: int) -> list[int]:
        if not route.direct:
            raise ValueError(
                f"component {self.component!r}: emit_direct on stream {route.stream!r}, which is not declared direct"
            )
        if task not in route.direct_tasks:
            raise ValueError(
                f"component {self.component!r}: emit_direct to task {task}, which does not subscribe to stream "
                f"{route.stream!r} (subscribed tasks: {sorted(route.direct_tasks)})"
            )
        return [task]

    def report_error(self, error: BaseException | str) -> None:
        """Report an error to the component's error list (throttled per executor)."""
        self._executor.report_error(error)

    def declare_metrics(self, names: Iterable[str]) -> None:
        """Create component counters up front (shown at 0 in stats, the API and /metrics)."""
        extra = self._stats.extra
        for name in names:
            extra.setdefault(name, 0)

    def incr_metric(self, name: str, n: float = 1) -> None:
        """Add ``n`` to a component counter (summed per component in ``nimbus status`` and the UI,
        exported by the worker's /metrics). Call from the task's own methods only."""
        extra = self._stats.extra
        extra[name] = extra.get(name, 0) + n

    def set_details(self, name: str, values: dict[str, float]) -> None:
        """Replace a labelled gauge of this component (label → value, e.g. a Kafka spout's lag per
        partition): its latest value is shown per component in the UI. From the task's own methods."""
        self._stats.details[name] = dict(values)


class SpoutOutputCollector(_Collector):
    """``emit(values, msg_id=None, stream="default")``; a message id makes the tuple tracked."""

    def __init__(self, executor: SpoutExecutor, task: int, routes: dict[str, StreamRoute], rand: Rand | None = None):
        super().__init__(executor, task, routes, rand)
        self._pending = executor.pending
        self._pending_put = executor.pending.put
        self._clock = executor.clock
        self._monotonic = executor.clock.monotonic
        n = len(self._runtime.acker_tasks)
        local = self._runtime.local_acker_indices
        # root ids map to acker_tasks[root % n]; steer them to this worker's own ackers
        self._steer = (n, local[task % len(local)]) if local and len(local) < n else None
        self._message_salts: dict[str, int] = {}
        #: exactly-once topologies: the generation every root id carries (set by the executor)
        self._generation: int | None = None
        #: tuples emitted so far (the executor tells an empty ``next_tuple`` call by it)
        self._emitted = 0

    def _message_lineage(self, stream: str, msg_id: Any) -> int:
        salt = self._message_salts.get(stream)
        if salt is not None and type(msg_id) is int:
            return hash((salt, msg_id)) or 1  # lineage.message, inlined
        if salt is None:
            spout = getattr(self._executor, "spouts", {}).get(self.task)
            unique = bool(getattr(spout, "unique_message_ids", False))
            salt = self._message_salts[stream] = _lineage.spout_salt(self.component, stream,
                                                                     None if unique else self.task)
        return _lineage.message(salt, msg_id)

    def rewind_needed(self) -> None:
        """Exactly-once topologies: this source's position no longer fits the last checkpoint (a
        Kafka consumer group moved partitions): the topology goes back to it. No-op otherwise."""
        self._executor.rewind_needed(self.task)

    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM) -> list[int]:
        route: StreamRoute = self._default_route if stream is DEFAULT_STREAM else self._routes.get(stream)
        if route is None or len(values) != route.n:
            route = self._route(stream, values)
        targets = route.const
        return self._emit(route, route.choose(values) if targets is None else targets, values, msg_id)

    def emit_direct(self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = "default") -> list[int]:
        route = self._route(stream, values)
        return self._emit(route, self._direct_targets(route, task), values, msg_id)

    def _emit(self, route: StreamRoute, targets: list, values: Sequence[Any], msg_id: Any) -> list:
        stream = route.stream
        route.emitted += 1
        route.transferred += len(targets)
        self._emitted += 1
        if self._capture is not None:
            self._capture(self.component, stream, values)
        fields, task = route.fields, self.task
        if msg_id is not None and self._acking:
            if cython.compiled and self._c_rand:  # _new_id, inlined: the Python build saves a call
                root = splitmix64(cython.address(self._rng)) | 2  # anchoring.new_root_id
            else:
                root = self._rand(64) | 2
            steer = self._steer
            if steer is not None:  # anchoring.steer_root, inlined
                n_ackers = steer[0]
                root = root - root % n_ackers + steer[1]
                if root < 2:
                    root += n_ackers
            if self._generation is not None:
                root = with_generation(root, self._generation, *(self._steer or (1, 0)))
            xor = 0
            lineage = self._message_lineage(stream, msg_id)
            queues = route.const_queues
            if route.single_append is not None:  # one target task, in this process
                if cython.compiled and self._c_rand:  # _new_id, inlined as above
                    edge = splitmix64(cython.address(self._rng)) or 1  # anchoring.new_edge_id
                else:
                    edge = self._rand(64) or 1
                xor = edge
                route.single_append(new_tracked(values, fields, task, root, edge, lineage))
            elif queues is not None:
                for q in queues:
                    edge = self._new_id() or 1  # anchoring.new_edge_id
                    xor ^= edge
                    q.append(new_tracked(values, fields, task, root, edge, lineage))
            else:
                queue_of, send = self._queue_of, self._send_remote
                for target in targets:
                    edge = self._new_id() or 1  # anchoring.new_edge_id
                    xor ^= edge
                    t = new_tracked(values, fields, task, root, edge, lineage)
                    q = queue_of(target)
                    if q is not None:
                        q.append(t)
                    else:
                        send(target, t)
            self._pending_put(root, (task, msg_id, stream, self._monotonic()))
            if self._acker_append is not None:
                self._acker_append((INIT, root, xor, task))
            else:
                self._send_acker(self._acker_task(root), (INIT, root, xor, task))
        else:
            if targets:
                queues = route.const_queues
                if queues is not None:
                    for q in queues:
                        q.append(new_tuple(values, fields, task, None))
                else:
                    send = self._send_tuple
                    for target in targets:
                        send(target, new_tuple(values, fields, task, None))
            if msg_id is not None:
                # acking disabled (topology.acker.executors = 0): the tuple counts as acked at once
                self._executor.ack_now(task, msg_id, stream)
        return targets


class BoltOutputCollector(_Collector):
    """``emit(values, anchors=None, stream="default")``, ``ack``, ``fail``, ``reset_timeout``."""

    def __init__(self, executor: BoltExecutor, task: int, routes: dict[str, StreamRoute], rand: Rand | None = None):
        super().__init__(executor, task, routes, rand)
        #: set by the executor while a BasicBolt executes: emits anchor to it by default
        self.auto_anchor: Tuple | None = None
        self._perf = time.perf_counter
        #: the executor's ack buffer (root → XOR of this round's ack values; shared by the executors
        #: of its thread), or None: acks are then sent one message each. The executor thread sends
        #: it after each round.
        self._ack_buf: dict[int, int] | None = getattr(executor, "ack_buf", None)
        # acks not yet added to stats.acked: ``_acked_run`` acks of tuples of ``_acked_fields`` in a
        # row (_count_acked adds them; the executor thread calls it after each batch and timer round)
        self._acked_fields: Fields | None = None
        self._acked_run = 0
        #: acks are held (a stateful task's, until its checkpoint commits: ``_ack_buf`` is then the
        #: task's held acks, never sent early — not even before a fail or reset of their tree)
        self._hold = False

    def emit(
        self, values: Sequence[Any], anchors: Tuple | Iterable[Tuple] | None = None, stream: str = DEFAULT_STREAM
    ) -> list[int]:
        route: StreamRoute = self._default_route if stream is DEFAULT_STREAM else self._routes.get(stream)
        if route is None or len(values) != route.n:
            route = self._route(stream, values)
        if anchors is None:
            anchors = self.auto_anchor
        a: Tuple  # ``anchors`` once it is known to be one Tuple (a typed C reference when compiled)
        edge: cython.ulonglong  # an edge id (C arithmetic on ``ack_val`` when compiled)
        ordinal: cython.Py_ssize_t
        root = None  # the anchor's tuple tree when it is in exactly one
        if type(anchors) is Tuple and self._acking:
            a = anchors
            root = a._root
            if root is None:
                a_ids = a._mid
                if a_ids and len(a_ids) == 1:
                    (root,) = a_ids
        q = route.single_queue
        if q is not None:
            # the hottest path of a topology, inlined: one target task in this process, and no
            # tracked anchor (or acking off) or one anchor in one tuple tree (anchoring.bolt_emit,
            # lineage.child, new_tracked, send_tuple by hand). Other anchorings take the general path.
            lineage = 0
            edge = 0
            if root is not None:
                ordinal = a._emits
                a._emits = ordinal + 1
                lineage = a.lineage
                if lineage:  # _route_lineage and _new_id, inlined: the Python build saves two calls
                    if _C_HASH3:
                        lineage = hash3h(lineage, route.salt_hash, ordinal)
                    else:
                        lineage = hash((lineage, route.salt, ordinal))
                if cython.compiled and self._c_rand:
                    edge = splitmix64(cython.address(self._rng)) or 1
                else:
                    edge = self._rand(64) or 1
                a.ack_val ^= edge
            elif anchors is not None and self._acking and (type(anchors) is not Tuple or anchors._mid):
                q = None  # several anchors, or an anchor in several trees
            route.emitted += 1
            if self._capture is not None:
                self._capture(self.component, stream, values)
            if q is not None:
                route.transferred += 1
                t: Tuple = Tuple.__new__(Tuple)
                t.values = values
                t.fields = route.fields
                t.task = self.task
                t._mid = None
                t._root = root
                t._edge = edge
                t.ack_val = 0
                t._st = 0.0
                t.lineage = lineage
                t._emits = 0
                route.single_append(t)
                return route.const  # type: ignore[return-value]
            targets = route.const or []  # an anchoring the short path does not take: the general path
        else:
            targets = route.const
            if targets is None:
                targets = route.choose(values)
            route.emitted += 1
            if self._capture is not None:
                self._capture(self.component, stream, values)
        if not targets:
            return targets
        route.transferred += len(targets)
        if root is not None:
            # the common case, inlined: one tracked anchor in one tree (anchoring.bolt_emit)
            fields, task = route.fields, self.task
            ordinal = a._emits
            a._emits = ordinal + 1
            lineage = a.lineage
            if lineage:
                lineage = _route_lineage(lineage, route, ordinal)
            queue_of, send = self._queue_of, self._send_remote
            for target in targets:
                edge = self._new_id() or 1
                a.ack_val ^= edge
                t = new_tracked(values, fields, task, root, edge, lineage)
                q = queue_of(target)
                if q is not None:
                    q.append(t)
                else:
                    send(target, t)
            return targets
        if anchors is None or not self._acking:
            # untracked copies (no anchor, or acking off) to queues in this process
            queues = route.const_queues
            if queues is not None:
                fields, task = route.fields, self.task
                for q in queues:
                    q.append(new_tuple(values, fields, task, None))
                return targets
        return self._emit_anchored(route, targets, values, anchors)

    def emit_direct(
        self, task: int, values: Sequence[Any], anchors: Tuple | Iterable[Tuple] | None = None,
        stream: str = "default",
    ) -> list[int]:
        route = self._route(stream, values)
        targets = self._direct_targets(route, task)
        route.emitted += 1
        route.transferred += len(targets)
        if self._capture is not None:
            self._capture(self.component, stream, values)
        if anchors is None:
            anchors = self.auto_anchor
        return self._emit_anchored(route, targets, values, anchors)

    def _emit_anchored(self, route: StreamRoute, targets: list[int], values: Sequence[Any], anchors: Any) -> list[int]:
        fields, task, send = route.fields, self.task, self._send_tuple
        if anchors is not None and self._acking:
            if isinstance(anchors, Tuple):
                # the common case: one anchor
                a_ids = anchors.message_id
                if a_ids:
                    ordinal = anchors._emits
                    anchors._emits = ordinal + 1
                    lineage = _child_lineage(anchors.lineage, route.salt, ordinal) if anchors.lineage else 0
                    for target in targets:
                        edge = self._new_id() or 1
                        anchors.ack_val ^= edge
                        send(target, new_tuple(values, fields, task, fromkeys(a_ids, edge), lineage))
                    return targets
            else:
                anchor_list = [a for a in anchors if a.message_id]
                if anchor_list:
                    parents = []
                    for a in anchor_list:
                        parents.append((a.lineage, a._emits))
                        a._emits += 1
                    lineage = _lineage.combined(parents, route.salt)
                    for target in targets:
                        ids: dict[int, int] = {}
                        for a in anchor_list:
                            edge = self._new_id() or 1
                            a.ack_val ^= edge
                            for r in a.message_id:
                                ids[r] = ids.get(r, 0) ^ edge
                        send(target, new_tuple(values, fields, task, ids, lineage))
                    return targets
        if targets:
            for target in targets:
                send(target, new_tuple(values, fields, task, None))
        return targets

    def ack(self, tup: Tuple) -> None:
        st: float = tup._st
        if st < 0:
            return
        tup._st = -1.0
        root = tup._root
        if self._acking and (root is not None or tup._mid):
            # anchoring.ack_messages; with an ack buffer, anchoring.combine_ack: the values for one
            # root are XORed together (a tree's acks in one round of the executor thread, by any of
            # its executors, become one acker message)
            av: cython.ulonglong = tup.ack_val
            v: cython.ulonglong  # C arithmetic when compiled
            buf: dict = self._ack_buf
            if buf is not None and root is not None:  # one tree: its slots, no dict
                v = tup._edge
                v ^= av
                prev = buf.get(root)  # _buffer_ack, inlined: the Python build saves a call
                if prev is not None:
                    pv: cython.ulonglong = prev
                    v ^= pv
                buf[root] = v
            elif buf is not None:
                for root, edge in tup._mid.items():
                    v = edge
                    _buffer_ack(buf, root, v ^ av)
            else:
                ids = tup.message_id
                q = self._acker_queue
                if q is not None:
                    for root, edge in ids.items():
                        q.append((ACK, root, edge ^ av, 0))
                else:
                    send, acker_task = self._send_acker, self._acker_task
                    for root, edge in ids.items():
                        send(acker_task(root), (ACK, root, edge ^ av, 0))
        fields = tup.fields
        if fields is self._acked_fields:
            self._acked_run += 1
        else:
            self._count_acked()
            self._acked_fields = fields
            self._acked_run = 1
        if st:
            stats = self._stats
            key = fields.source_key
            stats.process_ms[key] += (self._perf() - st) * 1000.0
            stats.process_n[key] += 1

    def _count_acked(self) -> None:
        """Add the acks counted since the last call to the executor's statistics (``acked``)."""
        run = self._acked_run
        if run:
            self._acked_run = 0
            self._stats.acked[self._acked_fields.source_key] += run

    def _send_buffered(self, root: int) -> None:
        """Send the buffered ack value of ``root`` now (before a fail or reset of that tree, so the
        acker sees the messages in the order they were made)."""
        buf = self._ack_buf
        if buf and not self._hold:
            val = buf.pop(root, None)
            if val is not None:
                self._send_acker(self._acker_task(root), (ACK, root, val, 0))

    def fail(self, tup: Tuple) -> None:
        st = tup._st
        if st < 0:
            return
        tup._st = -2.0
        ids = tup.message_id
        if ids and self._acking:
            for root in ids:  # anchoring.fail_messages
                self._send_buffered(root)
                self._send_acker(self._acker_task(root), (FAIL, root, 0, 0))
        key = tup.fields.source_key
        stats = self._stats
        stats.failed[key] += 1
        if st:
            stats.process_ms[key] += (self._perf() - st) * 1000.0
            stats.process_n[key] += 1

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of every tuple tree ``tup`` belongs to (long-running work)."""
        if tup.message_id and self._acking:
            for root in tup.message_id:
                self._send_buffered(root)
                self._send_acker(self._acker_task(root), (RESET, root, 0, 0))
