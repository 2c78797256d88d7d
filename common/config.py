"""Configuration: Storm's key names and defaults, YAML files, per-topology overrides, validation.

Every key Gale knows is declared once in :data:`KEYS` with its default and type. Daemon config
files may only contain known keys; topology configs may also carry user keys (``kafka.topic``,
``my.app.setting``) as long as they do not sit in one of Gale's own namespaces and do not look like
a misspelling of a known key. Errors name the key, the value and what was expected, and suggest the
closest known key for an unknown one.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gale.errors import ConfigError

# --------------------------------------------------------------------------------------------
# Types


class Type:
    """A value type: ``check`` says whether a value conforms, ``describe`` names the type."""

    def check(self, value: Any) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Int(Type):
    minimum: int | None = None
    maximum: int | None = None

    def check(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        if self.minimum is not None and value < self.minimum:
            return False
        return self.maximum is None or value <= self.maximum

    def describe(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"an integer from {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f"an integer >= {self.minimum}"
        return "an integer"


@dataclass(frozen=True)
class Number(Type):
    minimum: float | None = None
    maximum: float | None = None

    def check(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.minimum is not None and value < self.minimum:
            return False
        return self.maximum is None or value <= self.maximum

    def describe(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"a number from {self.minimum} to {self.maximum}"
        return "a number" if self.minimum is None else f"a number >= {self.minimum}"


@dataclass(frozen=True)
class Str(Type):
    choices: tuple[str, ...] = ()

    def check(self, value: Any) -> bool:
        return isinstance(value, str) and (not self.choices or value in self.choices)

    def describe(self) -> str:
        return "a string" if not self.choices else "one of " + ", ".join(self.choices)


@dataclass(frozen=True)
class Bool(Type):
    def check(self, value: Any) -> bool:
        return isinstance(value, bool)

    def describe(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class ListOf(Type):
    item: Type
    min_len: int = 0

    def check(self, value: Any) -> bool:
        return (
            isinstance(value, (list, tuple))
            and len(value) >= self.min_len
            and all(self.item.check(v) for v in value)
        )

    def describe(self) -> str:
        item = self.item.describe()
        for singular, plural in (("an integer", "integers"), ("a string", "strings"), ("a number", "numbers")):
            if item.startswith(singular):
                item = plural + item[len(singular):]
                break
        what = f"a list of {item}"
        return what if not self.min_len else f"{what} (at least {self.min_len})"


@dataclass(frozen=True)
class MapOf(Type):
    value: Type

    def check(self, value: Any) -> bool:
        return isinstance(value, Mapping) and all(
            isinstance(k, str) and self.value.check(v) for k, v in value.items()
        )

    def describe(self) -> str:
        return f"a mapping of string to {self.value.describe()}"


@dataclass(frozen=True)
class Optional(Type):
    inner: Type

    def check(self, value: Any) -> bool:
        return value is None or self.inner.check(value)

    def describe(self) -> str:
        return f"{self.inner.describe()} or null"


@dataclass(frozen=True)
class AnyValue(Type):
    def check(self, value: Any) -> bool:
        return True

    def describe(self) -> str:
        return "any value"


@dataclass(frozen=True)
class Key:
    name: str
    default: Any
    type: Type
    doc: str


# --------------------------------------------------------------------------------------------
# The known keys. Storm's names and Storm's defaults (docs/storm-model.md §7) unless noted.

_PORT = Int(1, 65535)
_POS = Int(1)
_NONNEG = Int(0)

#: values of topology.multilang.serializer: Storm's class names and Gale's short names
#: (``gale.worker.multilang.codec.codec_for`` maps them to a codec)
MULTILANG_SERIALIZERS = (
    "org.apache.storm.multilang.JsonSerializer", "json",
    "com.yelp.pyleus.serializer.MessagePackSerializer", "msgpack",
)

KEYS: dict[str, Key] = {
    k.name: k
    for k in [
        # ZooKeeper
        Key("storm.zookeeper.servers", ["localhost"], ListOf(Str(), 1), "ZooKeeper hosts"),
        Key("storm.zookeeper.port", 2181, _PORT, "ZooKeeper client port"),
        Key("storm.zookeeper.root", "/storm", Str(), "root znode of Gale's layout"),
        Key("storm.zookeeper.session.timeout", 20000, _POS, "session timeout, ms"),
        Key("storm.zookeeper.connection.timeout", 15000, _POS, "connection timeout, ms"),
        Key("storm.zookeeper.retry.times", 5, _NONNEG, "retries of a failed ZooKeeper operation"),
        Key("storm.zookeeper.retry.interval", 1000, _POS, "first retry delay, ms"),
        Key("storm.zookeeper.retry.intervalceiling.millis", 30000, _POS, "max retry delay, ms"),
        Key("storm.zookeeper.auth.scheme", None, Optional(Str(("digest",))), "ZooKeeper auth"),
        Key("storm.zookeeper.auth.payload", None, Optional(Str()), "user:password for digest"),
        # Local state
        Key("storm.local.dir", "storm-local", Str(), "local state directory"),
        Key("storm.local.hostname", None, Optional(Str()), "hostname to advertise"),
        Key("storm.log.dir", None, Optional(Str()), "log directory (default <local.dir>/logs)"),
        Key("storm.log.format", "json", Str(("json", "console")), "daemon log format"),
        # Nimbus
        Key("nimbus.seeds", ["localhost"], ListOf(Str(), 1), "hosts where clients find nimbus"),
        Key("nimbus.host", None, Optional(Str()),
            "address nimbus's HTTP server binds to (null: 0.0.0.0 with an API token, 127.0.0.1 without one; a "
            "non-loopback address without a token needs nimbus.api.insecure)"),
        Key("nimbus.http.port", 8080, Int(0, 65535), "nimbus HTTP API, UI and /metrics port (0: any)"),
        Key("nimbus.monitor.freq.secs", 10, _POS, "scheduling round period"),
        Key("nimbus.task.timeout.secs", 30, _POS, "executor heartbeat timeout"),
        Key("nimbus.task.launch.secs", 120, _POS, "grace period for new executors"),
        Key("nimbus.supervisor.timeout.secs", 60, _POS, "kept for Storm compatibility"),
        Key("nimbus.code.sync.freq.secs", 120, _POS, "standby code sync period"),
        Key("nimbus.cleanup.inbox.freq.secs", 600, _POS, "inbox cleanup period"),
        Key("nimbus.inbox.jar.expiration.secs", 3600, _POS, "uploaded bundle expiry"),
        Key("nimbus.api.token", None, Optional(Str()), "token required for write actions"),
        Key("nimbus.api.token.file", None, Optional(Str()),
            "file holding nimbus.api.token (one line; instead of the token in this file)"),
        Key("nimbus.api.read.token.required", False, Bool(), "require the token for reads too"),
        Key("nimbus.api.insecure", False, Bool(),
            "let nimbus listen on a non-loopback address without an API token (anyone reaching it can run code)"),
        Key("nimbus.max.request.bytes", 64 * 1024 * 1024, _POS, "largest accepted HTTP body"),
        Key("nimbus.assignment.max.bytes", 512 * 1024, Int(1024, 1_000_000),
            "largest assignment znode nimbus writes: a submit or rebalance whose assignment could be bigger is "
            "refused (ZooKeeper refuses requests over its jute.maxbuffer, 1 MiB by default)"),
        Key("nimbus.shutdown.timeout.secs", 5, _POS,
            "Gale: a nimbus told to stop (SIGTERM) exits within this, whatever is unreachable"),
        Key("topology.min.replication.count", 1, _POS, "nimbus copies of code before submit returns"),
        Key("topology.max.replication.wait.time.sec", 60, Int(-1), "wait for replication, secs"),
        # Supervisor
        Key("supervisor.slots.ports", [6700, 6701, 6702, 6703], ListOf(_PORT), "worker slots"),
        Key("supervisor.worker.timeout.secs", 30, _POS, "worker heartbeat timeout"),
        Key("supervisor.worker.start.timeout.secs", 120, _POS, "first heartbeat timeout"),
        Key("supervisor.worker.shutdown.sleep.secs", 3, _NONNEG,
            "SIGTERM grace before SIGKILL; a worker told to stop exits within it"),
        Key("supervisor.shutdown.timeout.secs", 5, _POS,
            "Gale: a supervisor told to stop exits within this (plus the worker grace when it kills its workers)"),
        Key("supervisor.monitor.frequency.secs", 3, _POS, "slot check period"),
        Key("supervisor.heartbeat.frequency.secs", 5, _POS, "supervisor znode refresh period"),
        Key("supervisor.enable", True, Bool(), "launch workers"),
        Key("supervisor.metrics.port", 0, Int(0, 65535), "supervisor /metrics port (0: any)"),
        Key("supervisor.metrics.host", "0.0.0.0", Str(), "address the supervisor's /metrics server binds to"),
        Key("supervisor.scheduler.meta", {}, MapOf(Str()), "free-form scheduler metadata"),
        Key("supervisor.id", None, Optional(Str()), "fixed supervisor id (default: generated)"),
        # Worker
        Key("worker.heartbeat.frequency.secs", 1, _POS, "LocalState heartbeat period"),
        Key("worker.childopts", [], ListOf(Str()), "extra worker interpreter options"),
        Key("worker.metrics.port.offset", 1000, Int(0, 60000), "worker /metrics port = slot + off"),
        Key("worker.metrics.host", "0.0.0.0", Str(), "address a worker's /metrics server binds to"),
        Key("worker.transfer.host", None, Optional(Str()),
            "address a worker's slot port (tuples from other workers) binds to (null: the address "
            "storm.local.hostname resolves to)"),
        Key("worker.log.max.bytes", 50 * 1024 * 1024, _POS, "worker log file rotation size"),
        Key("worker.log.backups", 5, _NONNEG, "rotated worker log files kept"),
        Key("task.heartbeat.frequency.secs", 3, _POS, "workerbeats znode period"),
        Key("task.refresh.poll.secs", 10, _POS, "assignment/status re-read period"),
        # Topology
        Key("topology.name", None, Optional(Str()), "set by submit"),
        Key("topology.workers", 1, _POS, "worker processes"),
        Key("topology.acker.executors", None, Optional(_NONNEG), "acker executors (null: one/worker)"),
        Key("topology.message.timeout.secs", 30, _POS, "tuple tree timeout"),
        Key("topology.enable.message.timeouts", True, Bool(), "time tuple trees out"),
        Key("topology.max.spout.pending", None, Optional(_POS), "pending tuples per spout task"),
        Key("topology.tick.tuple.freq.secs", None, Optional(Number(0.001)), "tick tuple period"),
        Key("topology.error.throttle.interval.secs", 10, _POS, "error report window"),
        Key("topology.max.error.report.per.interval", 5, _POS, "error reports per window"),
        Key("topology.debug", False, Bool(), "log every tuple"),
        Key("topology.tasks", None, Optional(_POS), "default task count per component"),
        Key("topology.executor.receive.buffer.size", 32768, _POS, "executor input queue size"),
        Key("topology.transfer.batch.size", 1000, _POS, "tuples per inter-worker batch"),
        Key("topology.transfer.flush.millis", 1, Number(0), "inter-worker flush interval"),
        Key("topology.transfer.max.tuple.bytes", 32 * 1024 * 1024, _POS,
            "largest tuple sent to another worker (bigger ones fail at emit)"),
        Key("topology.disable.loadaware.messaging", False, Bool(),
            "shuffle groupings spread evenly over every target task instead of preferring this worker's "
            "tasks while they keep up (docs/architecture.md, \"Load-aware shuffle\")"),
        Key("topology.localityaware.higher.bound", 0.8, Number(0.0, 1.0),
            "a load-aware shuffle widens its scope (worker → host → everywhere) while the current one's "
            "average load (input queue or outbox fullness, 0..1) is at least this"),
        Key("topology.localityaware.lower.bound", 0.2, Number(0.0, 1.0),
            "…and narrows it again while the nearer scope's average load is below this (must be below the "
            "higher bound)"),
        Key("topology.worker.executor.threads", 1, _POS, "executor threads per worker"),
        Key("topology.worker.gc.threshold", 10000, Optional(_POS),
            "Gale: the garbage collector's youngest-generation threshold a worker raises Python's to "
            "(never lowers; null: leave it). Tuples in flight are many short-lived tracked objects; at "
            "Python's default of 700 collections cost ~15% of the per-tuple path (docs/benchmarks.md)"),
        Key("topology.worker.gil.switch.interval.ms", 0.5, Optional(Number(0.01, 1000.0)),
            "Gale: the interpreter's thread switch interval in a worker process (sys.setswitchinterval; "
            "Python's default is 5 ms; null: leave it). A busy executor thread otherwise holds the worker's "
            "other threads (the transfer's standby, heartbeats, metrics) off for up to the interval each "
            "time they wait (docs/benchmarks.md)"),
        Key("topology.worker.timeout.secs", None, Optional(_POS), "per-topology heartbeat timeout"),
        Key("topology.kill.wait.secs", None, Optional(_NONNEG), "default kill wait"),
        Key("topology.stats.sample.rate", 0.05, Number(0.0), "latency sampling rate"),
        Key("topology.spout.wait.sleep.millis", 1, Number(0), "spout idle sleep"),
        Key("topology.spout.max.retries", None, Optional(_NONNEG),
            "Gale: replays of a failed message by a ReliableSpout before on_retries_exhausted (null: no limit)"),
        # Windowed bolts (docs/windows.md): Storm's keys, then Gale's
        Key("topology.bolts.window.length.count", None, Optional(_POS), "count window length, tuples"),
        Key("topology.bolts.window.length.duration.ms", None, Optional(_POS), "duration window length, ms"),
        Key("topology.bolts.window.sliding.interval.count", None, Optional(_POS),
            "count window sliding interval, tuples (default 1)"),
        Key("topology.bolts.window.sliding.interval.duration.ms", None, Optional(_POS),
            "duration window sliding interval, ms (default: the length, a tumbling window)"),
        Key("topology.bolts.tuple.timestamp.field.name", None, Optional(Str()), "event time: the timestamp field (ms)"),
        Key("topology.bolts.tuple.timestamp.max.lag.ms", 0, _NONNEG,
            "event time: the watermark trails the newest timestamp by this (max out-of-orderness), ms"),
        Key("topology.bolts.watermark.event.interval.ms", 1000, _POS, "event time: watermark period, ms"),
        Key("topology.bolts.late.tuple.stream", None, Optional(Str()),
            "event time: stream for late tuples (field late_tuple); null: acked and counted (late_tuples)"),
        Key("topology.bolts.tuple.timestamp.extractor", False, Bool(),
            "Gale: set by with_timestamp_extractor (event time from a function on the bolt)"),
        Key("topology.bolts.window.session.gap.ms", None, Optional(_POS),
            "Gale: session windows: a session closes after this long without a tuple of its key, ms"),
        Key("topology.bolts.window.session.key.field", None, Optional(Str()),
            "Gale: session windows: sessions are per value of this field (null: one per task)"),
        Key("topology.bolts.window.allowed.lateness.ms", 0, _NONNEG,
            "Gale: event time: windows stay this long after the watermark passed their end; a late tuple in "
            "one fires it again as an update, ms"),
        Key("topology.bolts.watermark.idle.timeout.ms", 10000, _POS,
            "Gale: event time: an input task silent this long stops holding the watermark back, ms"),
        Key("topology.bolts.window.persistent", False, Bool(),
            "Gale: set by with_persistence(): the window's contents live in managed state (checkpointed), and "
            "its tuples are acked when their checkpoint commits"),
        # Managed state (docs/state.md)
        Key("topology.state.checkpoint.interval.ms", 1000, _POS,
            "period of state checkpoints; must be below topology.message.timeout.secs"),
        Key("topology.state.provider", "memory", Str(("memory", "redis")),
            "where checkpoints of managed state live: memory (per worker process, lost with it) or redis"),
        Key("topology.state.redis.url", "redis://127.0.0.1:6379/0", Str(),
            "Gale: the Redis server of topology.state.provider redis"),
        Key("topology.state.guarantee", "at-least-once", Str(("at-least-once", "exactly-once")),
            "Gale: at-least-once (Storm's checkpoints: a replay can count an input twice) or exactly-once (a "
            "consistent cut of states and source positions; a failure rolls the topology back to it; every spout "
            "must be able to rewind)"),
        Key("topology.state.key.groups", 128, Int(1, 32768),
            "Gale: key groups of keyed state (the most tasks a stateful bolt can be rescaled to)"),
        Key("topology.spark.master", "local[2]", Str(), "Spark master URL or sc:// endpoint"),
        Key("topology.spark.conf", {}, MapOf(AnyValue()), "extra Spark settings"),
        Key("topology.spark.batch.size", 10000, _POS, "tuples per Spark micro-batch"),
        Key("topology.spark.batch.millis", 2000, _POS, "max wait before a partial batch runs"),
        Key("topology.spark.start.timeout.secs", 300, _POS, "Spark batches fail if Spark is not up by then"),
        Key("topology.spark.start.retry.secs", 30, _NONNEG,
            "after a failed Spark start, retry after this long (doubling, at most 300 s; 0: never)"),
        Key("topology.spark.batch.timeout.secs", None, Optional(_POS),
            "interrupt a Spark batch running longer (null: max(120, 4 x message timeout))"),
        Key("topology.secret", None, Optional(Str()),
            "per-topology transport secret: generated by nimbus at submit, never set by users"),
        # Multi-lang (shell components: docs/multilang.md)
        Key("topology.multilang.serializer", "org.apache.storm.multilang.JsonSerializer", Str(MULTILANG_SERIALIZERS),
            "wire format with shell subprocesses: JSON (Storm's JsonSerializer, 'json') or msgpack ('msgpack')"),
        Key("topology.shellbolt.max.pending", 100, _POS, "tuples a shell bolt task holds unwritten to its subprocess"),
        Key("topology.subprocess.timeout.secs", None, Optional(_POS),
            "a shell subprocess silent this long is killed (null: supervisor.worker.timeout.secs)"),
        Key("topology.multilang.restart.secs", 1, Number(0.1),
            "Gale: a failed shell subprocess is started again after this (doubling per failure in a row, at most 60 s)"),
        Key("streamparse.env", None, Optional(Str()),
            "Gale: the config.json environment a streamparse topology is submitted with (when it lists several)"),
    ]
}

#: Namespaces that belong to Gale: a key under one of these must be a known key.
RESERVED_PREFIXES = (
    "storm.", "nimbus.", "supervisor.", "worker.", "task.", "topology.", "executor.", "ui.",
)


def defaults() -> dict[str, Any]:
    """A fresh copy of every key's default."""
    import copy

    return {name: copy.deepcopy(k.default) for name, k in KEYS.items()}


