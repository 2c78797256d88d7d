"""A worker's thread dump: every thread's Python stack (``sys._current_frames``), like jstack."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from types import FrameType


def thread_dump(frames: dict[int, FrameType] | None = None, threads: list[threading.Thread] | None = None,
                now: float | None = None, header: str = "") -> str:
    """Text with one block per thread — name, ident, daemon, then its stack, most recent call last."""
    frames = sys._current_frames() if frames is None else frames
    by_ident = {t.ident: t for t in (threading.enumerate() if threads is None else threads)}
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() if now is None else now))
    out = [f"Thread dump at {stamp} UTC{(' — ' + header) if header else ''}: {len(frames)} threads", ""]
    order = sorted(frames, key=lambda ident: (by_ident.get(ident) is None, getattr(by_ident.get(ident), "name", ""), ident))
    for ident in order:
        t = by_ident.get(ident)
        name = t.name if t is not None else "(not a threading.Thread)"
        flags = [f"ident={ident}"]
        if t is not None:
            flags.append(f"native_id={t.native_id}")
            flags.append("daemon" if t.daemon else "non-daemon")
        out.append(f'"{name}" {" ".join(flags)}')
        out.extend(line.rstrip("\n") for line in traceback.format_stack(frames[ident]))
        out.append("")
    return "\n".join(out)
