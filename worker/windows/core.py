"""Pure window cores: tuples and watermarks in, actions out (no I/O, no clock).

Each core takes :class:`~.store.Entry` objects (``add``) and watermarks (``advance``) and returns a
list of actions for the shell to perform in order:

* :class:`Fire` — run ``execute(window)`` on these entries (emits anchored to all of them); an
  update (a late tuple within the allowed lateness changed a window that fired) carries in
  ``replaces`` the bounds of the results it supersedes;
* :class:`Expire` — these entries left the last window they belong to: ack them (always after the
  firings that used them);
* :class:`Late` — this entry arrived too late for any window: emit it on the late-tuple stream (if
  any) and ack it, and count it. A late tuple is never silently dropped (STORM-1859).

The rules (``docs/windows.md``):

* **Time windows** (:class:`TimeWindows`, tumbling when ``slide == length``): the windows are
  ``[s, s + length)`` for every multiple ``s`` of ``slide``; a tuple with timestamp ``ts`` belongs to
  every one of them that contains ``ts`` (``length / slide`` of them when the length is a multiple).
  The window is start-inclusive and end-exclusive: a timestamp exactly on an edge ``B`` is in the
  window starting at ``B``, not in the one ending there (Storm's windows are ``(end - length, end]``:
  ``docs/storm-model.md`` §12).
  A window fires once the watermark ``W`` reaches its end (``end <= W``) if it holds any tuple. A tuple
  is *late* when ``ts < W - allowed_lateness``; one with ``W - allowed_lateness <= ts < W`` is kept and
  fires again, as an update, every window of it that already fired. A window is dropped once
  ``end <= W - allowed_lateness``; a tuple expires when its last window is dropped. Panes of
  ``gcd(length, slide)`` ms index the tuples, so overlapping windows share them and none is lost
  between windows (STORM-2489).
* **Session windows** (:class:`SessionWindows`): per key, a tuple opens ``[ts, ts + gap)``; sessions
  whose intervals overlap merge. Firing, lateness, updates and expiry as for time windows, with the
  session's ``[first ts, last ts + gap)`` as its bounds. A late tuple can extend a session that fired,
  or merge several: the update's ``replaces`` lists the bounds of every session of that key that
  fired and that it supersedes (a time window's update: its own bounds), so a sink can delete those
  rows. A session's superseded bounds are those of the chains of its fired tuples (tuples less than
  ``gap`` apart), so a core restored from its store derives them from the fired tuples it records.
* **Count windows** (:class:`CountWindows`): every ``slide`` tuples, the last ``length`` tuples; in
  arrival order (processing time), or in timestamp order as the watermark passes them (event time:
  a tuple with ``ts < W`` is late). Tuples that no future window can contain expire after a firing.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from math import gcd
from typing import Any

from gale.worker.windows.store import Entry, InMemoryWindowStore, WindowStore

#: a watermark beyond every timestamp: ``advance(FOREVER)`` fires and expires everything
FOREVER = 2**62


class Fire:
    """A window to run ``execute(window)`` on. ``replaces``: for an update, the ``(start, end)`` of
    every earlier result of this window (same key) it supersedes — a time window's own bounds; for a
    session, those of each session that fired and that the late tuple extended or merged into this
    one —, by start; empty for a first firing (``update`` is ``bool(replaces)``)."""

    __slots__ = ("start", "end", "key", "entries", "new", "expired", "update", "replaces")

    def __init__(self, start: int, end: int, entries: list[Entry], new: list[Entry], expired: list[Entry],
                 update: bool = False, key: Any = None, replaces: list[tuple[int, int]] | None = None):
        self.start = start
        self.end = end
        self.key = key
        self.entries = entries
        self.new = new
        self.expired = expired
        self.update = update
        self.replaces: list[tuple[int, int]] = replaces if replaces is not None else []

    def __repr__(self) -> str:
        u = f" update of {self.replaces}" if self.update else ""
        return f"Fire{u}([{self.start}, {self.end}) key={self.key!r} {[e.seq for e in self.entries]})"


class Expire:
    __slots__ = ("entries",)

    def __init__(self, entries: list[Entry]):
        self.entries = entries

    def __repr__(self) -> str:
        return f"Expire({[e.seq for e in self.entries]})"


class Late:
    __slots__ = ("entry",)

    def __init__(self, entry: Entry):
        self.entry = entry

    def __repr__(self) -> str:
        return f"Late({self.entry.seq})"


def _order(e: Entry) -> tuple[int, int]:
    return (e.ts, e.seq)


def _diff(a: list[Entry], b: list[Entry]) -> list[Entry]:
    """Entries of ``a`` not in ``b`` (by arrival ordinal), in ``a``'s order."""
    seqs = {e.seq for e in b}
    return [e for e in a if e.seq not in seqs]


