"""The one table of configuration keys: :class:`Config`, typed and frozen.

Every key Gale knows is declared once, here, as a field of :class:`Config`: its attribute is the
key's name with dots (and dashes) turned into underscores, its annotation the attribute's Python
type, and :func:`key` records Storm's name, the default, the value type and what the key means.
:data:`KEYS` (name → :class:`~gale.config_types.Key`) is read off the fields.

Configuration travels as a mapping (YAML files, ZooKeeper, the HTTP API, the dict a spout's
``open`` gets). Where a daemon, a submit check or a command takes one in, :meth:`Config.resolve`
validates it once — an unknown key or a wrong value is refused naming the key, the value and what
was expected, with the closest known key suggested — and returns a ``Config`` with every default
filled in. Code below that boundary reads attributes (``config.topology_message_timeout_secs``),
never strings. A component's own configuration goes over its topology's with
:meth:`Config.with_overrides`; :meth:`Config.to_dict` gives the plain dict back (user code, JSON,
YAML). Keys outside Gale's namespaces that a topology carries (``kafka.topic``) are kept, read-only,
in :attr:`Config.user`.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from gale.config_types import AnyValue, Bool, Int, Key, ListOf, MapOf, Number, Optional, Str, Type
from gale.errors import ConfigError

_PORT = Int(1, 65535)
_POS = Int(1)
_NONNEG = Int(0)

#: values of topology.multilang.serializer: Storm's class names and Gale's short names
#: (``gale.worker.multilang.codec.codec_for`` maps them to a codec)
MULTILANG_SERIALIZERS = (
    "org.apache.storm.multilang.JsonSerializer", "json",
    "com.yelp.pyleus.serializer.MessagePackSerializer", "msgpack",
)

#: Namespaces that belong to Gale: a key under one of these must be a known key.
RESERVED_PREFIXES = (
    "storm.", "nimbus.", "supervisor.", "worker.", "task.", "topology.", "executor.", "ui.", "logviewer.",
)


def attribute_name(name: str) -> str:
    """The :class:`Config` attribute of the key ``name``: dots and dashes become underscores."""
    return name.replace(".", "_").replace("-", "_")


def _freeze(value: Any) -> Any:
    """The value as the frozen object holds it: lists as tuples, mappings read-only."""
    if isinstance(value, (list, tuple)):
        return tuple(value)
    if isinstance(value, Mapping):
        return MappingProxyType(dict(value))
    return value


def _thaw(value: Any) -> Any:
    """The value as a mapping carries it (JSON, YAML, user code): lists and dicts."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, MappingProxyType):
        return dict(value)
    return value


def key(name: str, default: Any, type_: Type, doc: str, *, secret: bool = False) -> Any:
    """Declare a field of :class:`Config` as the key ``name`` (Storm's name) with its default,
    value type and documentation. A secret (a credential) is left out of the object's repr."""
    frozen = _freeze(default)
    metadata = {"key": Key(name, default, type_, doc, secret)}
    if isinstance(frozen, Mapping):  # not hashable, so not a plain dataclass default
        return field(default_factory=lambda: MappingProxyType(dict(default)), metadata=metadata, repr=not secret)
    return field(default=frozen, metadata=metadata, repr=not secret)


# --------------------------------------------------------------------------------------------
# The known keys. Storm's names and Storm's defaults (docs/storm-model.md §7) unless noted.


