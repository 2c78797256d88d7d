"""Where an executor thread puts what it sends: a task's queue in this worker, or the transfer.

Every tuple, acker message and acker verdict a collector or executor sends goes through one of
:class:`Delivery`'s methods, so they are the hottest calls of a worker after the collectors' own
(``WorkerRuntime`` binds them as ``send_tuple``, ``send_acker``, ``send_result``, ``acker_task``
and ``flush_acks``). Compiled, each is one C function: a dict lookup for the task's queue and an
append, or a call into the transfer's compiled sender for a task elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cython

from gale.worker.sender import TupleSender
from gale.worker.runtime.acker import ACK, CONTROL


@cython.cfunc
@cython.inline
def _tree_index(root: object, n: cython.Py_ssize_t) -> cython.Py_ssize_t:
    """``root % n``, which picks a tree's acker: C arithmetic for a root in unsigned 64 bits (every
    root Gale makes), Python's for any other int."""
    r: cython.ulonglong
    if cython.compiled and _as_u64(root, cython.address(r)):
        return r % n
    return root % n


@cython.cclass
class Delivery:
    """``queues``: task → its input deque, for the tasks of this worker; ``remote``: the transfer's
    sender (``send_tuple``, ``send_acker``, ``send_result``), or None in one process, where every
    task is local; ``acker_tasks``: the topology's acker tasks (``root % len`` picks a tree's)."""

    def __init__(self, queues: dict, remote: Any, acker_tasks: list):
        self.queues = queues
        self.acker_tasks = list(acker_tasks)
        self.n_ackers = len(self.acker_tasks)
        self.remote_tuple = remote.send_tuple if remote is not None else None
        self.remote_acker = remote.send_acker if remote is not None else None
        self.remote_result = remote.send_result if remote is not None else None
        self.remote_control = getattr(remote, "send_control", None)
        #: the transfer's compiled sender, whose ``pack_ack`` writes a buffered ack without a message tuple
        self.sender = getattr(remote, "tuple_sender", None)
        # one acker task, in this worker: acks go straight onto its queue
        single = self.acker_tasks[0] if self.n_ackers == 1 else None
        self.single_acker = queues.get(single) if single is not None else None

    def queue_of(self, task: int) -> Any:
        """The task's deque in this worker, or None (it runs elsewhere)."""
        return self.queues.get(task)

    def send_tuple(self, task: int, tup: Any) -> None:
        self._put(task, tup, self.remote_tuple)

    def send_acker(self, task: int, msg: tuple) -> None:
        self._put(task, msg, self.remote_acker)

    def send_result(self, task: int, result: tuple) -> None:
        self._put(task, result, self.remote_result)

    def send_control(self, task: int, payload: tuple) -> None:
        """A control message for a spout task: ``payload`` is four unsigned 64-bit integers, the
        first naming its kind (``gale.worker.runtime.control``)."""
        q = self.queues.get(task)
        if q is not None:
            q.append((CONTROL, payload))
        elif self.remote_control is not None:
            self.remote_control(task, payload)
        else:
            raise ValueError(f"control message for task {task}, which is not in this worker and has no route")

    @cython.cfunc
    @cython.inline
    def _put(self, task: object, item: object, remote: object):
        q = self.queues.get(task)
        if q is not None:
            q.append(item)
        else:
            remote(task, item)

    def acker_task(self, root: int) -> int:
        """The acker task of the tree ``root``."""
        return self.acker_tasks[_tree_index(root, self.n_ackers)]

    def flush_acks(self, buf: dict) -> None:
        """Send an ack buffer (root → XOR of a round's ack values): one ``(ACK, root, value, 0)``
        per root, to the root's acker — on its queue, or for an acker task elsewhere in this
        flush's ack pack for it (:meth:`TupleSender.pack_ack`, one element a flush); then empty it."""
        single = self.single_acker
        if single is not None:
            for root, val in buf.items():
                single.append((ACK, root, val, 0))
        else:
            acker_tasks: list = self.acker_tasks
            n: cython.Py_ssize_t = self.n_ackers
            remote: Callable[[int, tuple], None] = self.remote_acker
            sender: TupleSender = self.sender
            local: list = [self.queues.get(task) for task in acker_tasks]  # by acker index: a queue here, or None
            packs: list = None  # by acker index: this flush's acks for an acker task elsewhere, packed
            pack: bytearray
            i: cython.Py_ssize_t
            for root, val in buf.items():
                i = _tree_index(root, n)
                q = local[i]
                if q is not None:
                    q.append((ACK, root, val, 0))
                elif sender is not None:
                    if packs is None:
                        packs = [None] * n
                    pack = packs[i]
                    if pack is None:
                        pack = packs[i] = sender.new_pack()
                    if sender.pack_ack(pack, acker_tasks[i], root, val):  # full
                        sender.send_pack(acker_tasks[i], pack)
                        packs[i] = None
                else:
                    remote(acker_tasks[i], (ACK, root, val, 0))
            if packs is not None:
                for i in range(n):
                    pack = packs[i]
                    if pack is not None:
                        sender.send_pack(acker_tasks[i], pack)
        buf.clear()
