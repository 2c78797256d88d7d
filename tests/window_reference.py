"""Offline references for windows: every window recomputed from scratch over the tuples accepted so
far, after every input item (no panes, no incremental merging, no eviction).

items: ``("e", seq, ts, key)`` — a tuple arrives; ``("w", watermark)`` — the watermark advances.
Each function returns, per item, ``(firings, late seqs)`` with a firing
``(start, end, key, seqs by (ts, seq), is_update)``.
"""

from __future__ import annotations


def _windows_of(ts, length, slide):
    s = ts - ts % slide
    out = []
    while s + length > ts:
        out.append(s)
        s -= slide
    return out


def ref_time(length, slide, lateness, items):
    """Per step: (sorted firings, late seqs)."""
    w = None
    accepted: list[tuple[int, int]] = []
    emitted: dict[int, tuple] = {}
    steps = []
    for item in items:
        late = []
        if item[0] == "e":
            _, seq, ts, _key = item
            if w is not None and ts < w - lateness:
                steps.append(([], [seq]))
                continue
            accepted.append((ts, seq))
        elif w is None or item[1] > w:
            w = item[1]
        fires = []
        if w is not None:
            starts = {s for ts, _ in accepted for s in _windows_of(ts, length, slide)}
            for s in sorted(starts):
                if s + length > w:
                    continue
                content = tuple(seq for ts, seq in sorted(accepted) if s <= ts < s + length)
                if emitted.get(s) != content:
                    fires.append((s, s + length, None, content, s in emitted))
                    emitted[s] = content
        steps.append((sorted(fires), late))
    return steps


def _sessions(events, gap):
    """From-scratch sessions of one key's (ts, seq) list."""
    out = []
    for ts, seq in sorted(events):
        if out and ts < out[-1][1]:
            out[-1][1] = max(out[-1][1], ts + gap)
            out[-1][2].append((ts, seq))
        else:
            out.append([ts, ts + gap, [(ts, seq)]])
    return [(s, e, tuple(seq for _, seq in sorted(c))) for s, e, c in out]


def ref_session(gap, lateness, items):
    w = None
    accepted: dict = {}
    emitted: list[tuple] = []
    steps = []
    for item in items:
        if item[0] == "e":
            _, seq, ts, key = item
            if w is not None and ts < w - lateness:
                steps.append(([], [seq]))
                continue
            accepted.setdefault(key, []).append((ts, seq))
        elif w is None or item[1] > w:
            w = item[1]
        fires = []
        if w is not None:
            for key in sorted(accepted):
                for start, end, content in _sessions(accepted[key], gap):
                    if end > w or (key, start, end, content) in emitted:
                        continue
                    update = any(k == key and s < end and start < e for k, s, e, _ in emitted)
                    fires.append((start, end, key, content, update))
            emitted.extend((k, s, e, c) for s, e, k, c, _ in fires)
        steps.append((sorted(fires, key=repr), []))
    return steps


def ref_count(length, slide, event_time, items):
    w = None
    window_seq: list[tuple[int, int]] = []  # tuples in window order
    pending: list[tuple[int, int]] = []
    steps = []
    for item in items:
        entered = []
        late = []
        if item[0] == "e":
            _, seq, ts, _key = item
            if event_time:
                if w is not None and ts < w:
                    late.append(seq)
                else:
                    pending.append((ts, seq))
            else:
                entered.append((ts, seq))
        elif w is None or item[1] > w:
            w = item[1]
            if event_time:
                entered = sorted(p for p in pending if p[0] < w)
                pending = [p for p in pending if p[0] >= w]
        fires = []
        for t in entered:
            window_seq.append(t)
            if len(window_seq) % slide == 0:
                content = window_seq[-length:]
                fires.append((content[0][0], content[-1][0], None, tuple(s for _, s in content), False))
        steps.append((fires, late))
    return steps


def _entering(event_time, items):
    """Yield per item: (late seqs, newly entered (ts, seq) in entering order, watermark before, after)."""
    w = None
    pending: list[tuple[int, int]] = []
    for item in items:
        before = w
        if item[0] == "e":
            _, seq, ts, _key = item
            if event_time and w is not None and ts < w:
                yield [seq], [], before, w
                continue
            if event_time:
                pending.append((ts, seq))
                yield [], [], before, w
            else:
                yield [], [(ts, seq)], before, w
            continue
        if w is None or item[1] > w:
            w = item[1]
        entered = []
        if event_time:
            entered = sorted(p for p in pending if p[0] < w)
            pending = [p for p in pending if p[0] >= w]
        yield [], entered, before, w


def ref_count_every_duration(length, slide, event_time, items):
    """Every boundary t (multiple of slide) the watermark passes: the last ``length`` entered tuples
    with ts < t, if different from the last window emitted."""
    entered: list[tuple[int, int]] = []
    last = None
    steps = []
    for late, new, before, w in _entering(event_time, items):
        entered.extend(new)
        fires = []
        if w is not None and w != before and entered:
            lo = entered[0][0] - entered[0][0] % slide + slide
            if before is not None:
                lo = max(lo, before - before % slide + slide)
            hi = min(w, entered[-1][0] - entered[-1][0] % slide + slide)
            for t in range(lo, hi + 1, slide):
                content = tuple(s for ts, s in [e for e in entered if e[0] < t][-length:])
                if content and content != last:
                    fires.append((t - slide, t, None, content, False))
                    last = content
        steps.append((fires, late))
    return steps


def ref_duration_every_count(length, slide, event_time, items):
    """Every ``slide``-th entered tuple, with timestamp t: the entered tuples with t - length < ts <= t."""
    entered: list[tuple[int, int]] = []
    steps = []
    for late, new, _before, _w in _entering(event_time, items):
        fires = []
        for e in new:
            entered.append(e)
            if len(entered) % slide == 0:
                t = e[0]
                content = tuple(s for ts, s in entered if t - length < ts <= t)
                fires.append((t + 1 - length, t + 1, None, content, False))
        steps.append((fires, late))
    return steps