@dataclass(frozen=True, slots=True)
class Config:
    """The resolved configuration of a daemon or a topology: every known key as a typed attribute
    (defaults filled in; lists as tuples, mappings read-only), and the topology's own keys in
    :attr:`user`. Build one with :meth:`resolve` and derive others with :meth:`with_overrides`
    (both validate); ``dataclasses.replace`` is for values already checked."""

    # ZooKeeper
    storm_zookeeper_servers: tuple[str, ...] = key(
        "storm.zookeeper.servers", ["localhost"], ListOf(Str(), 1), "ZooKeeper hosts")
    storm_zookeeper_port: int = key("storm.zookeeper.port", 2181, _PORT, "ZooKeeper client port")
    storm_zookeeper_root: str = key("storm.zookeeper.root", "/storm", Str(), "root znode of Gale's layout")
    storm_zookeeper_session_timeout: int = key("storm.zookeeper.session.timeout", 20000, _POS, "session timeout, ms")
    storm_zookeeper_connection_timeout: int = key(
        "storm.zookeeper.connection.timeout", 15000, _POS, "connection timeout, ms")
    storm_zookeeper_retry_times: int = key(
        "storm.zookeeper.retry.times", 5, _NONNEG, "retries of a failed ZooKeeper operation")
    storm_zookeeper_retry_interval: int = key("storm.zookeeper.retry.interval", 1000, _POS, "first retry delay, ms")
    storm_zookeeper_retry_intervalceiling_millis: int = key(
        "storm.zookeeper.retry.intervalceiling.millis", 30000, _POS, "max retry delay, ms")
    storm_zookeeper_auth_scheme: str | None = key(
        "storm.zookeeper.auth.scheme", None, Optional(Str(("digest",))), "ZooKeeper auth")
    storm_zookeeper_auth_payload: str | None = key(
        "storm.zookeeper.auth.payload", None, Optional(Str()), "user:password for digest", secret=True)
    # Local state
    storm_local_dir: str = key("storm.local.dir", "storm-local", Str(), "local state directory")
    storm_local_hostname: str | None = key("storm.local.hostname", None, Optional(Str()), "hostname to advertise")
    storm_log_dir: str | None = key(
        "storm.log.dir", None, Optional(Str()), "log directory (default <local.dir>/logs)")
    storm_log_format: str = key("storm.log.format", "json", Str(("json", "console")), "daemon log format")
    # Nimbus
    nimbus_seeds: tuple[str, ...] = key(
        "nimbus.seeds", ["localhost"], ListOf(Str(), 1), "hosts where clients find nimbus")
    nimbus_host: str | None = key(
        "nimbus.host", None, Optional(Str()),
        "address nimbus's HTTP server binds to (null: 0.0.0.0 with an API token, 127.0.0.1 without one; a "
        "non-loopback address without a token needs nimbus.api.insecure)")
    nimbus_http_port: int = key(
        "nimbus.http.port", 8080, Int(0, 65535), "nimbus HTTP API, UI and /metrics port (0: any)")
    nimbus_monitor_freq_secs: int = key("nimbus.monitor.freq.secs", 10, _POS, "scheduling round period")
    nimbus_task_timeout_secs: int = key("nimbus.task.timeout.secs", 30, _POS, "executor heartbeat timeout")
    nimbus_task_launch_secs: int = key("nimbus.task.launch.secs", 120, _POS, "grace period for new executors")
    nimbus_supervisor_timeout_secs: int = key(
        "nimbus.supervisor.timeout.secs", 60, _POS, "kept for Storm compatibility")
    nimbus_code_sync_freq_secs: int = key("nimbus.code.sync.freq.secs", 120, _POS, "standby code sync period")
    nimbus_cleanup_inbox_freq_secs: int = key("nimbus.cleanup.inbox.freq.secs", 600, _POS, "inbox cleanup period")
    nimbus_inbox_jar_expiration_secs: int = key(
        "nimbus.inbox.jar.expiration.secs", 3600, _POS, "uploaded bundle expiry")
    nimbus_api_token: str | None = key(
        "nimbus.api.token", None, Optional(Str()), "token required for write actions", secret=True)
    nimbus_api_token_file: str | None = key(
        "nimbus.api.token.file", None, Optional(Str()),
        "file holding nimbus.api.token (one line; instead of the token in this file)")
    nimbus_api_read_token_required: bool = key(
        "nimbus.api.read.token.required", False, Bool(), "require the token for reads too")
    nimbus_api_insecure: bool = key(
        "nimbus.api.insecure", False, Bool(),
        "let nimbus listen on a non-loopback address without an API token (anyone reaching it can run code)")
    nimbus_max_request_bytes: int = key(
        "nimbus.max.request.bytes", 64 * 1024 * 1024, _POS, "largest accepted HTTP body")
    nimbus_slots_perTopology: int = key(  # noqa: N815 - Storm's key name
        "nimbus.slots.perTopology", 1000, _POS,
        "the most workers one topology may ask for, at submit or rebalance (Storm's key; Gale bounds it by default)")
    nimbus_executors_perTopology: int = key(  # noqa: N815 - Storm's key name
        "nimbus.executors.perTopology", 20_000, _POS,
        "the most executors (ackers included) one topology may ask for, at submit or rebalance (Storm's key; Gale "
        "bounds it by default)")
    nimbus_tasks_perTopology: int = key(  # noqa: N815 - after Storm's two above
        "nimbus.tasks.perTopology", 20_000, _POS,
        "Gale: the most tasks (ackers included) one topology may ask for, at submit or rebalance: a worker keeps "
        "routing state for every task")
    nimbus_assignment_max_bytes: int = key(
        "nimbus.assignment.max.bytes", 512 * 1024, Int(1024, 1_000_000),
        "largest assignment znode nimbus writes: a submit or rebalance whose assignment could be bigger is "
        "refused (ZooKeeper refuses requests over its jute.maxbuffer, 1 MiB by default)")
    nimbus_shutdown_timeout_secs: int = key(
        "nimbus.shutdown.timeout.secs", 5, _POS,
        "Gale: a nimbus told to stop (SIGTERM) exits within this, whatever is unreachable")
    topology_min_replication_count: int = key(
        "topology.min.replication.count", 1, _POS, "nimbus copies of code before submit returns")
    topology_max_replication_wait_time_sec: int = key(
        "topology.max.replication.wait.time.sec", 60, Int(-1), "wait for replication, secs")
    # Supervisor
    supervisor_slots_ports: tuple[int, ...] = key(
        "supervisor.slots.ports", [6700, 6701, 6702, 6703], ListOf(_PORT), "worker slots")
    supervisor_worker_timeout_secs: int = key("supervisor.worker.timeout.secs", 30, _POS, "worker heartbeat timeout")
    supervisor_worker_start_timeout_secs: int = key(
        "supervisor.worker.start.timeout.secs", 120, _POS, "first heartbeat timeout")
    supervisor_worker_shutdown_sleep_secs: int = key(
        "supervisor.worker.shutdown.sleep.secs", 3, _NONNEG,
        "SIGTERM grace before SIGKILL; a worker told to stop exits within it")
    supervisor_shutdown_timeout_secs: int = key(
        "supervisor.shutdown.timeout.secs", 5, _POS,
        "Gale: a supervisor told to stop exits within this (plus the worker grace when it kills its workers)")
    supervisor_monitor_frequency_secs: int = key("supervisor.monitor.frequency.secs", 3, _POS, "slot check period")
    supervisor_heartbeat_frequency_secs: int = key(
        "supervisor.heartbeat.frequency.secs", 5, _POS, "supervisor znode refresh period")
    supervisor_enable: bool = key("supervisor.enable", True, Bool(), "launch workers")
    supervisor_worker_fork_server: bool = key(
        "supervisor.worker.fork.server", True, Bool(),
        "Gale: fork workers from a process that imported the worker once (about half a second of CPU less "
        "a start); false: exec each worker's interpreter afresh")
    supervisor_metrics_port: int = key(
        "supervisor.metrics.port", 0, Int(0, 65535), "supervisor /metrics port (0: any)")
    supervisor_metrics_host: str = key(
        "supervisor.metrics.host", "0.0.0.0", Str(), "address the supervisor's /metrics server binds to")
    supervisor_scheduler_meta: Mapping[str, str] = key(
        "supervisor.scheduler.meta", {}, MapOf(Str()), "free-form scheduler metadata")
    supervisor_id: str | None = key(
        "supervisor.id", None, Optional(Str()), "fixed supervisor id (default: generated)")
    # Log viewer: each supervisor's log server (gale.supervisor.logserver; docs/ui.md)
    logviewer_port: int = key(
        "logviewer.port", 8000, Int(0, 65535),
        "port of the supervisor's log server (worker logs, thread dumps, CPU profiles); 0, or a port taken: any free "
        "port (the address is published in the supervisor's ZooKeeper record, where nimbus finds it)")
    logviewer_host: str | None = key(
        "logviewer.host", None, Optional(Str()),
        "address the log server binds to (null: 0.0.0.0 with nimbus.api.token, 127.0.0.1 without one; a "
        "non-loopback address without a token needs nimbus.api.insecure)")
    # Worker
    worker_heartbeat_frequency_secs: int = key(
        "worker.heartbeat.frequency.secs", 1, _POS, "LocalState heartbeat period")
    worker_childopts: tuple[str, ...] = key("worker.childopts", [], ListOf(Str()), "extra worker interpreter options")
    worker_metrics_port_offset: int = key(
        "worker.metrics.port.offset", 1000, Int(0, 60000), "worker /metrics port = slot + off")
    worker_metrics_host: str = key(
        "worker.metrics.host", "0.0.0.0", Str(), "address a worker's /metrics server binds to")
    worker_transfer_host: str | None = key(
        "worker.transfer.host", None, Optional(Str()),
        "address a worker's slot port (tuples from other workers) binds to (null: the address "
        "storm.local.hostname resolves to)")
    worker_log_max_bytes: int = key("worker.log.max.bytes", 50 * 1024 * 1024, _POS, "worker log file rotation size")
    worker_log_backups: int = key("worker.log.backups", 5, _NONNEG, "rotated worker log files kept")
    task_heartbeat_frequency_secs: int = key("task.heartbeat.frequency.secs", 3, _POS, "workerbeats znode period")
    task_refresh_poll_secs: int = key("task.refresh.poll.secs", 10, _POS, "assignment/status re-read period")
    # Topology
    topology_name: str | None = key("topology.name", None, Optional(Str()), "set by submit")
    topology_workers: int = key("topology.workers", 1, _POS, "worker processes")
    topology_acker_executors: int | None = key(
        "topology.acker.executors", None, Optional(_NONNEG), "acker executors (null: one/worker)")
    topology_message_timeout_secs: int = key("topology.message.timeout.secs", 30, _POS, "tuple tree timeout")
    topology_enable_message_timeouts: bool = key(
        "topology.enable.message.timeouts", True, Bool(), "time tuple trees out")
    topology_replay_on_restart: bool = key(
        "topology.replay.on.restart", True, Bool(),
        "a restarted bolt or acker executor makes the spouts fail their pending trees at once")
    topology_max_spout_pending: int | None = key(
        "topology.max.spout.pending", None, Optional(_POS), "pending tuples per spout task")
    topology_tick_tuple_freq_secs: float | None = key(
        "topology.tick.tuple.freq.secs", None, Optional(Number(0.001)), "tick tuple period")
    topology_error_throttle_interval_secs: int = key(
        "topology.error.throttle.interval.secs", 10, _POS, "error report window")
    topology_max_error_report_per_interval: int = key(
        "topology.max.error.report.per.interval", 5, _POS, "error reports per window")
    topology_debug: bool = key("topology.debug", False, Bool(), "log every tuple")
    topology_tasks: int | None = key("topology.tasks", None, Optional(_POS), "default task count per component")
    topology_executor_receive_buffer_size: int = key(
        "topology.executor.receive.buffer.size", 32768, _POS, "executor input queue size")
    topology_transfer_batch_size: int = key(
        "topology.transfer.batch.size", 1000, _POS, "tuples per inter-worker batch")
    topology_transfer_flush_millis: float = key(
        "topology.transfer.flush.millis", 1, Number(0), "inter-worker flush interval")
    topology_transfer_max_tuple_bytes: int = key(
        "topology.transfer.max.tuple.bytes", 32 * 1024 * 1024, _POS,
        "largest tuple sent to another worker (bigger ones fail at emit)")
    topology_disable_loadaware_messaging: bool = key(
        "topology.disable.loadaware.messaging", False, Bool(),
        "shuffle groupings spread evenly over every target task instead of preferring this worker's "
        "tasks while they keep up (docs/architecture.md, \"Load-aware shuffle\")")
    topology_localityaware_higher_bound: float = key(
        "topology.localityaware.higher.bound", 0.8, Number(0.0, 1.0),
        "a load-aware shuffle widens its scope (worker → host → everywhere) while the current one's "
        "average load (input queue or outbox fullness, 0..1) is at least this")
    topology_localityaware_lower_bound: float = key(
        "topology.localityaware.lower.bound", 0.2, Number(0.0, 1.0),
        "…and narrows it again while the nearer scope's average load is below this (must be below the "
        "higher bound)")
    topology_worker_executor_threads: int = key(
        "topology.worker.executor.threads", 1, _POS, "executor threads per worker")
    topology_worker_gc_threshold: int | None = key(
        "topology.worker.gc.threshold", 10000, Optional(_POS),
        "Gale: the garbage collector's youngest-generation threshold a worker raises Python's to "
        "(never lowers; null: leave it). Tuples in flight are many short-lived tracked objects; at "
        "Python's default of 700 collections cost ~15% of the per-tuple path (docs/benchmarks.md)")
    topology_worker_gil_switch_interval_ms: float | None = key(
        "topology.worker.gil.switch.interval.ms", 0.5, Optional(Number(0.01, 1000.0)),
        "Gale: the interpreter's thread switch interval in a worker process (sys.setswitchinterval; "
        "Python's default is 5 ms; null: leave it). A busy executor thread otherwise holds the worker's "
        "other threads (the transfer's standby, heartbeats, metrics) off for up to the interval each "
        "time they wait (docs/benchmarks.md)")
    topology_worker_timeout_secs: int | None = key(
        "topology.worker.timeout.secs", None, Optional(_POS), "per-topology heartbeat timeout")
    topology_kill_wait_secs: int | None = key("topology.kill.wait.secs", None, Optional(_NONNEG), "default kill wait")
    topology_stats_sample_rate: float = key("topology.stats.sample.rate", 0.05, Number(0.0), "latency sampling rate")
    topology_spout_wait_sleep_millis: float = key(
        "topology.spout.wait.sleep.millis", 1, Number(0), "spout idle sleep")
    topology_spout_wait_idle_max_sleep_millis: float = key(
        "topology.spout.wait.idle.max.sleep.millis", 10, Number(0),
        "the spout idle sleep a long-idle spout grows to (at most spout.wait.sleep.millis: no growth)")
    topology_spout_max_retries: int | None = key(
        "topology.spout.max.retries", None, Optional(_NONNEG),
        "Gale: replays of a failed message by a ReliableSpout before on_retries_exhausted (null: no limit)")
    # Windowed bolts (docs/windows.md): Storm's keys, then Gale's
    topology_bolts_window_length_count: int | None = key(
        "topology.bolts.window.length.count", None, Optional(_POS), "count window length, tuples")
    topology_bolts_window_length_duration_ms: int | None = key(
        "topology.bolts.window.length.duration.ms", None, Optional(_POS), "duration window length, ms")
    topology_bolts_window_sliding_interval_count: int | None = key(
        "topology.bolts.window.sliding.interval.count", None, Optional(_POS),
        "count window sliding interval, tuples (default 1)")
    topology_bolts_window_sliding_interval_duration_ms: int | None = key(
        "topology.bolts.window.sliding.interval.duration.ms", None, Optional(_POS),
        "duration window sliding interval, ms (default: the length, a tumbling window)")
    topology_bolts_tuple_timestamp_field_name: str | None = key(
        "topology.bolts.tuple.timestamp.field.name", None, Optional(Str()), "event time: the timestamp field (ms)")
    topology_bolts_tuple_timestamp_max_lag_ms: int = key(
        "topology.bolts.tuple.timestamp.max.lag.ms", 0, _NONNEG,
        "event time: the watermark trails the newest timestamp by this (max out-of-orderness), ms")
    topology_bolts_watermark_event_interval_ms: int = key(
        "topology.bolts.watermark.event.interval.ms", 1000, _POS, "event time: watermark period, ms")
    topology_bolts_late_tuple_stream: str | None = key(
        "topology.bolts.late.tuple.stream", None, Optional(Str()),
        "event time: stream for late tuples (field late_tuple); null: acked and counted (late_tuples)")
    topology_bolts_tuple_timestamp_extractor: bool = key(
        "topology.bolts.tuple.timestamp.extractor", False, Bool(),
        "Gale: set by with_timestamp_extractor (event time from a function on the bolt)")
    topology_bolts_window_session_gap_ms: int | None = key(
        "topology.bolts.window.session.gap.ms", None, Optional(_POS),
        "Gale: session windows: a session closes after this long without a tuple of its key, ms")
    topology_bolts_window_session_key_field: str | None = key(
        "topology.bolts.window.session.key.field", None, Optional(Str()),
        "Gale: session windows: sessions are per value of this field (null: one per task)")
    topology_bolts_window_allowed_lateness_ms: int = key(
        "topology.bolts.window.allowed.lateness.ms", 0, _NONNEG,
        "Gale: event time: windows stay this long after the watermark passed their end; a late tuple in "
        "one fires it again as an update, ms")
    topology_bolts_watermark_idle_timeout_ms: int = key(
        "topology.bolts.watermark.idle.timeout.ms", 10000, _POS,
        "Gale: event time: an input task silent this long stops holding the watermark back, ms")
    topology_bolts_window_persistent: bool = key(
        "topology.bolts.window.persistent", False, Bool(),
        "Gale: set by with_persistence(): the window's contents live in managed state (checkpointed), and "
        "its tuples are acked when their checkpoint commits")
    # Managed state (docs/state.md)
    topology_state_checkpoint_interval_ms: int = key(
        "topology.state.checkpoint.interval.ms", 1000, _POS,
        "period of state checkpoints; must be below topology.message.timeout.secs")
    topology_state_provider: str = key(
        "topology.state.provider", "memory", Str(("memory", "redis", "sqlite")),
        "where checkpoints of managed state live: memory (per worker process, lost with it), redis, or sqlite "
        "(a file on this machine: local mode and one-machine clusters)")
    topology_state_sqlite_path: str = key(
        "topology.state.sqlite.path", "gale-state.sqlite3", Str(),
        "Gale: the SQLite file of topology.state.provider sqlite (a directory: the file gale-state.sqlite3 in it)")
    topology_state_redis_url: str = key(
        "topology.state.redis.url", "redis://127.0.0.1:6379/0", Str(),
        "Gale: the Redis server of topology.state.provider redis")
    topology_state_guarantee: str = key(
        "topology.state.guarantee", "at-least-once", Str(("at-least-once", "exactly-once")),
        "Gale: at-least-once (Storm's checkpoints: a replay can count an input twice) or exactly-once (a "
        "consistent cut of states and source positions; a failure rolls the topology back to it; every spout "
        "must be able to rewind)")
    topology_state_key_groups: int = key(
        "topology.state.key.groups", 128, Int(1, 32768),
        "Gale: key groups of keyed state (the most tasks a stateful bolt can be rescaled to)")
    # Bytewax dataflows (docs/bytewax.md)
    topology_bytewax_recovery: bool = key(
        "topology.bytewax.recovery", False, Bool(),
        "Gale: a Bytewax dataflow keeps its stateful steps' state and its sources' positions in managed state, "
        "checkpointed every topology.state.checkpoint.interval.ms (Bytewax's recovery)")
    topology_bytewax_fast_operators: bool = key(
        "topology.bytewax.fast.operators", True, Bool(),
        "Gale: run Bytewax's library operators (map, flat_map, key_on, stateful_map, ...) by equivalent code "
        "without their per-item shims; false: the operators' own Python")
    topology_spark_master: str = key("topology.spark.master", "local[2]", Str(), "Spark master URL or sc:// endpoint")
    topology_spark_conf: Mapping[str, Any] = key("topology.spark.conf", {}, MapOf(AnyValue()), "extra Spark settings")
    topology_spark_batch_size: int = key("topology.spark.batch.size", 10000, _POS, "tuples per Spark micro-batch")
    topology_spark_batch_millis: int = key(
        "topology.spark.batch.millis", 2000, _POS, "max wait before a partial batch runs")
    topology_spark_start_timeout_secs: int = key(
        "topology.spark.start.timeout.secs", 300, _POS, "Spark batches fail if Spark is not up by then")
    topology_spark_start_retry_secs: int = key(
        "topology.spark.start.retry.secs", 30, _NONNEG,
        "after a failed Spark start, retry after this long (doubling, at most 300 s; 0: never)")
    topology_spark_batch_timeout_secs: int | None = key(
        "topology.spark.batch.timeout.secs", None, Optional(_POS),
        "interrupt a Spark batch running longer (null: max(120, 4 x message timeout))")
    topology_secret: str | None = key(
        "topology.secret", None, Optional(Str()),
        "per-topology transport secret: generated by nimbus at submit, never set by users", secret=True)
    # Multi-lang (shell components: docs/multilang.md)
    topology_multilang_serializer: str = key(
        "topology.multilang.serializer", "org.apache.storm.multilang.JsonSerializer", Str(MULTILANG_SERIALIZERS),
        "wire format with shell subprocesses: JSON (Storm's JsonSerializer, 'json') or msgpack ('msgpack')")
    topology_shellbolt_max_pending: int = key(
        "topology.shellbolt.max.pending", 100, _POS, "tuples a shell bolt task holds unwritten to its subprocess")
    topology_subprocess_timeout_secs: int | None = key(
        "topology.subprocess.timeout.secs", None, Optional(_POS),
        "a shell subprocess silent this long is killed (null: supervisor.worker.timeout.secs)")
    topology_multilang_restart_secs: float = key(
        "topology.multilang.restart.secs", 1, Number(0.1),
        "Gale: a failed shell subprocess is started again after this (doubling per failure in a row, at most 60 s)")
    streamparse_env: str | None = key(
        "streamparse.env", None, Optional(Str()),
        "Gale: the config.json environment a streamparse topology is submitted with (when it lists several)")

    #: keys outside Gale's namespaces that a topology's configuration carries (``kafka.topic``,
    #: ``my.app.limit``): read-only, as given
    user: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def resolve(cls, conf: Mapping[str, Any], *, where: str = "configuration", allow_user_keys: bool) -> Config:
        """Validate ``conf`` (:func:`validate`: the same refusals and messages) and return it
        resolved: every key it does not set has its default. ``allow_user_keys`` admits keys
        outside Gale's namespaces (a topology's configuration); they go to :attr:`user`."""
        validate(conf, where=where, allow_user_keys=allow_user_keys)
        values, user = _split(conf)
        return cls(**values, user=MappingProxyType(user))

    def with_overrides(self, conf: Mapping[str, Any], *, where: str = "component configuration",
                       allow_user_keys: bool = True) -> Config:
        """This configuration with ``conf`` over it, validated like :meth:`resolve`: a
        component's own configuration over its topology's, a topology's over the cluster's."""
        validate(conf, where=where, allow_user_keys=allow_user_keys)
        values, user = _split(conf)
        if user:
            user = {**self.user, **user}
            return replace(self, **values, user=MappingProxyType(user))
        return replace(self, **values) if values else self

    def to_dict(self, *, without_secret: bool = False) -> dict[str, Any]:
        """Every key by name — Gale's (lists and dicts again) in the table's order, then the user
        keys — as configuration travels: to user code, JSON or YAML. ``without_secret`` leaves
        out ``topology.secret`` (what a topology's code and its logs may see)."""
        out = {k.name: _thaw(getattr(self, attr)) for attr, k in _FIELDS}
        if without_secret:
            del out[TOPOLOGY_SECRET]
        out.update(self.user)
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        # the read-only mappings do not pickle; the plain dict does
        return (_from_dict, (self.to_dict(),))