def suggest(name: str) -> str | None:
    """The closest known key to ``name``, if one is close enough to be a likely typo."""
    matches = difflib.get_close_matches(name, KEYS.keys(), n=1, cutoff=0.8)
    return matches[0] if matches else None


def _unknown_key_message(name: str, where: str) -> str:
    hint = suggest(name)
    msg = f"unknown configuration key {name!r} in {where}"
    return msg + (f"; did you mean {hint!r}?" if hint else "")


def validate(conf: Mapping[str, Any], *, where: str = "configuration", allow_user_keys: bool) -> None:
    """Check every key and value of ``conf``; raise :class:`ConfigError` on the first problem.

    ``allow_user_keys`` admits keys outside Gale's namespaces (topology configs); a user key that is
    within edit distance of a known key is still refused as a likely typo.
    """
    if not isinstance(conf, Mapping):
        raise ConfigError(f"{where} must be a mapping of key: value, not {type(conf).__name__}")
    for name, value in conf.items():
        if not isinstance(name, str):
            raise ConfigError(f"configuration key {name!r} in {where} is not a string")
        key = KEYS.get(name)
        if key is None:
            reserved = name.startswith(RESERVED_PREFIXES)
            if not allow_user_keys or reserved or suggest(name):
                raise ConfigError(_unknown_key_message(name, where))
            continue
        if not key.type.check(value):
            raise ConfigError(
                f"invalid value for {name!r} in {where}: {value!r} ({type(value).__name__}); "
                f"expected {key.type.describe()}"
            )


