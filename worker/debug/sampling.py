"""Event sampling (Storm's topology event inspector): a share of the tuples a component emits,
written to the worker's ``events.log`` for the UI to show.

Switched per component by the topology's debug options in its StormBase (``component_debug``,
Storm's ``/storm/storms/<id>`` field, set by ``POST /api/v1/topology/<id>/debug/enable/<pct>``):
the component's own entry, else the topology's (keyed by the topology id), decides.

Nothing is added to the per-tuple path: every collector already calls its ``_capture`` hook on
emit when one is set (``None`` in a cluster worker). Sampling a component sets it, on the
component's executor thread (a timer hook, so an emit never sees it change half-way), to a
:class:`Sampler`; turning sampling off sets it back.

What is written, one JSON line an event: time, component, task-less stream, field names and
values — each value at most :data:`VALUE_CHARS` characters, an event at most :data:`EVENT_CHARS`;
values of fields named like a credential (:data:`SECRET_FIELD`) and any text equal to one of the
topology's secrets (its transport secret, ``nimbus.api.token``, ZooKeeper credentials, configuration
keys named like a credential) are replaced by ``"***"``. At most :data:`EVENTS_PER_SEC` events a
second per worker are written (the rest are counted as dropped); ``events.log`` rotates at
:data:`LOG_BYTES` (one backup).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import random
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gale.log import get_logger

log = get_logger("worker.sampling")

VALUE_CHARS = 200
EVENT_CHARS = 2000
EVENTS_PER_SEC = 100
LOG_BYTES = 10 * 1024 * 1024
EVENTS_FILE = "events.log"
MASK = "***"
SECRET_FIELD = re.compile(r"pass(word|wd)?|secret|token|api[_.-]?key|credential|auth|private[_.-]?key", re.I)


def sampling_pct(component_debug: Mapping[str, Any], topology_id: str, component: str) -> float:
    """The share (0–100) of ``component``'s emits to sample: its own debug entry, else the
    topology's; 0 when neither enables it (Storm's rule)."""
    options = component_debug.get(component) or component_debug.get(topology_id)
    if options is None or not getattr(options, "enable", False):
        return 0.0
    return max(0.0, min(100.0, float(getattr(options, "samplingpct", 0.0))))


def secrets_of(conf: Mapping[str, Any], extra: Iterable[str] = ()) -> list[str]:
    """Text that must never appear in a sampled value: configured credentials (keys named like one)."""
    from gale.config_keys import SECRET_KEYS

    found = [v for k, v in conf.items() if isinstance(v, str) and (k in SECRET_KEYS or SECRET_FIELD.search(k))]
    found += [s for s in extra if isinstance(s, str)]
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def render_value(value: Any, secrets: list[str]) -> Any:
    """A JSON-safe, truncated, secret-free form of one tuple value."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else repr(value)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 1] + "…"


