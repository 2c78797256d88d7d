"""Storm's acker (``docs/storm-model.md`` §6), with a compact pending table.

For every tracked spout tuple the acker keeps the spout task and one 64-bit "ack val": the XOR of
every tuple id created or acked in the tuple tree. ``init(root, xor of edge ids, spout task)`` comes
from the spout, ``ack(root, own id XOR ids of tuples anchored to it)`` from bolts; when the value
reaches 0 the tree is complete and the spout task is told ``ack``. ``fail`` anywhere marks the tree
failed and the spout is told at once. Acks may arrive before the init (the entry is created with
an unknown spout task). Entries not completed within three rotations are dropped silently; the
spout times the tuple out on its own (``docs/storm-model.md`` §6).

:class:`AckerTable` is two generations. Recent trees live in a small dict and take messages one
at a time with exactly Storm's semantics (most trees complete there within milliseconds). Trees that
outlive a timeout rotation — or the oldest ones once the dict is full — move in bulk to a
:class:`CompactTable`: parallel numpy arrays (open addressing, linear probing; 8 bytes key, 8 bytes
value, 4 bytes spout task, 1 byte rotation generation, 1 byte flags — 22 bytes a slot, 31–45 bytes
per pending tree at the load factors used, where a Python dict entry with int objects costs ~175),
updated in vectorized batches.

:class:`ReferenceAcker` is the same algorithm as a plain dict, one message at a time; tests run both
against each other.

Root ids and values are unsigned 64-bit. The transfer drops anything else from the network before
it gets here (:mod:`gale.worker.wire`); should an out-of-range integer reach a table anyway, it is
dropped and counted (``invalid``): an ack value or spout task as the young dict takes the message
(compiled, that check is the conversion to the entry's C field, which costs nothing more), a root
where it enters the numpy arrays.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import chain

import cython
import numpy as np

# message kinds (first element of an acker message tuple)
INIT = 0
ACK = 1
FAIL = 2
RESET = 3

# outcome kinds reported back to spout tasks
ACKED = 1
FAILED = 2
RESET_TIMEOUT = 3
#: not an outcome: a control message for a spout task (``(CONTROL, payload)`` on its queue, carried
#: between workers as a CONTROLS group; ``gale.worker.runtime.control``)
CONTROL = 8

EMPTY = np.uint64(0)
TOMBSTONE = np.uint64(1)
_FAILED_BIT = np.uint8(1)
_RESET_BIT = np.uint8(2)
ROTATIONS_KEPT = 3  # Storm's acker keeps 3 buckets

#: a young dict entry's bytes: the tree, its root's int and the dict's slots (tracemalloc, 64-bit
#: CPython 3.11, 8,000 entries: 131 compiled, where a tree's fields are C; 190 as Python, where its
#: value is an int object too). A small young dict costs more an entry (185 and 244 at 1,000)
YOUNG_ENTRY_BYTES = 130 if cython.compiled else 190

_MASK64 = (1 << 64) - 1
_MAX_SPOUT_TASK = (1 << 32) - 1
_NUMPY_ERRORS = (OverflowError, TypeError, ValueError)


def _in_range(m: tuple) -> bool:
    """A message whose root, value and spout task fit the compact table's arrays."""
    _, root, val, task = m
    return (type(root) is int and 0 <= root <= _MASK64 and type(val) is int and 0 <= val <= _MASK64
            and type(task) is int and 0 <= task <= _MAX_SPOUT_TASK)


def _load_malloc_trim():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _load_malloc_trim()


def _mix(keys: np.ndarray) -> np.ndarray:
    """A cheap 64-bit mixer (keys are random already; this guards against patterned ids)."""
    x = keys ^ (keys >> np.uint64(31))
    x = x * np.uint64(0x9E3779B97F4A7C15)
    return x ^ (x >> np.uint64(29))


