"""Windowed bolts (Storm's ``BaseWindowedBolt``): the user API and the window specification.

::

    class TopWords(WindowedBolt):
        def __init__(self):
            super().__init__()
            self.with_window(Duration.seconds(60), Duration.seconds(10)).with_timestamp_field("ts").with_lag(
                Duration.seconds(5))

        def declare_output_fields(self, d):
            d.declare(["start", "end", "word", "count"])

        def execute(self, window):
            counts = Counter(t["word"] for t in window.get())
            for word, n in counts.most_common(10):
                self.collector.emit([window.start, window.end, word, n])   # anchored to the window

A window's configuration is component configuration with Storm's keys
(``topology.bolts.window.length.count`` ...), set by the ``with_*`` methods and returned by
:meth:`WindowedBolt.component_configuration`, so nimbus validates it at submit without importing user
code. :class:`WindowSpec` reads it back (the worker runs the window from it). The runtime — buffer,
triggers, watermarks, lateness, acking — is ``gale.worker.windows``; the user guide is
``docs/windows.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gale.config import as_config
from gale.config_keys import Config
from gale.errors import ConfigError
from gale.topology.components import Bolt, OutputFieldsDeclarer
from gale.topology.tuple import Tuple

# Storm's window keys, by name: what the ``with_*`` methods write into the component's configuration
# and what error messages name (code reads them as attributes of a resolved Config)
LENGTH_COUNT = "topology.bolts.window.length.count"
LENGTH_MS = "topology.bolts.window.length.duration.ms"
SLIDE_COUNT = "topology.bolts.window.sliding.interval.count"
SLIDE_MS = "topology.bolts.window.sliding.interval.duration.ms"
TIMESTAMP_FIELD = "topology.bolts.tuple.timestamp.field.name"
LAG_MS = "topology.bolts.tuple.timestamp.max.lag.ms"
WATERMARK_INTERVAL_MS = "topology.bolts.watermark.event.interval.ms"
LATE_STREAM = "topology.bolts.late.tuple.stream"
SESSION_GAP_MS = "topology.bolts.window.session.gap.ms"
SESSION_KEY_FIELD = "topology.bolts.window.session.key.field"
ALLOWED_LATENESS_MS = "topology.bolts.window.allowed.lateness.ms"
IDLE_TIMEOUT_MS = "topology.bolts.watermark.idle.timeout.ms"
#: Gale: set by with_persistence (Storm's withPersistence): the window's contents live in managed state
PERSISTENT = "topology.bolts.window.persistent"
#: Gale: set by with_timestamp_extractor (the extractor itself lives on the instance)
TIMESTAMP_EXTRACTOR = "topology.bolts.tuple.timestamp.extractor"

#: the field of a tuple on the late-tuple stream (Storm's ``late_tuple``): the late tuple's values
LATE_TUPLE_FIELD = "late_tuple"

WINDOW_KEYS = (LENGTH_COUNT, LENGTH_MS, SLIDE_COUNT, SLIDE_MS, SESSION_GAP_MS)


@dataclass(frozen=True)
class Count:
    """A window length or sliding interval in tuples."""

    value: int

    @staticmethod
    def of(n: int) -> Count:
        return Count(n)


@dataclass(frozen=True)
class Duration:
    """A window length, sliding interval, lag or gap in milliseconds."""

    ms: int

    @staticmethod
    def of(ms: int) -> Duration:
        return Duration(int(ms))

    @staticmethod
    def millis(ms: int) -> Duration:
        return Duration(int(ms))

    @staticmethod
    def seconds(s: float) -> Duration:
        return Duration(int(round(s * 1000)))

    @staticmethod
    def minutes(m: float) -> Duration:
        return Duration(int(round(m * 60_000)))

    @staticmethod
    def hours(h: float) -> Duration:
        return Duration(int(round(h * 3_600_000)))


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _nonneg(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class WindowSpec:
    """What a windowed bolt's configuration means, checked: one of three kinds.

    * ``count``: the last ``length_count`` tuples every ``slide_count`` tuples (arrival order, or
      timestamp order once the watermark passes them, with event time);
    * ``time``: windows ``[start, start + length_ms)`` with ``start`` a multiple of ``slide_ms``
      (epoch milliseconds), over the tuples' timestamps (event time) or arrival times (processing time);
    * ``session``: per key, tuples closer than ``session_gap_ms`` to each other; a session
      ``[first ts, last ts + gap)`` closes when the watermark passes its end;
    * ``count_every_duration`` / ``duration_every_count`` (Storm's mixed windows): the last
      ``length_count`` tuples every ``slide_ms``; the tuples of the last ``length_ms`` every
      ``slide_count`` tuples.
    """

    kind: str
    length_count: int | None = None
    slide_count: int | None = None
    length_ms: int | None = None
    slide_ms: int | None = None
    session_gap_ms: int | None = None
    session_key_field: str | None = None
    timestamp_field: str | None = None
    timestamp_extractor: bool = False
    lag_ms: int = 0
    watermark_interval_ms: int = 1000
    late_stream: str | None = None
    allowed_lateness_ms: int = 0
    idle_timeout_ms: int = 10_000

    @property
    def event_time(self) -> bool:
        return self.timestamp_field is not None or self.timestamp_extractor

    @classmethod
    def from_conf(cls, conf: Config | Mapping[str, Any], where: str = "windowed bolt") -> WindowSpec:
        """The spec of ``conf`` (topology conf overlaid with the component's); :class:`ConfigError`
        naming the key for anything inconsistent."""
        c = as_config(conf, where)
        lc, lm = c.topology_bolts_window_length_count, c.topology_bolts_window_length_duration_ms
        sc, sm = c.topology_bolts_window_sliding_interval_count, c.topology_bolts_window_sliding_interval_duration_ms
        gap = c.topology_bolts_window_session_gap_ms
        common: dict[str, Any] = {
            "timestamp_field": c.topology_bolts_tuple_timestamp_field_name or None,
            "timestamp_extractor": c.topology_bolts_tuple_timestamp_extractor,
            "lag_ms": c.topology_bolts_tuple_timestamp_max_lag_ms,
            "watermark_interval_ms": c.topology_bolts_watermark_event_interval_ms,
            "late_stream": c.topology_bolts_late_tuple_stream or None,
            "allowed_lateness_ms": c.topology_bolts_window_allowed_lateness_ms,
            "idle_timeout_ms": c.topology_bolts_watermark_idle_timeout_ms,
        }
        event_time = common["timestamp_field"] is not None or common["timestamp_extractor"]
        if gap is not None:
            if lc is not None or lm is not None:
                raise ConfigError(f"{where}: {SESSION_GAP_MS} (a session window) cannot be combined with a window "
                                  f"length ({LENGTH_COUNT} / {LENGTH_MS})")
            spec = cls(kind="session", session_gap_ms=gap,
                       session_key_field=c.topology_bolts_window_session_key_field or None, **common)
        elif lc is not None and lm is not None:
            raise ConfigError(f"{where}: set either {LENGTH_COUNT} or {LENGTH_MS}, not both")
        elif (lc is not None and sm is not None) or (lm is not None and sc is not None):
            if sc is not None and sm is not None:
                raise ConfigError(f"{where}: set either {SLIDE_COUNT} or {SLIDE_MS}, not both")
            if common["allowed_lateness_ms"]:
                raise ConfigError(f"{where}: {ALLOWED_LATENESS_MS} applies to duration and session windows, not to "
                                  "windows counted in tuples")
            if lc is not None:  # the last n tuples every d ms
                spec = cls(kind="count_every_duration", length_count=lc, slide_ms=sm, **common)
            else:  # the tuples of the last d ms every n tuples
                spec = cls(kind="duration_every_count", length_ms=lm, slide_count=sc, **common)
        elif lc is not None:
            length = lc
            slide = sc if sc is not None else 1  # Storm's default sliding interval of a count window
            if common["allowed_lateness_ms"]:
                raise ConfigError(f"{where}: {ALLOWED_LATENESS_MS} applies to duration and session windows, not to "
                                  "count windows")
            spec = cls(kind="count", length_count=length, slide_count=slide, **common)
        elif lm is not None:
            length = lm
            slide = sm if sm is not None else length  # a tumbling window
            if slide > length:
                raise ConfigError(f"{where}: {SLIDE_MS} ({slide}) is longer than {LENGTH_MS} ({length}): tuples "
                                  "between windows would belong to none")
            spec = cls(kind="time", length_ms=length, slide_ms=slide, **common)
        else:
            raise ConfigError(f"{where}: no window configured: call with_window(...), with_tumbling_window(...) or "
                              f"with_session_window(...) (or set {LENGTH_COUNT} / {LENGTH_MS} / {SESSION_GAP_MS})")
        if spec.allowed_lateness_ms and not event_time:
            raise ConfigError(f"{where}: {ALLOWED_LATENESS_MS} needs event time (with_timestamp_field or "
                              "with_timestamp_extractor): with processing time no tuple is late")
        if spec.lag_ms and not event_time:
            raise ConfigError(f"{where}: {LAG_MS} (with_lag) needs event time (with_timestamp_field or "
                              "with_timestamp_extractor)")
        return spec

    def max_buffered_ms(self) -> int | None:
        """The longest a tuple can wait in the window before it is acked, for duration and session
        windows: length + sliding interval (Storm's rule), plus, with event time, the lag, the
        watermark interval and the allowed lateness (a session: its gap instead of the length and
        interval, for a session of one tuple — longer sessions keep their first tuples longer)."""
        extra = self.lag_ms + self.watermark_interval_ms + self.allowed_lateness_ms if self.event_time else 0
        if self.kind == "time":
            return (self.length_ms or 0) + (self.slide_ms or 0) + extra
        if self.kind == "session":
            return (self.session_gap_ms or 0) + extra
        if self.kind == "count_every_duration":
            return (self.slide_ms or 0) + extra
        if self.kind == "duration_every_count":
            return (self.length_ms or 0) + extra
        return None

    def max_buffered_count(self) -> int | None:
        """The tuples a window must hold before it fires (Storm: length + sliding interval for a
        count window, the count alone when the other is a duration)."""
        if self.kind == "count":
            return (self.length_count or 0) + (self.slide_count or 0)
        if self.kind == "count_every_duration":
            return self.length_count
        if self.kind == "duration_every_count":
            return self.slide_count
        return None


def check_limits(spec: WindowSpec, conf: Config | Mapping[str, Any], where: str) -> None:
    """Storm's ``BaseWindowedBolt`` validation at submit: a window must be able to hold its tuples
    without them timing out (``topology.message.timeout.secs``) or stalling the spouts
    (``topology.max.spout.pending``). Raises :class:`ConfigError` naming the rule."""
    config = as_config(conf, where)
    if config.topology_bolts_window_persistent:
        return  # acked when their checkpoint commits, not when they leave the window: no limit
    exempt = ("; or call with_persistence() on the bolt: a window kept in managed state acks its tuples when "
              "their checkpoint commits, which lifts this rule (docs/windows.md)")
    timeout_secs = config.topology_message_timeout_secs
    timeouts = config.topology_enable_message_timeouts
    longest = spec.max_buffered_ms()
    if longest is not None and timeouts and longest > timeout_secs * 1000:
        parts = {"time": "window length + sliding interval", "session": "session gap",
                 "count_every_duration": "sliding interval", "duration_every_count": "window length"}[spec.kind] + (
            " + lag + watermark interval + allowed lateness" if spec.event_time else "")
        raise ConfigError(
            f"{where}: rule 'window duration <= topology.message.timeout.secs': {parts} = {longest} ms is longer "
            f"than topology.message.timeout.secs = {timeout_secs} s, so the window's tuples would time out and "
            f"replay before the window fires; raise topology.message.timeout.secs or shorten the window{exempt}"
        )
    pending = config.topology_max_spout_pending
    total = spec.max_buffered_count()
    if total is not None and pending:
        if total > pending:
            parts = {"count": "window length + sliding interval", "count_every_duration": "window length",
                     "duration_every_count": "sliding interval"}[spec.kind]
            raise ConfigError(
                f"{where}: rule 'window count <= topology.max.spout.pending': {parts} = "
                f"{total} tuples is more than topology.max.spout.pending = {pending}, so the spouts would stop "
                f"emitting before the window fills; raise topology.max.spout.pending or shorten the window{exempt}"
            )


class TupleWindow:
    """What :meth:`WindowedBolt.execute` gets (Storm's ``TupleWindow``).

    * :meth:`get` — the tuples in the window, by timestamp (then arrival);
    * :meth:`get_new` — those not in the previously fired window (for an update: those added since
      the window last fired);
    * :meth:`get_expired` — those of the previously fired window that left it (empty for sessions
      and updates);
    * :attr:`start`, :attr:`end` — the window's bounds in epoch ms, ``[start, end)`` (count windows:
      the first and last tuple's timestamps); :attr:`key` — a session's key;
      :attr:`is_update` — True when the window fired before and a late tuple within the allowed
      lateness changed it: this is an updated result;
    * :attr:`replaces` — the ``(start, end)`` of every earlier result of this window (same
      :attr:`key`) that this one supersedes, by start: empty for a first firing; for an update of a
      duration window, its own bounds; for a session a late tuple extended or merged, the bounds each
      of those sessions fired with. A sink deletes the rows ``(key, start, end)`` for these, then writes
      this window's (``docs/windows.md``, "Updates").
    """

    __slots__ = ("_tuples", "_new", "_expired", "start", "end", "key", "is_update", "replaces")

    def __init__(self, tuples: Sequence[Tuple], new: Sequence[Tuple], expired: Sequence[Tuple], start: int,
                 end: int, key: Any = None, is_update: bool = False,
                 replaces: Sequence[tuple[int, int]] = ()):
        self._tuples = list(tuples)
        self._new = list(new)
        self._expired = list(expired)
        self.start = start
        self.end = end
        self.key = key
        self.is_update = is_update
        self.replaces: list[tuple[int, int]] = list(replaces)

    def get(self) -> list[Tuple]:
        return self._tuples

    def get_new(self) -> list[Tuple]:
        return self._new

    def get_expired(self) -> list[Tuple]:
        return self._expired

    # Storm's camelCase names
    getNew = get_new
    getExpired = get_expired

    def get_start_timestamp(self) -> int:
        return self.start

    def get_end_timestamp(self) -> int:
        return self.end

    def __len__(self) -> int:
        return len(self._tuples)

    def __repr__(self) -> str:
        kind = " update" if self.is_update else ""
        key = f" key={self.key!r}" if self.key is not None else ""
        return f"<TupleWindow{kind} [{self.start}, {self.end}){key} {len(self._tuples)} tuples>"


def _length(value: Count | Duration, what: str) -> tuple[str, int]:
    if isinstance(value, Count):
        return "count", _positive(what, value.value)
    if isinstance(value, Duration):
        return "ms", _positive(what, value.ms)
    raise ConfigError(f"{what} must be gale.Count(n) or gale.Duration(ms), got {value!r}")


class WindowedBolt(Bolt):
    """A bolt that processes windows of tuples: implement :meth:`execute` taking a
    :class:`TupleWindow`. Configure the window in ``__init__`` with the ``with_*`` methods (each
    returns ``self``). Emits during ``execute`` are anchored to every tuple of the window; the
    runtime acks the window's tuples when they leave the last window they belong to. Do not ack or
    fail them yourself.
    """

    #: its tasks run a window (``gale.worker.windows``; recorded in the definition)
    body_kind = "window"

    def __init__(self) -> None:
        self._window_conf: dict[str, Any] = {}
        self.timestamp_extractor: Callable[[Tuple], int] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # the late-tuple stream is declared for the user (Storm's WindowedBoltExecutor does it too)
        super().__init_subclass__(**kwargs)
        user = cls.__dict__.get("declare_output_fields")
        if user is not None and not getattr(user, "_declares_late_stream", False):
            def declare_output_fields(self: WindowedBolt, declarer: OutputFieldsDeclarer, _user: Any = user) -> None:
                _user(self, declarer)
                self._declare_late_stream(declarer)

            declare_output_fields._declares_late_stream = True  # type: ignore[attr-defined]
            declare_output_fields.__doc__ = user.__doc__
            cls.declare_output_fields = declare_output_fields  # type: ignore[method-assign]

    def _wconf(self) -> dict[str, Any]:
        conf = self.__dict__.get("_window_conf")
        if conf is None:  # a subclass that did not call super().__init__()
            conf = self._window_conf = {}
        return conf

    def _declare_late_stream(self, declarer: OutputFieldsDeclarer) -> None:
        stream = Config.resolve(self._wconf(), where=f"window of {type(self).__name__}",
                                allow_user_keys=False).topology_bolts_late_tuple_stream
        if stream and stream not in declarer.streams:
            declarer.declare_stream(stream, [LATE_TUPLE_FIELD])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        super().declare_output_fields(declarer)
        self._declare_late_stream(declarer)

    declare_output_fields._declares_late_stream = True  # type: ignore[attr-defined]

    # --- configuration (Storm's BaseWindowedBolt builder methods)
    def with_window(self, length: Count | Duration, sliding: Count | Duration | None = None) -> WindowedBolt:
        """A sliding window of ``length`` every ``sliding`` (default: a count of 1 for a count
        window, as Storm; the length for a duration window, i.e. tumbling)."""
        conf = self._wconf()
        for k in (LENGTH_COUNT, LENGTH_MS, SLIDE_COUNT, SLIDE_MS, SESSION_GAP_MS):
            conf.pop(k, None)
        kind, n = _length(length, "window length")
        conf[LENGTH_COUNT if kind == "count" else LENGTH_MS] = n
        if sliding is not None:
            skind, s = _length(sliding, "sliding interval")
            conf[SLIDE_COUNT if skind == "count" else SLIDE_MS] = s
        elif kind == "count":
            conf[SLIDE_COUNT] = 1
        else:
            conf[SLIDE_MS] = n
        return self

    def with_tumbling_window(self, length: Count | Duration) -> WindowedBolt:
        """Consecutive, non-overlapping windows of ``length``."""
        return self.with_window(length, length)

    def with_session_window(self, gap: Duration, key_field: str | None = None) -> WindowedBolt:
        """Session windows (Gale): tuples closer than ``gap`` belong to one session, per value of
        ``key_field`` (all tuples of the task when None); a session fires when the watermark passes
        its last tuple's timestamp + gap."""
        conf = self._wconf()
        for k in (LENGTH_COUNT, LENGTH_MS, SLIDE_COUNT, SLIDE_MS):
            conf.pop(k, None)
        conf[SESSION_GAP_MS] = _length(gap, "session gap")[1] if isinstance(gap, Duration) else _positive(
            "session gap", gap)
        if key_field is not None:
            conf[SESSION_KEY_FIELD] = key_field
        return self

    def with_timestamp_field(self, field: str) -> WindowedBolt:
        """Event time: the tuple's timestamp (epoch ms, an int) is in ``field``."""
        self._wconf()[TIMESTAMP_FIELD] = field
        return self

    def with_timestamp_extractor(self, extractor: Callable[[Tuple], int]) -> WindowedBolt:
        """Event time: ``extractor(tuple)`` returns the timestamp in epoch ms."""
        self.timestamp_extractor = extractor
        self._wconf()[TIMESTAMP_EXTRACTOR] = True
        return self

    def with_lag(self, lag: Duration) -> WindowedBolt:
        """The maximum out-of-orderness: the watermark trails the newest timestamp by ``lag``."""
        self._wconf()[LAG_MS] = _nonneg("lag", lag.ms if isinstance(lag, Duration) else lag)
        return self

    def with_watermark_interval(self, interval: Duration) -> WindowedBolt:
        """How often the watermark is computed (and event-time windows fire)."""
        self._wconf()[WATERMARK_INTERVAL_MS] = _positive(
            "watermark interval", interval.ms if isinstance(interval, Duration) else interval)
        return self

    def with_late_tuple_stream(self, stream: str) -> WindowedBolt:
        """Emit late tuples on ``stream`` (field ``late_tuple``: the tuple's values) instead of only
        acking and counting them."""
        self._wconf()[LATE_STREAM] = stream
        return self

    def with_allowed_lateness(self, lateness: Duration) -> WindowedBolt:
        """Gale: keep windows this long after the watermark passed their end; a late tuple landing
        in one fires it again with an updated result (``window.is_update``)."""
        self._wconf()[ALLOWED_LATENESS_MS] = _nonneg(
            "allowed lateness", lateness.ms if isinstance(lateness, Duration) else lateness)
        return self

    def with_idle_timeout(self, timeout: Duration) -> WindowedBolt:
        """Gale: an input task silent this long stops holding the watermark back."""
        self._wconf()[IDLE_TIMEOUT_MS] = _positive(
            "idle timeout", timeout.ms if isinstance(timeout, Duration) else timeout)
        return self

    def with_persistence(self) -> WindowedBolt:
        """Storm's ``withPersistence()``: the window's contents live in the bolt's managed state
        (checkpointed to ``topology.state.provider``, restored when the task restarts), and the
        window's tuples are acked once the checkpoint holding them commits, not when they expire —
        so a window in progress survives a worker kill without a replay of its input, and the
        submit rules on the message timeout and max spout pending do not apply. The topology gets
        checkpoints as with a stateful bolt (docs/windows.md, "Persistent windows")."""
        self._wconf()[PERSISTENT] = True
        return self

    def component_configuration(self) -> dict[str, Any]:
        return dict(self._wconf())

    # --- what the user implements
    def execute(self, window: TupleWindow) -> None:  # type: ignore[override]
        raise NotImplementedError


def sets_window(own: Config) -> bool:
    """True when a component's own configuration (``own``, resolved) configures a window: it is
    a windowed bolt."""
    return any(v is not None for v in (
        own.topology_bolts_window_length_count, own.topology_bolts_window_length_duration_ms,
        own.topology_bolts_window_sliding_interval_count, own.topology_bolts_window_sliding_interval_duration_ms,
        own.topology_bolts_window_session_gap_ms))


def validate_component(component: str, component_conf: Mapping[str, Any],
                       topology_conf: Config | Mapping[str, Any]) -> None:
    """Submit-time check of a windowed bolt (one whose own configuration sets a window): the window is
    consistent and within Storm's limits (:func:`check_limits`). Raises :class:`ConfigError`."""
    where = f"configuration of component {component!r}"
    if not sets_window(Config.resolve(component_conf, where=where, allow_user_keys=True)):
        return
    config = as_config(topology_conf, "topology configuration").with_overrides(component_conf, where=where)
    where = f"windowed bolt {component!r}"
    check_limits(WindowSpec.from_conf(config, where=where), config, where)


def validate_windows(components: Mapping[str, Any], config: Config | Mapping[str, Any]) -> None:
    """Every windowed bolt of a topology against the effective configuration ``config`` (nimbus at
    submit: cluster config + the topology's own + command-line overrides). ``components``: component
    id → ComponentDef."""
    config = as_config(config, "topology configuration")
    for cid, comp in sorted(components.items()):
        validate_component(cid, comp.conf, config)