def render_event(component: str, stream: str, names: tuple[str, ...] | list[str], values: Any, secrets: list[str],
                 now: float) -> str:
    """One sampled tuple as a JSON line (at most EVENT_CHARS characters)."""
    values = list(values)
    shown = []
    for i, v in enumerate(values):
        name = names[i] if i < len(names) else f"#{i}"
        shown.append(MASK if SECRET_FIELD.search(name) else render_value(v, secrets))
    event = {"ts": round(now, 3), "component": component, "stream": stream, "fields": list(names)[:len(values)],
             "values": shown}
    line = json.dumps(event, ensure_ascii=False, default=str)
    while len(line) > EVENT_CHARS and any(isinstance(v, str) and len(v) > 20 for v in event["values"]):
        event["values"] = [v[:max(20, len(v) // 2)] + "…" if isinstance(v, str) and len(v) > 20 else v
                           for v in event["values"]]
        event["truncated"] = True
        line = json.dumps(event, ensure_ascii=False, default=str)
    return line


class EventLog:
    """Sampled events → ``events.log`` (a writer thread; a bounded queue in between)."""

    def __init__(self, directory: Path | None, per_sec: int = EVENTS_PER_SEC):
        self.directory = directory
        self.per_sec = per_sec
        self.queue: deque[str] = deque(maxlen=10 * per_sec)
        self.dropped = 0
        self.written = 0
        self._second = 0
        self._in_second = 0
        self._logger: logging.Logger | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def offer(self, now: float) -> bool:
        """Whether one more event fits this second's budget (executor threads; approximate)."""
        second = int(now)
        if second != self._second:
            self._second, self._in_second = second, 0
        if self._in_second >= self.per_sec:
            self.dropped += 1
            return False
        self._in_second += 1
        return True

    def put(self, line: str) -> None:
        self.queue.append(line)
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        logger = logging.getLogger(f"gale.events.{id(self)}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        handler = logging.handlers.RotatingFileHandler(self.directory / EVENTS_FILE, maxBytes=LOG_BYTES, backupCount=1)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        self._logger = logger
        self._thread = threading.Thread(target=self._run, name="event-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.flush()
        self.flush()

    def flush(self) -> None:
        logger = self._logger
        while self.queue and logger is not None:
            logger.info(self.queue.popleft())
            self.written += 1

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._logger is not None:
            for h in list(self._logger.handlers):
                h.close()
                self._logger.removeHandler(h)


class Sampler:
    """A collector's ``_capture`` hook: ``pct`` percent of emits, as events."""

    def __init__(self, pct: float, fields_of: Any, events: EventLog, secrets: list[str], clock: Any = time,
                 rng: random.Random | None = None):
        self.pct = pct
        self.fields_of = fields_of
        self.events = events
        self.secrets = secrets
        self.clock = clock
        self._random = (rng or random.Random()).random

    def __call__(self, component: str, stream: str, values: Any) -> None:
        if self._random() * 100.0 >= self.pct:
            return
        now = self.clock.time()
        if not self.events.offer(now):
            return
        try:
            names = self.fields_of(component, stream)
        except Exception:  # noqa: BLE001 - an undeclared stream: positional names
            names = ()
        self.events.put(render_event(component, stream, names, values, self.secrets, now))


class Sampling:
    """Installs and removes samplers on a worker's executors, on their own threads."""

    def __init__(self, runtime: Any, events: EventLog, secrets: list[str], clock: Any = time):
        self.runtime = runtime
        self.events = events
        self.secrets = secrets
        self.clock = clock
        #: component → the share sampled now (absent: off)
        self.pct: dict[str, float] = {}
        self._hooked: set[int] = set()

    def fields_of(self, component: str, stream: str) -> tuple[str, ...]:
        return tuple(self.runtime.stream_fields(component, stream).names)

    def apply(self, wanted: Mapping[str, float]) -> None:
        """Sample ``wanted[component]`` percent of each local component's emits (0 or absent: none)."""
        for ex in list(self.runtime.executors.values()):
            pct = float(wanted.get(ex.component, 0.0))
            if pct == self.pct.get(ex.component, 0.0) and (pct == 0.0 or id(ex) in self._hooked):
                continue  # unchanged (an executor never sampled gets no hook at all)
            hook = Sampler(pct, self.fields_of, self.events, self.secrets, self.clock) if pct > 0 else None
            ex._gale_capture_next = hook if hook is not None else self.runtime.capture
            if id(ex) not in self._hooked:
                self._hooked.add(id(ex))
                ex.timers.append(_swap_hook(ex))
        now = {c: p for c, p in wanted.items() if p > 0}
        if now != self.pct:
            log.info("sampling", components=now)
        self.pct = now


def _swap_hook(ex: Any):
    """A timer hook (on the executor's thread) that puts the executor's next capture in place."""

    def swap(_now: float) -> None:
        nxt = getattr(ex, "_gale_capture_next", _UNSET)
        if nxt is _UNSET:
            return
        for collector in list(getattr(ex, "collectors", {}).values()):
            collector._capture = nxt
        del ex._gale_capture_next

    swap.__qualname__ = "sampling-swap"
    return swap


_UNSET = object()
