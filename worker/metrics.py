"""A worker's Prometheus metrics, served on its slot port + ``worker.metrics.port.offset``.

Values are read from the executors' own counters at scrape time (nothing is added to the tuple
path). Labels: ``component``, ``stream`` (for bolts' acked/failed/executed and latencies the
stream is the input ``component:stream``, as Storm's ``__ack-count`` keys), ``reason``. The
topology, supervisor and slot come from nimbus's service discovery as target labels, and from
``gale_worker_info``.

==================================================== ======================================================
``gale_worker_tuples_emitted_total``                  tuples emitted, by component and output stream
``gale_worker_tuples_transferred_total``              emitted tuples sent to at least one task
``gale_worker_tuples_acked_total``                    spouts: trees completed; bolts: inputs acked
``gale_worker_tuples_failed_total``                   by ``reason``: explicit (failed) or timeout (spouts)
``gale_worker_tuples_executed_total``                 bolts: inputs executed
``gale_worker_complete_latency_seconds``              summary (sum, count): spout emit → tree completion
``gale_worker_execute_latency_seconds``               summary: time in execute() (sampled)
``gale_worker_process_latency_seconds``               summary: bolt receipt → ack (sampled)
``gale_worker_queue_depth``                           tuples waiting in the component's input queues
``gale_worker_spout_pending_tuples``                  spout tuples emitted and not yet acked or failed
``gale_worker_errors_reported_total``                 errors raised by the component's user code
``gale_worker_backpressure_active``                   1 while spouts are paused by backpressure
``gale_worker_backpressure_events_total``             times backpressure began (sampled every 0.1 s)
``gale_worker_backpressure_seconds_total``            time spent under backpressure (sampled every 0.1 s)
``gale_worker_transfer_*_total``                      inter-worker batches/messages sent, received, dropped,
                                                      undeliverable
``gale_worker_transfer_batches_rejected_total``       batches refused, by ``reason``: malformed, bad_mac,
                                                      replayed, stale (``gale.worker.batch_auth``)
``gale_worker_transfer_messages_invalid_total``       messages of authentic batches dropped, by ``reason``:
                                                      unknown_kind, unknown_task, malformed, out_of_range,
                                                      unknown_stream, not_subscribed, undecodable (``gale.worker.wire``)
``gale_worker_acker_dropped_invalid_total``            acker messages with a value outside 64 bits, dropped
                                                      by the acker itself (none get past the transfer)
``gale_worker_transfer_queued_messages``              messages waiting to be sent to other workers
``gale_worker_dead_letters_total``                    records a spout could not emit as data and sent to its
                                                      error stream, by component and ``source`` (kafka,
                                                      rabbitmq); see ``gale.worker.connectors.dead_letter``
``gale_worker_extra_<name>``                          component counters and gauges (Spark batches, rows,
                                                      latencies; Kafka/RabbitMQ connector counters)
``gale_worker_spouts_active``, ``gale_worker_executors``, ``gale_worker_uptime_seconds``, ``gale_worker_info``
==================================================== ======================================================

Latency summaries are exported as ``_sum``/``_count`` pairs: ``rate(x_sum[1m]) / rate(x_count[1m])``
is the mean latency over the last minute. Execute and process latencies are sampled
(``topology.stats.sample.rate``), so their ``_count`` counts samples, not tuples.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, defaultdict
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from gale.log import get_logger
from gale.metrics import new_registry
from gale.records import GALE_VERSION
from gale.worker.runtime.grouping import SCOPE_NAMES

log = get_logger("worker.metrics")

TRANSFER_COUNTERS = {
    "sent_batches": ("gale_worker_transfer_batches_sent", "Batches sent to other workers."),
    "sent_messages": ("gale_worker_transfer_messages_sent", "Messages sent to other workers."),
    "received_batches": ("gale_worker_transfer_batches_received", "Batches received from other workers."),
    "received_messages": ("gale_worker_transfer_messages_received", "Messages received from other workers."),
    "dropped_messages": ("gale_worker_transfer_messages_dropped",
                         "Messages dropped for a worker that is down or left the plan (they time out and replay)."),
    "undeliverable": ("gale_worker_transfer_messages_undeliverable", "Messages for a task with no known worker."),
    "load_reports_sent": ("gale_worker_transfer_load_reports_sent",
                          "Load reports (busy share, queue fill) sent to other workers, one a second to each."),
    "load_reports_received": ("gale_worker_transfer_load_reports_received", "Load reports taken from other workers."),
}
_NAME = re.compile(r"[^a-zA-Z0-9_]")
#: connector counters named ``<source>_dead_letters`` (gale.worker.connectors.dead_letter)
DEAD_LETTER_SUFFIX = "_dead_letters"
BACKPRESSURE_SAMPLE_SECS = 0.1


def metric_name(key: str) -> str:
    name = _NAME.sub("_", key).strip("_").lower() or "value"
    return f"gale_worker_extra_{name}"


class WorkerMetrics:
    def __init__(self, worker: Any, registry=None):
        self.worker = worker
        self.registry = registry or new_registry()
        self.port: int | None = None
        self._server = None
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self.backpressure_events = 0
        self.backpressure_secs = 0.0
        self._congested = False
        self.registry.register(_WorkerCollector(self))

    def serve(self, port: int, host: str | None = None) -> int:
        if host is None:
            host = self.worker.config.worker_metrics_host
        self._server, _thread = start_http_server(int(port), addr=host, registry=self.registry)
        self.port = self._server.server_port
        self._sampler = threading.Thread(target=self._sample_loop, name="metrics-backpressure", daemon=True)
        self._sampler.start()
        log.info("metrics-listening", host=host, port=self.port)
        return self.port

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def sample_backpressure(self, elapsed: float) -> None:
        runtime = getattr(self.worker, "runtime", None)
        congested = bool(runtime is not None and runtime.congested)
        if congested:
            self.backpressure_secs += elapsed
            if not self._congested:
                self.backpressure_events += 1
        self._congested = congested

    def _sample_loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(BACKPRESSURE_SAMPLE_SECS):
            now = time.monotonic()
            self.sample_backpressure(now - last)
            last = now


class _WorkerCollector:
    def __init__(self, metrics: WorkerMetrics):
        self.metrics = metrics

    def describe(self):
        return []

    def collect(self):
        w = self.metrics.worker
        info = GaugeMetricFamily("gale_worker_info", "This worker: topology, slot, supervisor, worker id, version.",
                                 labels=["topology_id", "supervisor_id", "port", "worker_id", "version"])
        info.add_metric([str(w.topology_id), str(w.supervisor_id), str(w.port), str(w.worker_id), GALE_VERSION], 1)
        yield info
        yield _gauge("gale_worker_uptime_seconds", "Seconds since this worker started.",
                     max(0.0, time.time() - w.started))
        runtime = getattr(w, "runtime", None)
        if runtime is not None:
            yield from _executor_families(runtime)
            yield _gauge("gale_worker_spouts_active", "1 while the topology is active here.", 1 if runtime.active else 0)
            yield _gauge("gale_worker_backpressure_active", "1 while spouts are paused by backpressure.",
                         1 if runtime.congested else 0)
            yield _shuffle_scopes(runtime)
            shuffles = list(runtime.load_aware)
            if shuffles:
                yield _gauge("gale_worker_shuffle_spill",
                             "Share of load-aware shuffle choices sent past the current scope because this worker's "
                             "executor threads are busier than its peers' (mean over this worker's load-aware shuffles).",
                             sum(g.spill for g in shuffles) / len(shuffles))
        yield _counter("gale_worker_backpressure_events", "Times backpressure began (sampled every 0.1 s).",
                       self.metrics.backpressure_events)
        yield _counter("gale_worker_backpressure_seconds", "Time under backpressure (sampled every 0.1 s).",
                       self.metrics.backpressure_secs)
        transfer = getattr(w, "transfer", None)
        if transfer is not None:
            stats = dict(transfer.stats)
            for key, (name, doc) in TRANSFER_COUNTERS.items():
                yield _counter(name, doc, stats.get(key, 0))
            yield _by_reason(stats, "rejected_batches_", "gale_worker_transfer_batches_rejected",
                             "Batches from the network refused before use, by reason (not sealed with the topology "
                             "secret for this worker, replayed, stale, malformed).")
            yield _by_reason(stats, "invalid_messages_", "gale_worker_transfer_messages_invalid",
                             "Messages of authentic batches dropped before delivery, by reason.")
            busy = transfer.own_busy()
            if busy is not None:
                yield _gauge("gale_worker_busy_share",
                             "Share of the last second this worker's executor threads were not waiting for work "
                             "(what it reports to peers).", busy)
            queued = transfer.queued()
            yield _gauge("gale_worker_transfer_queued_messages", "Messages waiting to be sent to other workers.", queued)
        if runtime is not None:
            tables = [t for ex in list(runtime.executors.values()) for t in getattr(ex, "tables", {}).values()]
            yield _counter("gale_worker_acker_dropped_invalid",
                           "Acker messages with a root or value outside unsigned 64 bits, dropped by the acker.",
                           sum(getattr(t, "invalid", 0) for t in tables))


def _shuffle_scopes(runtime) -> GaugeMetricFamily:
    fam = GaugeMetricFamily("gale_worker_shuffle_scope",
                            "Load-aware shuffle groupings of this worker's executors by the scope they send to now "
                            "(worker-local while this worker's target tasks keep up; wider when they do not).",
                            labels=["scope"])
    now = Counter(g.scope for g in list(runtime.load_aware))
    for i, name in enumerate(SCOPE_NAMES):
        fam.add_metric([name], now.get(i, 0))
    return fam


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc)
    g.add_metric([], value)
    return g


def _by_reason(stats: dict[str, int], prefix: str, name: str, doc: str) -> CounterMetricFamily:
    c = CounterMetricFamily(name, doc, labels=["reason"])
    for key, value in sorted(stats.items()):
        if key.startswith(prefix):
            c.add_metric([key[len(prefix):]], value)
    return c


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    c = CounterMetricFamily(name, doc)
    c.add_metric([], value)
    return c


def _executor_families(runtime: Any):
    """Per component/stream families summed over this worker's executors."""
    counts: dict[str, dict[tuple[str, ...], float]] = defaultdict(lambda: defaultdict(float))
    sums: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    gauges: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    extras: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    errors: dict[str, float] = defaultdict(float)
    executors = list(runtime.executors.values())
    for ex in executors:
        st = ex.stats
        comp = ex.component
        flat = st.cumulative()
        timed_out = dict(st.timed_out)
        for (metric, key), value in flat.items():
            if metric in ("emitted", "transferred", "acked", "executed"):
                counts[metric][(comp, key)] += value
            elif metric == "failed":
                t = timed_out.get(key, 0) if st.kind == "spout" else 0
                counts["failed"][(comp, key, "explicit")] += value - t
                if st.kind == "spout":
                    counts["failed"][(comp, key, "timeout")] += t
            elif metric in ("complete_ms", "execute_ms", "process_ms"):
                sums[metric][(comp, key)][0] += value / 1000.0
            elif metric in ("complete_n", "execute_n", "process_n"):
                sums[metric.replace("_n", "_ms")][(comp, key)][1] += value
        errors[comp] += st.errors
        gauges["queue"][comp] += ex.queued()
        if st.kind == "spout":
            gauges["pending"][comp] += ex.pending_count()
        for key, value in list(st.extra.items()):
            if isinstance(value, (int, float)):
                extras[key][comp] += value
    described = {
        "emitted": ("gale_worker_tuples_emitted", "Tuples emitted, by component and output stream."),
        "transferred": ("gale_worker_tuples_transferred", "Emitted tuples sent to at least one task."),
        "acked": ("gale_worker_tuples_acked",
                  "Spouts: tuple trees completed (by output stream); bolts: input tuples acked (by input)."),
        "executed": ("gale_worker_tuples_executed", "Bolts: input tuples executed (by input component:stream)."),
    }
    for metric, (name, doc) in described.items():
        fam = CounterMetricFamily(name, doc, labels=["component", "stream"])
        for (comp, key), value in sorted(counts[metric].items()):
            fam.add_metric([comp, key], value)
        yield fam
    failed = CounterMetricFamily("gale_worker_tuples_failed",
                                 "Spouts: tuple trees failed, by reason (explicit: a bolt failed it; timeout); "
                                 "bolts: input tuples failed.", labels=["component", "stream", "reason"])
    for (comp, key, reason), value in sorted(counts["failed"].items()):
        failed.add_metric([comp, key, reason], value)
    yield failed
    latency_docs = {
        "complete_ms": ("gale_worker_complete_latency_seconds", "Spouts: emit to tuple-tree completion."),
        "execute_ms": ("gale_worker_execute_latency_seconds", "Bolts: time in execute() (sampled)."),
        "process_ms": ("gale_worker_process_latency_seconds", "Bolts: receipt to ack (sampled)."),
    }
    for metric, (name, doc) in latency_docs.items():
        fam = SummaryMetricFamily(name, doc, labels=["component", "stream"])
        for (comp, key), (total, n) in sorted(sums[metric].items()):
            fam.add_metric([comp, key], count_value=n, sum_value=total)
        yield fam
    queue = GaugeMetricFamily("gale_worker_queue_depth", "Tuples waiting in the component's input queues.",
                              labels=["component"])
    for comp, n in sorted(gauges["queue"].items()):
        queue.add_metric([comp], n)
    yield queue
    pending = GaugeMetricFamily("gale_worker_spout_pending_tuples",
                                "Spout tuples emitted and not yet acked or failed.", labels=["component"])
    for comp, n in sorted(gauges["pending"].items()):
        pending.add_metric([comp], n)
    yield pending
    errs = CounterMetricFamily("gale_worker_errors_reported", "Errors raised by the component's user code.",
                               labels=["component"])
    for comp, n in sorted(errors.items()):
        errs.add_metric([comp], n)
    yield errs
    yield _gauge("gale_worker_executors", "Executors running in this worker.", len(executors))
    dead = CounterMetricFamily("gale_worker_dead_letters",
                               "Records a spout could not emit as data and sent to its error stream (dead letters), "
                               "by source.", labels=["component", "source"])
    for key, per_comp in sorted(extras.items()):
        if key.endswith(DEAD_LETTER_SUFFIX):
            for comp, value in sorted(per_comp.items()):
                dead.add_metric([comp, key[: -len(DEAD_LETTER_SUFFIX)]], value)
    yield dead
    for key, per_comp in sorted(extras.items()):
        fam = GaugeMetricFamily(metric_name(key), f"Component value {key!r} (summed over this worker's executors).",
                                labels=["component"])
        for comp, value in sorted(per_comp.items()):
            fam.add_metric([comp], value)
        yield fam