class CompactTable:
    """Long-lived pending trees in parallel numpy arrays. Feed batches to :meth:`apply`.

    Messages are 4-tuples ``(kind, root, val, spout_task)``: ``(INIT, root, val, task)``,
    ``(ACK, root, val, 0)``, ``(FAIL, root, 0, 0)``, ``(RESET, root, 0, 0)``. Root ids are random
    64-bit integers other than 0 and 1.
    """

    def __init__(self, capacity: int = 1024, max_load: float = 0.7):
        self.max_load = max_load
        self._alloc(max(1, int(capacity)))
        self.generation = 0
        self.invalid = 0  # messages dropped for a root, value or spout task outside the arrays' range

    def _alloc(self, cap: int) -> None:
        self.capacity = cap
        self._cap64 = np.uint64(cap)
        self.keys = np.zeros(cap, dtype=np.uint64)
        self.vals = np.zeros(cap, dtype=np.uint64)
        self.spout = np.zeros(cap, dtype=np.uint32)
        self.gen = np.zeros(cap, dtype=np.uint8)
        self.flags = np.zeros(cap, dtype=np.uint8)
        self.live = 0
        self.used = 0  # live + tombstones

    def __len__(self) -> int:
        return self.live

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.vals.nbytes + self.spout.nbytes + self.gen.nbytes + self.flags.nbytes

    # ------------------------------------------------------------------ lookup / insert

    def _find(self, keys: np.ndarray, insert: bool) -> np.ndarray:
        """Slot index of each distinct key; missing keys get -1, or a fresh slot when ``insert``."""
        n = keys.shape[0]
        pos = (_mix(keys) % self._cap64).astype(np.int64)
        slots = np.full(n, -1, dtype=np.int64)
        first_free = np.full(n, -1, dtype=np.int64)
        todo = np.arange(n)
        cap = self.capacity
        while todo.size:
            p = pos[todo]
            k = self.keys[p]
            hit = k == keys[todo]
            slots[todo[hit]] = p[hit]
            tomb = (k == TOMBSTONE) & (first_free[todo] < 0)
            first_free[todo[tomb]] = p[tomb]
            empty = k == EMPTY
            ended = todo[empty]
            # reached an empty slot: the key is absent; remember where it could go
            nofree = first_free[ended] < 0
            first_free[ended[nofree]] = p[empty][nofree]
            cont = ~(hit | empty)
            todo = todo[cont]
            pos[todo] = (p[cont] + 1) % cap
        if not insert:
            return slots
        missing = np.nonzero(slots < 0)[0]
        if missing.size:
            self._claim(keys, slots, missing, first_free[missing])
        return slots

    def _claim(self, keys: np.ndarray, slots: np.ndarray, missing: np.ndarray, want: np.ndarray) -> None:
        """Place absent keys at their first free slot (empty or tombstone) along their probe path.

        Two keys wanting the same slot: the first wins, the other probes on. Every slot a key
        skips is occupied, so lookups (which stop only at an empty slot) still find it.
        """
        cap = self.capacity
        while missing.size:
            while True:
                k = self.keys[want]
                busy = (k != EMPTY) & (k != TOMBSTONE)
                if not busy.any():
                    break
                want = np.where(busy, (want + 1) % cap, want)
            order = np.argsort(want, kind="stable")
            ordered = want[order]
            first = np.ones(ordered.size, dtype=bool)
            first[1:] = ordered[1:] != ordered[:-1]
            win, lose = order[first], order[~first]
            idx, where = missing[win], want[win]
            fresh = int(np.count_nonzero(self.keys[where] == EMPTY))
            self.keys[where] = keys[idx]
            self.vals[where] = EMPTY
            self.spout[where] = 0
            self.gen[where] = self.generation & 0xFF
            self.flags[where] = 0
            slots[idx] = where
            self.live += int(idx.size)
            self.used += fresh
            missing, want = missing[lose], want[lose]

    # ------------------------------------------------------------------ batch application

    def apply(self, messages: Sequence[tuple]) -> list[tuple[int, int, int]]:
        """Apply a batch of acker messages; return ``(spout_task, outcome, root)`` notifications.

        Within a batch the outcome equals applying the messages one at a time, except that a tree
        both failed and completed in one batch is reported failed (a failure anywhere wins).
        """
        if not messages:
            return []
        try:
            cols = np.fromiter(chain.from_iterable(messages), dtype=np.uint64, count=4 * len(messages))
        except _NUMPY_ERRORS:
            valid = [m for m in messages if _in_range(m)]
            self.invalid += len(messages) - len(valid)
            if not valid:
                return []
            messages = valid
            cols = np.fromiter(chain.from_iterable(messages), dtype=np.uint64, count=4 * len(messages))
        n = len(messages)
        cols = cols.reshape(n, 4)
        if self.used + n > self.capacity * self.max_load:
            self._rebuild(self.live + n)
        kinds = cols[:, 0].astype(np.uint8)
        roots = cols[:, 1]
        vals = cols[:, 2]
        uniq, inverse = np.unique(roots, return_inverse=True)
        slots_u = self._find(uniq, insert=True)
        slots = slots_u[inverse]
        # XOR every value into its slot (np.bitwise_xor.at handles repeated slots)
        np.bitwise_xor.at(self.vals, slots, vals)
        is_init = kinds == INIT
        if is_init.any():
            self.spout[slots[is_init]] = cols[is_init, 3].astype(np.uint32)
        is_fail = kinds == FAIL
        if is_fail.any():
            self.flags[slots[is_fail]] |= _FAILED_BIT
            self.gen[slots[is_fail]] = self.generation & 0xFF
        is_reset = kinds == RESET
        if is_reset.any():
            self.flags[slots[is_reset]] |= _RESET_BIT
            self.gen[slots[is_reset]] = self.generation & 0xFF
        # decide the touched entries
        su = slots_u
        known = self.spout[su] != 0
        failed = known & ((self.flags[su] & _FAILED_BIT) != 0)
        done = known & ~failed & (self.vals[su] == EMPTY)
        reset = known & ~failed & ~done & ((self.flags[su] & _RESET_BIT) != 0)
        out: list[tuple[int, int, int]] = []
        if done.any():
            s = su[done]
            out.extend(zip(self.spout[s].tolist(), [ACKED] * s.size, self.keys[s].tolist()))
            self._remove(s)
        if failed.any():
            s = su[failed]
            out.extend(zip(self.spout[s].tolist(), [FAILED] * s.size, self.keys[s].tolist()))
            self._remove(s)
        if reset.any():
            s = su[reset]
            out.extend(zip(self.spout[s].tolist(), [RESET_TIMEOUT] * s.size, self.keys[s].tolist()))
        if is_reset.any():
            # a reset is reported in the batch it arrives in, or not at all (spout task unknown)
            self.flags[slots[is_reset]] &= ~_RESET_BIT
        return out

    def _remove(self, slots: np.ndarray) -> None:
        self.keys[slots] = TOMBSTONE
        self.vals[slots] = EMPTY
        self.spout[slots] = 0
        self.flags[slots] = 0
        self.live -= int(slots.size)

    def _rebuild(self, needed: int) -> None:
        """Re-insert the live entries into a table sized for ``needed`` (drops tombstones).

        The new table is about half full (``needed`` fills ``max_load × 0.7`` of it; any size, not
        a power of two, so a table that just grew does not sit at a quarter full): 22 / 0.49 ≈ 45
        bytes per entry right after growing, ≈ 31 at ``max_load``."""
        cap = max(1024, -(-int(needed / (self.max_load * 0.7)) // 1024) * 1024)
        live = self.keys > TOMBSTONE
        keys, vals, spout = self.keys[live], self.vals[live], self.spout[live]
        gen, flags = self.gen[live], self.flags[live]
        self._alloc(cap)
        if keys.size:
            slots = self._find(keys, insert=True)
            self.vals[slots] = vals
            self.spout[slots] = spout
            self.gen[slots] = gen
            self.flags[slots] = flags
        del keys, vals, spout, gen, flags, live
        if _malloc_trim is not None and cap >= 1 << 16:
            # the old arrays may have come from the heap (glibc's adaptive mmap threshold): give the
            # freed pages back, so a table that grew or shrank does not keep its old footprint
            _malloc_trim(0)

    # ------------------------------------------------------------------ timeouts

    def rotate(self) -> int:
        """One timeout tick on its own: advance the generation, then expire."""
        self.generation = (self.generation + 1) & 0xFF
        return self.rotate_expire()

    def rotate_expire(self) -> int:
        """Drop entries untouched for ``ROTATIONS_KEPT`` rotations. Returns count."""
        live = self.keys > TOMBSTONE
        age = (np.uint8(self.generation) - self.gen) & np.uint8(0xFF)
        expired = np.nonzero(live & (age >= ROTATIONS_KEPT))[0]
        if expired.size:
            self._remove(expired)
        if (self.used - self.live) > self.capacity // 4:
            self._rebuild(self.live)
        return int(expired.size)

    def pending(self, root: int) -> tuple[int, int] | None:
        """(value, spout task) of a pending root, for tests and debugging."""
        s = self._find(np.array([root], dtype=np.uint64), insert=False)[0]
        if s < 0:
            return None
        return int(self.vals[s]), int(self.spout[s])

    def contains(self, roots: np.ndarray) -> np.ndarray:
        """Boolean mask: which of the distinct ``roots`` are pending here."""
        if not self.live:
            return np.zeros(roots.shape[0], dtype=bool)
        return self._find(roots, insert=False) >= 0

    def insert(self, keys: list[int], vals: list[int], spout: list[int], gen: list[int], failed: list[bool]) -> None:
        """Add entries that are not present yet (bulk, vectorized)."""
        if not keys:
            return
        try:  # every conversion before any change: a value that does not fit leaves the table as it was
            k, v, sp = np.array(keys, dtype=np.uint64), np.array(vals, dtype=np.uint64), np.array(spout, dtype=np.uint32)
        except _NUMPY_ERRORS:
            keep = [i for i, m in enumerate(zip(keys, keys, vals, spout)) if _in_range(m)]
            self.invalid += len(keys) - len(keep)
            keys, vals, spout = [keys[i] for i in keep], [vals[i] for i in keep], [spout[i] for i in keep]
            gen, failed = [gen[i] for i in keep], [failed[i] for i in keep]
            if not keys:
                return
            k, v, sp = np.array(keys, dtype=np.uint64), np.array(vals, dtype=np.uint64), np.array(spout, dtype=np.uint32)
        n = len(keys)
        if self.used + n > self.capacity * self.max_load:
            self._rebuild(self.live + n)
        slots = self._find(k, insert=True)
        self.vals[slots] = v
        self.spout[slots] = sp
        self.gen[slots] = np.array(gen, dtype=np.int64).astype(np.uint8)
        self.flags[slots] = np.where(np.array(failed, dtype=bool), _FAILED_BIT, np.uint8(0))


@cython.cclass
class _Tree:
    """A young tree of :class:`AckerTable`: the XOR of its ids so far, its spout task (0 until its
    INIT), whether it failed, and the rotation it was last touched in. Compiled, these are C fields:
    an XOR makes no int object, and the entry is one small allocation the garbage collector does
    not track (a list entry was three allocations, tracked)."""

    __slots__ = ("val", "task", "failed", "gen")

    def __init__(self) -> None:
        self.val = 0
        self.task = 0
        self.failed = False
        self.gen = 0


@cython.cfunc
@cython.inline
def _u64(x: object) -> cython.ulonglong:
    """``x`` as an unsigned 64-bit integer; OverflowError or TypeError when it is not one (an
    integer type by ``__index__``, never a float: the C conversion alone would truncate one)."""
    if type(x) is not int:
        x = operator.index(x)
    if not cython.compiled and not 0 <= x <= _MASK64:  # compiled: the conversion raises
        raise OverflowError("outside unsigned 64 bits")
    return x


class AckerTable:
    """Pending tuple trees of one acker task: a young generation in a dict, the rest compact.

    Most trees complete within milliseconds, in the batch that created them or the next, so
    messages are first applied one at a time to a small dict of recent trees (the exact per-message
    semantics of :class:`ReferenceAcker`; compiled, about 0.1 µs a message), each a :class:`_Tree`.
    Trees that outlive a rotation, or the oldest ones once the dict holds ``young_max`` entries,
    move in bulk to a :class:`CompactTable` (22 bytes a slot), where messages for them are applied
    in vectorized batches. A root is in exactly one of the two. Memory stays under 64 bytes per
    pending tree from about 100,000 pending (53 bytes there, 38 at a million;
    ``benchmarks/bench_peers.py`` prints it); below, the young dict's up to ``young_max`` entries
    dominate.

    Messages are 4-tuples ``(kind, root, val, spout_task)``: ``(INIT, root, val, task)``,
    ``(ACK, root, val, 0)``, ``(FAIL, root, 0, 0)``, ``(RESET, root, 0, 0)``.
    """

    def __init__(self, capacity: int = 1024, young_max: int = 8192):
        self.young: dict[int, _Tree] = {}
        self.old = CompactTable(capacity)
        self.young_max = young_max
        self.generation = 0
        self._invalid = 0
        #: roots in the compact table whose INIT has not arrived (their acks came first). Any other
        #: INIT for a root not in the young dict is a new tree: it goes to the young dict without a
        #: lookup in the compact table, which costs a numpy call per batch whatever the batch's size
        self._orphans: set[int] = set()

    @property
    def invalid(self) -> int:
        """Messages and trees dropped for a root, value or spout task outside unsigned 64/32 bits."""
        return self._invalid + self.old.invalid

    def __len__(self) -> int:
        return len(self.young) + len(self.old)

    @property
    def nbytes(self) -> int:
        """Compact arrays plus an estimate of the young dict (:data:`YOUNG_ENTRY_BYTES` an entry)."""
        return self.old.nbytes + YOUNG_ENTRY_BYTES * len(self.young)

    def pending(self, root: int) -> tuple[int, int] | None:
        e = self.young.get(root)
        if e is not None:
            return e.val, e.task
        return self.old.pending(root)

    def apply(self, messages: Sequence[tuple]) -> list[tuple[int, int, int]]:
        """Apply a batch; return ``(spout_task, outcome, root)`` notifications."""
        if self.old.live:
            young, orphans = self.young, self._orphans
            fresh, deferred = [], []
            for m in messages:
                root = m[1]
                if root in young or (m[0] == INIT and root not in orphans):
                    fresh.append(m)
                else:
                    deferred.append(m)
            out = self._apply_young(fresh) if fresh else []
            if deferred:
                roots = sorted({m[1] for m in deferred})
                try:
                    keys = np.array(roots, dtype=np.uint64)
                except _NUMPY_ERRORS:
                    valid = [m for m in deferred if _in_range(m)]
                    self._invalid += len(deferred) - len(valid)
                    deferred = valid
                    roots = sorted({m[1] for m in deferred})
                    keys = np.array(roots, dtype=np.uint64)
                found = self.old.contains(keys)
                in_old = {r for r, f in zip(roots, found.tolist()) if f}
                old_msgs = [m for m in deferred if m[1] in in_old]
                if old_msgs:
                    out.extend(self.old.apply(old_msgs))
                    if orphans:
                        orphans.difference_update([m[1] for m in old_msgs if m[0] == INIT])
                if len(old_msgs) < len(deferred):
                    out.extend(self._apply_young([m for m in deferred if m[1] not in in_old]))
        else:
            out = self._apply_young(messages)
        if len(self.young) > self.young_max:
            self._migrate(len(self.young) - self.young_max // 2)
        return out

    def _apply_young(self, messages: Sequence[tuple]) -> list[tuple[int, int, int]]:
        young: dict = self.young  # typed: its get, set and del are C calls, not method lookups
        gen: cython.int = self.generation
        out: list = []
        e: _Tree
        v: cython.ulonglong
        t: cython.ulonglong
        # the kinds as C ints for the batch: each message's kind is compared in C, not as int objects
        k: cython.int
        k_init: cython.int = INIT
        k_ack: cython.int = ACK
        k_fail: cython.int = FAIL
        k_reset: cython.int = RESET
        for kind, root, val, task in messages:
            try:
                # an int, or an integer type by __index__ (never a float: C would truncate one)
                k = kind if type(kind) is int else operator.index(kind)
                v = _u64(val) if k == k_ack or k == k_init else 0
                t = _u64(task) if k == k_init else 0
            except (OverflowError, TypeError):
                self._invalid += 1  # never from this worker's own code, nor past the wire's checks
                continue
            found = young.get(root)
            if found is None:  # a new tree
                e = _Tree.__new__(_Tree) if cython.compiled else _Tree()  # compiled: C fields start at 0
                e.gen = gen
                young[root] = e
            else:
                e = found
            if k == k_ack:
                e.val ^= v
            elif k == k_init:
                e.val ^= v
                e.task = t
            elif k == k_fail:
                e.failed = True
                e.gen = gen
            else:  # RESET
                e.gen = gen
            if e.task:
                if e.failed:
                    out.append((e.task, FAILED, root))
                    del young[root]
                elif e.val == 0:
                    out.append((e.task, ACKED, root))
                    del young[root]
                elif k == k_reset:
                    out.append((e.task, RESET_TIMEOUT, root))
        return out

    def _migrate(self, n: int) -> None:
        """Move the ``n`` oldest young entries (dict order is insertion order) to the compact table."""
        young = self.young
        roots = []
        for root in young:
            roots.append(root)
            if len(roots) >= n:
                break
        entries = [young.pop(r) for r in roots]
        self._orphans.update(r for r, e in zip(roots, entries) if not e.task)
        self.old.insert(roots, [e.val for e in entries], [e.task for e in entries], [e.gen for e in entries],
                        [e.failed for e in entries])

    def rotate(self) -> int:
        """One timeout tick: young trees that lived through it move to the compact table; compact
        entries untouched for ``ROTATIONS_KEPT`` rotations are dropped. Returns how many."""
        self.generation = (self.generation + 1) & 0xFF
        self.old.generation = self.generation
        if self.young:
            self._migrate(len(self.young))
        expired = self.old.rotate_expire()
        if self._orphans:  # forget the orphans that expired (a root outside 64 bits never got in)
            roots = sorted(r for r in self._orphans if _in_range((0, r, 0, 0)))
            found = self.old.contains(np.array(roots, dtype=np.uint64)).tolist() if roots else []
            self._orphans = {r for r, f in zip(roots, found) if f}
        return expired


class ReferenceAcker:
    """The acker algorithm with a dict, one message at a time (the test oracle)."""

    def __init__(self) -> None:
        self.entries: dict[int, list] = {}  # root -> [val, spout_task, failed, generation]
        self.generation = 0

    def __len__(self) -> int:
        return len(self.entries)

    def apply(self, messages: Sequence[tuple]) -> list[tuple[int, int, int]]:
        out = []
        for m in messages:
            kind, root = m[0], m[1]
            e = self.entries.get(root)
            if e is None:
                e = self.entries[root] = [0, 0, False, self.generation]
            if kind == INIT:
                e[0] ^= m[2]
                e[1] = m[3]
            elif kind == ACK:
                e[0] ^= m[2]
            elif kind == FAIL:
                e[2] = True
                e[3] = self.generation
            elif kind == RESET:
                e[3] = self.generation
            if e[1]:
                if e[2]:
                    out.append((e[1], FAILED, root))
                    del self.entries[root]
                elif e[0] == 0:
                    out.append((e[1], ACKED, root))
                    del self.entries[root]
                elif kind == RESET:
                    out.append((e[1], RESET_TIMEOUT, root))
        return out

    def rotate(self) -> int:
        self.generation += 1
        dead = [r for r, e in self.entries.items() if self.generation - e[3] >= ROTATIONS_KEPT]
        for r in dead:
            del self.entries[r]
        return len(dead)