def check_bounds(conf: Mapping[str, Any], where: str = "topology configuration") -> None:
    """Relations between keys that each key's own type cannot state."""
    higher = conf.get("topology.localityaware.higher.bound", 0.8)
    lower = conf.get("topology.localityaware.lower.bound", 0.2)
    if lower >= higher:
        raise ConfigError(
            f"topology.localityaware.lower.bound ({lower}) must be below topology.localityaware.higher.bound "
            f"({higher}) in {where}: a load-aware shuffle would widen and narrow its scope on every refresh"
        )


def parse_value(text: str) -> Any:
    """Parse a command-line ``key=value`` value the way YAML would (numbers, bools, lists)."""
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def parse_overrides(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Turn ``["topology.workers=2", "kafka.topic=x"]`` into a dict; refuse a pair without ``=``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"-c expects key=value, got {pair!r}")
        name, _, text = pair.partition("=")
        name = name.strip()
        if not name:
            raise ConfigError(f"-c expects key=value, got {pair!r}")
        value = parse_value(text)
        key = KEYS.get(name)
        # "-c storm.local.dir=123" means the string, not the number, when the key wants a string.
        if key is not None and not key.type.check(value) and key.type.check(text):
            value = text
        out[name] = value
    return out


def load_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML config file; refuse unreadable files, bad YAML and non-mapping documents."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"config file {p} is not valid YAML{where}: {problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must be a mapping of key: value, not {type(data).__name__}")
    return data


def daemon_config(path: str | os.PathLike[str] | None = None, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults, then the YAML file (if any), then ``overrides``; validated as a daemon config."""
    conf = defaults()
    if path is not None:
        from_file = load_file(path)
        validate(from_file, where=f"config file {path}", allow_user_keys=False)
        conf.update(from_file)
    if overrides:
        validate(overrides, where="command-line overrides", allow_user_keys=False)
        conf.update(overrides)
    return conf


def topology_config(cluster_conf: Mapping[str, Any], topology_conf: Mapping[str, Any]) -> dict[str, Any]:
    """The effective config of a topology: cluster config overlaid with the topology's own keys."""
    validate(topology_conf, where="topology configuration", allow_user_keys=True)
    conf = dict(cluster_conf)
    conf.update(topology_conf)
    return conf


def api_token(conf: Mapping[str, Any]) -> str | None:
    """The API token: ``nimbus.api.token``, or the first line of ``nimbus.api.token.file``."""
    token = conf.get("nimbus.api.token")
    path = conf.get("nimbus.api.token.file")
    if not path:
        return token or None
    if token:
        raise ConfigError("set either nimbus.api.token or nimbus.api.token.file, not both")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read nimbus.api.token.file {path}: {exc.strerror or exc} (create it once per "
                          "cluster, e.g. 'openssl rand -hex 32', readable by the gale user only, and copy it to "
                          "every node; docs/security.md)") from exc
    lines = text.strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token:
        raise ConfigError(f"nimbus.api.token.file {path} is empty: put the cluster's API token on its first line")
    return token


def zookeeper_hosts(conf: Mapping[str, Any]) -> str:
    """``host1:port,host2:port`` for kazoo from ``storm.zookeeper.servers``/``.port``."""
    port = conf["storm.zookeeper.port"]
    hosts = []
    for server in conf["storm.zookeeper.servers"]:
        hosts.append(server if ":" in server else f"{server}:{port}")
    return ",".join(hosts)