def _split(conf: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A validated mapping as (attribute → frozen value, user key → value)."""
    values: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for name, value in conf.items():
        attr = ATTRIBUTES.get(name)
        if attr is None:
            user[name] = value
        else:
            values[attr] = _freeze(value)
    return values, user


def _from_dict(conf: dict[str, Any]) -> Config:
    values, user = _split(conf)
    return Config(**values, user=MappingProxyType(user))


_FIELDS: tuple[tuple[str, Key], ...] = tuple((f.name, f.metadata["key"]) for f in fields(Config) if "key" in f.metadata)
for _attr, _key in _FIELDS:
    if _attr != attribute_name(_key.name):  # fail at import, not at the first read
        raise TypeError(f"Config.{_attr} declares key {_key.name!r}: its attribute must be {attribute_name(_key.name)}")

#: every known key by name
KEYS: dict[str, Key] = {k.name: k for _, k in _FIELDS}
#: key name → attribute of :class:`Config`
ATTRIBUTES: dict[str, str] = {k.name: attr for attr, k in _FIELDS}
#: the keys that hold credentials: hidden wherever configuration is shown
SECRET_KEYS: frozenset[str] = frozenset(name for name, k in KEYS.items() if k.secret)
#: the per-topology transport secret nimbus generates at submit (``Config.topology_secret``)
TOPOLOGY_SECRET = "topology.secret"


# --------------------------------------------------------------------------------------------
# Validation


@functools.lru_cache(maxsize=4096)  # a topology's user keys are checked at every resolve
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
        known = KEYS.get(name)
        if known is None:
            reserved = name.startswith(RESERVED_PREFIXES)
            if not allow_user_keys or reserved or suggest(name):
                raise ConfigError(_unknown_key_message(name, where))
            continue
        if not known.type.check(value):
            raise ConfigError(
                f"invalid value for {name!r} in {where}: {value!r} ({type(value).__name__}); "
                f"expected {known.type.describe()}"
            )