class _Core:
    def __init__(self, store: WindowStore | None):
        self.store: WindowStore = store if store is not None else InMemoryWindowStore()
        #: the watermark: no more tuples with a smaller timestamp are expected (None: none yet)
        self.watermark: int | None = None
        self._prev: list[Entry] = []  # the last in-order firing's entries (get_new/get_expired)
        #: entries that left every window but are in ``_prev``: kept in the store until the next
        #: in-order firing, so that a core restored from the store gives that firing's
        #: ``get_expired()`` in full
        self._retained: list[Entry] = []

    def __len__(self) -> int:
        """Entries buffered for windows to come (the retained ones are not)."""
        return len(self.store) - len(self._retained)

    def buffered(self) -> list[Entry]:
        """The stored entries that are buffered for windows to come (not the retained ones)."""
        entries = self.store.entries()
        if not self._retained:
            return entries
        retained = {e.seq for e in self._retained}
        return [e for e in entries if e.seq not in retained]

    def _remove(self, gone: list[Entry]) -> None:
        """``gone`` left every window: out of the store, but for those of the previous window."""
        if self._prev:
            prev = {e.seq for e in self._prev}
            keep = [e for e in gone if e.seq in prev]
            if keep:
                self._retained.extend(keep)
                gone = [e for e in gone if e.seq not in prev]
        if gone:
            self.store.remove(gone)

    def _new_prev(self, window: list[Entry]) -> None:
        """An in-order firing: ``window`` is now the previous window; no retained entry is in it
        (they left every window), so they leave the store."""
        self._prev = window
        if self._retained:
            self.store.remove(self._retained)
            self._retained = []

    def _restore_prev(self, meta: dict[str, Any], entries: list[Entry]) -> set[int]:
        """``_prev`` and ``_retained`` from the metadata over the stored ``entries``; returns the
        retained arrival ordinals (not in any window's index)."""
        by_seq = {e.seq: e for e in entries}
        retained = {int(q) for q in meta.get("retained", [])}
        self._retained = [by_seq[q] for q in sorted(retained) if q in by_seq]
        self._prev = [by_seq[q] for q in meta.get("prev", []) if q in by_seq]
        return retained

    def flush(self) -> list[Any]:
        """End of input: fire and expire everything (tests; a bounded stream's end)."""
        return self.advance(FOREVER)

    def add(self, entry: Entry) -> list[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def advance(self, watermark: int) -> list[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def restore(self) -> None:  # pragma: no cover - abstract
        """Rebuild this (new) core's indexes from its store's entries and metadata: a task restarted
        on a store that survived (managed state) continues where the store's snapshot left off."""
        raise NotImplementedError

    def next_seq(self) -> int:
        """The arrival ordinal to give the next entry (after a restore: above every stored one)."""
        return max((e.seq for e in self.store.entries()), default=-1) + 1


class TimeWindows(_Core):
    """Duration windows (tumbling or sliding) over timestamps; see the module docstring."""

    def __init__(self, length: int, slide: int, allowed_lateness: int = 0, store: WindowStore | None = None):
        super().__init__(store)
        if length < 1 or slide < 1 or slide > length:
            raise ValueError(f"need 1 <= slide <= length, got length {length}, slide {slide}")
        self.length = length
        self.slide = slide
        self.allowed_lateness = allowed_lateness
        self.pane = gcd(length, slide)
        #: pane start → its entries (arrival order)
        self.panes: dict[int, list[Entry]] = {}
        #: window start → the highest arrival ordinal it held when it last fired
        self.fired: dict[int, int] = {}
        self._last_end: int | None = None
        self._meta: dict[str, Any] | None = None

    def window_starts(self, ts: int) -> list[int]:
        """Starts of the windows containing ``ts``, oldest first."""
        last = ts - ts % self.slide
        first = last
        while first - self.slide > ts - self.length:
            first -= self.slide
        return list(range(first, last + 1, self.slide))

    def add(self, entry: Entry) -> list[Any]:
        w = self.watermark
        ts = entry.ts
        if w is not None and ts < w - self.allowed_lateness:
            return [Late(entry)]
        self.store.put(entry)
        p = ts - ts % self.pane
        pane = self.panes.get(p)
        if pane is None:
            self.panes[p] = [entry]
        else:
            pane.append(entry)
        if w is not None and ts < w:  # within the allowed lateness: its due windows fire (again)
            fires = [self._fire(s) for s in self.window_starts(ts) if s + self.length <= w]
            if fires:
                self._save()
            return fires
        return []

    def _save(self, changed: bool = True) -> None:
        """Metadata to the store; the fired windows and the previous window only when they changed."""
        if changed or self._meta is None:
            self._meta = {"fired": sorted(self.fired.items()), "prev": [e.seq for e in self._prev],
                          "retained": [e.seq for e in self._retained], "last_end": self._last_end}
        self.store.set_meta({"watermark": self.watermark, **self._meta})

    def restore(self) -> None:
        meta = self.store.meta()
        entries = sorted(self.store.entries(), key=lambda e: e.seq)
        retained = self._restore_prev(meta, entries)
        self.panes = {}
        for e in entries:
            if e.seq not in retained:
                self.panes.setdefault(e.ts - e.ts % self.pane, []).append(e)
        self.watermark = meta.get("watermark")
        self.fired = {int(s): int(q) for s, q in meta.get("fired", [])}
        self._last_end = meta.get("last_end")

    def _entries(self, start: int) -> list[Entry]:
        end = start + self.length
        out: list[Entry] = []
        if self.length // self.pane <= len(self.panes):
            get = self.panes.get
            for p in range(start, end, self.pane):
                pane = get(p)
                if pane:
                    out.extend(pane)
        else:
            for p, pane in self.panes.items():
                if start <= p < end:
                    out.extend(pane)
        out.sort(key=_order)
        return out

    def _fire(self, start: int) -> Fire:
        entries = self._entries(start)
        end = start + self.length
        last = self.fired.get(start)
        self.fired[start] = max(e.seq for e in entries)
        if last is not None:
            return Fire(start, end, entries, [e for e in entries if e.seq > last], [], update=True,
                        replaces=[(start, end)])
        if self._last_end is not None and end <= self._last_end:  # a window firing out of order
            return Fire(start, end, entries, entries, [])
        new, expired = _diff(entries, self._prev), _diff(self._prev, entries)
        self._new_prev(entries)
        self._last_end = end
        return Fire(start, end, entries, new, expired)

    def advance(self, watermark: int) -> list[Any]:
        if self.watermark is not None and watermark <= self.watermark:
            return []
        # windows ending at or before the last cutoff were due before: fired then (or empty), and dropped
        done = -FOREVER if self.watermark is None else self.watermark - self.allowed_lateness
        self.watermark = watermark
        length, slide = self.length, self.slide
        due: set[int] = set()
        fired = self.fired
        for p in self.panes:
            s = p - p % slide
            while s + length > p:
                if done < s + length <= watermark and s not in fired:
                    due.add(s)
                s -= slide
        actions: list[Any] = [self._fire(s) for s in sorted(due)]
        cutoff = watermark - self.allowed_lateness
        dropped = [s for s in fired if s + length <= cutoff]
        for s in dropped:
            del fired[s]
        gone = [p for p in self.panes if p - p % slide + length <= cutoff]
        if gone:
            expired: list[Entry] = []
            for p in sorted(gone):
                expired.extend(self.panes.pop(p))
            self._remove(expired)
            actions.append(Expire(expired))
        self._save(changed=bool(due or dropped or gone))
        return actions


class _Session:
    __slots__ = ("key", "start", "end", "entries", "fired", "fired_bounds")

    def __init__(self, key: Any, start: int, end: int, entries: list[Entry], fired: set[int],
                 fired_bounds: list[tuple[int, int]]):
        self.key = key
        self.start = start
        self.end = end
        self.entries = entries
        self.fired = fired  # arrival ordinals already fired in this session (or a merged one)
        #: the bounds of the sessions that fired with those tuples and were not superseded since:
        #: what the next firing of this session replaces
        self.fired_bounds = fired_bounds


def _chains(entries: list[Entry], gap: int) -> list[list[Entry]]:
    """``entries`` (sorted by timestamp) cut wherever the next one is ``gap`` or more after the
    previous: the sessions they form by themselves."""
    out: list[list[Entry]] = []
    for e in entries:
        if out and e.ts < out[-1][-1].ts + gap:
            out[-1].append(e)
        else:
            out.append([e])
    return out


class SessionWindows(_Core):
    """Gap-based session windows per key, merging; see the module docstring."""

    def __init__(self, gap: int, allowed_lateness: int = 0, store: WindowStore | None = None):
        super().__init__(store)
        if gap < 1:
            raise ValueError(f"session gap must be >= 1, got {gap}")
        self.gap = gap
        self.allowed_lateness = allowed_lateness
        self.sessions: dict[Any, list[_Session]] = {}
        self._fired_meta: list[int] | None = None

    def add(self, entry: Entry) -> list[Any]:
        w = self.watermark
        ts = entry.ts
        if w is not None and ts < w - self.allowed_lateness:
            return [Late(entry)]
        self.store.put(entry)
        start, end = ts, ts + self.gap
        sessions = self.sessions.setdefault(entry.key, [])
        entries = [entry]
        fired: set[int] = set()
        bounds: list[tuple[int, int]] = []
        keep = []
        for s in sessions:
            if s.start < end and start < s.end:
                start = min(start, s.start)
                end = max(end, s.end)
                entries.extend(s.entries)
                fired |= s.fired
                bounds.extend(s.fired_bounds)
            else:
                keep.append(s)
        session = _Session(entry.key, start, end, entries, fired, sorted(bounds))
        keep.append(session)
        self.sessions[entry.key] = keep
        if w is not None and end <= w:  # within the allowed lateness, in a due session
            fire = self._fire(session)
            self._save()
            return [fire]
        return []

    def _save(self, changed: bool = True) -> None:
        """Metadata to the store; the fired tuples only when they changed."""
        if changed or self._fired_meta is None:
            self._fired_meta = sorted(q for ss in self.sessions.values() for s in ss for q in s.fired)
        self.store.set_meta({"watermark": self.watermark, "fired": self._fired_meta})

    def restore(self) -> None:
        meta = self.store.meta()
        self.watermark = meta.get("watermark")
        fired = set(meta.get("fired", []))
        by_key: dict[Any, list[Entry]] = {}
        for e in self.store.entries():
            by_key.setdefault(e.key, []).append(e)
        self.sessions = {}
        gap = self.gap
        for key, entries in by_key.items():
            entries.sort(key=_order)
            sessions: list[_Session] = []
            # the same sessions as merging one by one: overlapping intervals chained; and the sessions
            # that fired and were not superseded since: those of the fired tuples by themselves (each
            # fired whole, and two that fired apart never overlapped, or one firing would hold both)
            for chain in _chains(entries, gap):
                done = [e for e in chain if e.seq in fired]
                bounds = [(c[0].ts, c[-1].ts + gap) for c in _chains(done, gap)]
                sessions.append(_Session(key, chain[0].ts, chain[-1].ts + gap, chain, {e.seq for e in done}, bounds))
            self.sessions[key] = sessions

    def _fire(self, s: _Session) -> Fire:
        s.entries.sort(key=_order)
        update = bool(s.fired)
        new = [e for e in s.entries if e.seq not in s.fired] if update else list(s.entries)
        s.fired = {e.seq for e in s.entries}
        replaces, s.fired_bounds = s.fired_bounds, [(s.start, s.end)]
        return Fire(s.start, s.end, list(s.entries), new, [], update=update, key=s.key, replaces=replaces)

    def advance(self, watermark: int) -> list[Any]:
        if self.watermark is not None and watermark <= self.watermark:
            return []
        self.watermark = watermark
        due = [s for ss in self.sessions.values() for s in ss if s.end <= watermark and len(s.fired) != len(s.entries)]
        due.sort(key=lambda s: (s.end, s.start, repr(s.key)))  # the same order after a restore
        actions: list[Any] = [self._fire(s) for s in due]
        cutoff = watermark - self.allowed_lateness
        expired: list[Entry] = []
        for key in list(self.sessions):
            ss = self.sessions[key]
            keep = []
            for s in ss:
                if s.end <= cutoff:
                    expired.extend(s.entries)
                else:
                    keep.append(s)
            if keep:
                self.sessions[key] = keep
            else:
                del self.sessions[key]
        if expired:
            self.store.remove(expired)
            actions.append(Expire(expired))
        self._save(changed=bool(due or expired))
        return actions


class _Entering(_Core):
    """Shared by count windows and the mixed windows (:mod:`.mixed`): late check and release in timestamp order (event time) or at once (processing time)."""

    def __init__(self, length: int, slide: int, event_time: bool = False, store: WindowStore | None = None):
        super().__init__(store)
        if length < 1 or slide < 1:
            raise ValueError(f"need length >= 1 and slide >= 1, got length {length}, slide {slide}")
        self.length = length
        self.slide = slide
        self.event_time = event_time
        self.queue: deque[Entry] = deque()  # entered, in entering order, not yet expired
        self.pending: list[tuple[int, int, Entry]] = []
        self._prev_seqs: list[int] = []

    def add(self, entry: Entry) -> list[Any]:
        if self.event_time:
            w = self.watermark
            if w is not None and entry.ts < w:
                return [Late(entry)]
            self.store.put(entry)
            heapq.heappush(self.pending, (entry.ts, entry.seq, entry))
            return []
        self.store.put(entry)
        return self._enter(entry)

    def _release(self, watermark: int) -> list[Any]:
        actions: list[Any] = []
        pending = self.pending
        while pending and pending[0][0] < watermark:
            actions.extend(self._enter(heapq.heappop(pending)[2]))
        return actions

    def _enter(self, entry: Entry) -> list[Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _set_prev(self, window: list[Entry]) -> None:
        self._new_prev(window)
        self._prev_seqs = [e.seq for e in window]

    def _save(self) -> None:
        self.store.set_meta({"watermark": self.watermark, "prev": self._prev_seqs,
                             "retained": [e.seq for e in self._retained]})

    def _restore_queue(self) -> list[int]:
        meta = self.store.meta()
        w = self.watermark = meta.get("watermark")
        stored = self.store.entries()
        retained = self._restore_prev(meta, stored)
        entries = [e for e in stored if e.seq not in retained]
        if self.event_time:
            entered = sorted((e for e in entries if w is not None and e.ts < w), key=_order)
            self.pending = [(e.ts, e.seq, e) for e in entries if w is None or e.ts >= w]
            heapq.heapify(self.pending)
        else:
            entered = sorted(entries, key=lambda e: e.seq)
        self.queue = deque(entered)
        prev = meta.get("prev", [])
        self._prev_seqs = list(prev)
        return prev


class CountWindows(_Entering):
    """Count windows (tumbling when ``slide == length``); see the module docstring."""

    def __init__(self, length: int, slide: int, event_time: bool = False, store: WindowStore | None = None):
        super().__init__(length, slide, event_time, store)
        self.count = 0  # tuples entered so far

    def _enter(self, entry: Entry) -> list[Any]:
        queue = self.queue
        queue.append(entry)
        self.count += 1
        if self.count % self.slide:
            return []
        n = min(self.length, len(queue))
        entries = list(queue)[len(queue) - n:]
        new, expired = _diff(entries, self._prev), _diff(self._prev, entries)
        self._set_prev(entries)
        self._save()
        actions: list[Any] = [Fire(entries[0].ts, entries[-1].ts, entries, new, expired)]
        keep = max(0, self.length - self.slide)  # what the next window can still contain
        gone = [queue.popleft() for _ in range(len(queue) - keep)]
        if gone:
            self._remove(gone)
            self._save()
            actions.append(Expire(gone))
        return actions

    def advance(self, watermark: int) -> list[Any]:
        if self.watermark is not None and watermark <= self.watermark:
            return []
        self.watermark = watermark
        actions = self._release(watermark)
        self._save()
        return actions

    def restore(self) -> None:
        prev = set(self._restore_queue())
        # only what entered since the last firing counts towards the next one
        self.count = sum(1 for e in self.queue if e.seq not in prev)

    def flush(self) -> list[Any]:
        """Release every pending tuple; a partial window does not fire (Storm's count windows)."""
        return self.advance(FOREVER)


def entries_of(actions: Iterable[Any]) -> list[Entry]:
    """Every entry acked by ``actions`` (expired or late)."""
    out: list[Entry] = []
    for a in actions:
        if isinstance(a, Expire):
            out.extend(a.entries)
        elif isinstance(a, Late):
            out.append(a.entry)
    return out
