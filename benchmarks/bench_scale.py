"""Scale benchmark: nimbus and ZooKeeper with up to a thousand workers (issue 17).

Run: ``.venv/bin/python -m benchmarks.bench_scale [--sizes 10:10:10,100:10:10,1000:100:100:2000]``

Each size ``W:S:T[:E]`` is W workers on S supervisors running T topologies (the first with E
executors when given). For each size the benchmark starts, from scratch:

* a ZooKeeper ensemble of three servers on loopback (:class:`gale.zkserver.ZooKeeperEnsemble`);
* a nimbus and a standby, real ``nimbus serve`` processes (:class:`gale.nimbus.devcluster.DevCluster`);
* S simulated supervisors in ``--procs`` processes (:mod:`benchmarks.scale_sim`): Gale's own
  supervisor code (registration, assignment watch, slot machines, code download) with workers that
  run Gale's worker coordination code (assignment watch, workerbeats with real executor stats that
  change every beat; one ZooKeeper session per node, or per worker with ``--worker-sessions own``)
  but no executors; slots = W / (0.9 S), so losing 10% of the supervisors leaves room for their
  workers. Supervisor ids are as long as real ones (uuid-hostname). They run at niceness ``--nice``
  (10): they stand for other machines, so on this one they yield the CPU to nimbus and ZooKeeper
  rather than compete with them (``--nice 0`` measures the crowded case).

Storm's default timing keys throughout (``nimbus.monitor.freq.secs`` 10, ``task.heartbeat.frequency.secs``
3, ``supervisor.heartbeat.frequency.secs`` 5, ``storm.zookeeper.session.timeout`` 20 s ...) unless
``-c key=value`` overrides them. It submits the T topologies one after another, waits until every
executor runs, measures a steady window of ``--steady`` seconds, then kills (``kill -9``) the
processes holding 10% of the supervisors and waits until every executor runs again. Prints
``name: value unit`` lines per size and writes them all as JSON (``--json``):

* ``round_secs_p50/p99/max`` — nimbus scheduling rounds (the leader's ``scheduling-round`` log
  lines) in the steady window and over the whole run, with the read/plan/write split and the
  round's own CPU time (``round_cpu_secs``: what the round costs whatever else the machine runs);
* ``submit_to_running_secs_p50/max`` — from a submit's request until every executor of that
  topology has written a workerbeat; ``all_submitted_to_running_secs``;
* ``reassign_after_10pct_loss_secs`` — from the kill until every executor runs again;
* ``zk_writes_per_sec`` (transactions logged by the ZooKeeper leader), ``zk_bytes_in_per_sec``
  (bytes received by the three servers from clients), ``zk_watch_events_per_sec`` (watches
  fired, all servers), ``zk_requests_per_sec`` (packets received, pings included) over the steady
  window; the same rates while submitting (``submit_*``) and while recovering from the loss
  (``loss_*``);
* ``largest_znode_bytes`` (and its path) against ``jute.maxbuffer`` (1 MiB), ``znodes``;
* ``nimbus_cpu_cores`` (leader, steady window, from psutil) and ``nimbus_rss_mib`` (max sampled).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_connections
from pathlib import Path
from typing import Any

import psutil
from kazoo.client import KazooClient

from gale import config as gconfig
from gale.bundle import make_bundle
from gale.nimbus.client import NimbusClient
from gale.nimbus.devcluster import DevCluster
from gale.zkserver import ZooKeeperEnsemble
from benchmarks import scale_sim
from benchmarks.scale_topology import scale_topology

HERE = Path(__file__).resolve().parent
JUTE_MAXBUFFER = 0xFFFFF


@dataclass
class Size:
    workers: int
    supervisors: int
    topologies: int
    largest: int | None = None  # executors of the first topology

    @classmethod
    def parse(cls, text: str) -> Size:
        parts = [int(p) for p in text.split(":")]
        if len(parts) not in (3, 4):
            raise SystemExit(f"--sizes: {text!r} is not WORKERS:SUPERVISORS:TOPOLOGIES[:LARGEST]")
        return cls(*parts)

    @property
    def label(self) -> str:
        return f"{self.workers}w-{self.supervisors}s-{self.topologies}t" + (f"-{self.largest}e" if self.largest else "")

    def plan(self, executors_per_worker: int) -> list[tuple[str, int, int]]:
        """(name, workers, executors) per topology."""
        out = []
        workers_left, topos_left = self.workers, self.topologies
        if self.largest:
            w0 = max(1, min(self.workers - (self.topologies - 1), max(self.workers // self.topologies,
                                                                          self.largest // 20)))
            out.append(("scale-000", w0, self.largest))
            workers_left -= w0
            topos_left -= 1
        start = len(out)
        for i in range(topos_left):
            w = workers_left // topos_left + (1 if i < workers_left % topos_left else 0)
            out.append((f"scale-{start + i:03d}", w, max(w + 2, executors_per_worker * w)))
        return out

    def slots_per_supervisor(self) -> int:
        return max(1, math.ceil(self.workers / (0.9 * self.supervisors)))


@dataclass
class Tracker:
    """What the simulated workers report: which executors run where."""

    expected: dict[str, int] = field(default_factory=dict)  # topology name -> executors
    running: dict[tuple[str, int], tuple[str, frozenset]] = field(default_factory=dict)  # slot -> (tid, executors)
    dead_nodes: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    events: int = 0
    exits: int = 0

    def on_event(self, event: tuple) -> None:
        kind = event[0]
        if kind not in ("running", "exited"):
            return
        _, tid, sup, port, executors, _t = event
        with self.lock:
            self.events += 1
            if sup in self.dead_nodes:
                return
            if kind == "running":
                self.running[(sup, port)] = (tid, frozenset(tuple(e) for e in executors))
            else:
                self.exits += 1
                if self.running.get((sup, port), ("",))[0] == tid:
                    del self.running[(sup, port)]

    def lose_nodes(self, nodes: set[str]) -> None:
        with self.lock:
            self.dead_nodes |= nodes
            for slot in [s for s in self.running if s[0] in nodes]:
                del self.running[slot]

    def executors_running(self) -> dict[str, int]:
        per: dict[str, set] = {}
        with self.lock:
            for tid, exs in self.running.values():
                per.setdefault(tid, set()).update(exs)
        return {tid: len(exs) for tid, exs in per.items()}

    def fully_running(self, ids: dict[str, str]) -> set[str]:
        """Names of the topologies whose every executor runs (``ids``: name -> topology id)."""
        counts = self.executors_running()
        return {name for name, tid in ids.items() if counts.get(tid, 0) >= self.expected[name]}


class NodeProcesses:
    """The processes hosting the simulated supervisors, and the thread collecting their events."""

    def __init__(self, size: Size, conf: dict[str, Any], base: Path, procs: int, tracker: Tracker,
                 worker_sessions: str, tuples_per_sec: float, niceness: int = 0):
        self.ctx = mp.get_context("spawn")
        self.tracker = tracker
        self.procs: list[Any] = []
        self.controls: list[Any] = []
        self.readers: list[Any] = []
        self.nodes_of: list[list[str]] = []
        self.up: set[int] = set()
        slots = size.slots_per_supervisor()
        n = min(procs, size.supervisors)
        specs: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        for i in range(size.supervisors):
            sid = f"{uuid.uuid4()}-sim{i:03d}.example.com"  # as long as a real supervisor id (uuid-hostname)
            specs[i % n].append({"id": sid, "ports": list(range(6700, 6700 + slots)),
                                 "local_dir": str(base / "nodes" / sid)})
        for p in range(n):
            reader, writer = self.ctx.Pipe(duplex=False)
            ctl_r, ctl_w = self.ctx.Pipe(duplex=False)
            proc = self.ctx.Process(target=_node_process, args=(specs[p], conf, writer, ctl_r, worker_sessions,
                                                                 tuples_per_sec, niceness), name=f"scale-nodes-{p}", daemon=True)
            proc.start()
            writer.close()
            self.procs.append(proc)
            self.controls.append(ctl_w)
            self.readers.append(reader)
            self.nodes_of.append([s["id"] for s in specs[p]])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._collect, name="scale-events", daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        readers = list(self.readers)
        while readers and not self._stop.is_set():
            for conn in wait_connections(readers, timeout=0.5):
                try:
                    event = conn.recv()
                except (EOFError, OSError):
                    readers.remove(conn)
                    continue
                if event[0] == "nodes-up":
                    self.up.add(self.readers.index(conn))
                else:
                    self.tracker.on_event(event)

    def wait_up(self, timeout: float) -> None:
        until(lambda: len(self.up) == len(self.procs) or self._dead(), timeout, "simulated nodes up")
        if self._dead():
            raise RuntimeError(f"a node process exited during start: {self._dead()}")

    def _dead(self) -> list[str]:
        return [p.name for p in self.procs if not p.is_alive()]

    def kill(self, index: int) -> set[str]:
        os.kill(self.procs[index].pid, signal.SIGKILL)
        return set(self.nodes_of[index])

    def stop(self) -> None:
        for proc, ctl in zip(self.procs, self.controls):
            if proc.is_alive():
                try:
                    ctl.send("stop")
                except OSError:
                    pass
        for proc in self.procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
        self._stop.set()


def _node_process(specs, conf, writer, control, worker_sessions, tuples_per_sec, niceness=0) -> None:
    if niceness:
        # the simulated nodes stand for other machines: on this one they yield the CPU to what is
        # measured (nimbus, ZooKeeper), as they would not compete with them on a real cluster
        os.nice(niceness)
    lock = threading.Lock()

    class Events:
        def put(self, event):
            with lock:
                writer.send(event)

    scale_sim.run_nodes(specs, conf, Events(), control, worker_sessions, tuples_per_sec)


def until(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout:.0f}s")


def mntr_totals(ensemble: ZooKeeperEnsemble) -> dict[str, float]:
    """Counters summed over the members, and the leader's transaction count."""
    out = {"bytes_in": 0.0, "watch_events": 0.0, "packets_in": 0.0, "txns": 0.0, "znodes": 0.0, "data_bytes": 0.0,
           "sessions": 0.0}
    for m in ensemble.mntr():
        if not m:
            continue
        out["bytes_in"] += float(m.get("zk_bytes_received_count", 0))
        out["packets_in"] += float(m.get("zk_packets_received", 0))
        out["watch_events"] += sum(float(m.get(f"zk_sum_node_{k}_watch_count", 0))
                                   for k in ("created", "deleted", "changed", "children"))
        if m.get("zk_server_state") == "leader":
            out["txns"] = float(m.get("zk_sum_sync_processor_batch_size", 0))
            out["znodes"] = float(m.get("zk_znode_count", 0))
            out["data_bytes"] = float(m.get("zk_approximate_data_size", 0))
            out["sessions"] = float(m.get("zk_global_sessions", 0))
    return out


def phase_rates(phase: str, m0: dict[str, float], m1: dict[str, float], secs: float) -> dict[str, float]:
    """ZooKeeper writes, bytes and watch events per second over a phase (submitting, recovering)."""
    secs = max(secs, 1e-6)
    return {
        f"{phase}_zk_writes_per_sec": round((m1["txns"] - m0["txns"]) / secs, 1),
        f"{phase}_zk_bytes_in_per_sec": round((m1["bytes_in"] - m0["bytes_in"]) / secs),
        f"{phase}_zk_watch_events_per_sec": round((m1["watch_events"] - m0["watch_events"]) / secs, 1),
    }


def largest_znode(address: str, root: str) -> tuple[int, str, int]:
    """(bytes, path, count) of the largest znode under ``root``."""
    zk = KazooClient(hosts=address, timeout=30)
    zk.start(timeout=30)
    best, best_path, count = 0, "", 0
    try:
        stack = [root]
        while stack:
            path = stack.pop()
            stat = zk.exists(path)
            if stat is None:
                continue
            count += 1
            if stat.dataLength > best:
                best, best_path = stat.dataLength, path
            if stat.numChildren:
                try:
                    stack.extend(f"{path}/{c}" for c in zk.get_children(path))
                except Exception:  # noqa: BLE001 - vanished meanwhile
                    pass
    finally:
        zk.stop()
        zk.close()
    return best, best_path, count


def round_lines(log_path: Path, since: float = 0.0, until_t: float = float("inf")) -> list[dict[str, Any]]:
    out = []
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        if '"scheduling-round"' not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        t = _log_time(rec)
        if since <= t <= until_t:
            out.append(rec)
    return out


def _log_time(rec: dict[str, Any]) -> float:
    ts = rec.get("timestamp")
    if isinstance(ts, (int, float)):
        return float(ts)
    if isinstance(ts, str):
        from datetime import datetime

        try:
            return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, math.ceil(q / 100 * len(values)) - 1))
    return values[k]


class Sampler:
    """RSS of a process every few seconds (max kept)."""

    def __init__(self, pid: int, period: float = 2.0):
        self.proc = psutil.Process(pid)
        self.max_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.max_rss = max(self.max_rss, self.proc.memory_info().rss)
            except psutil.Error:
                return
            self._stop.wait(2.0)

    def stop(self) -> None:
        self._stop.set()


def run_size(size: Size, args, overrides: dict[str, Any]) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix=f"gale-scale-{size.label}-"))
    out: dict[str, Any] = {"size": size.label, "workers": size.workers, "supervisors": size.supervisors,
                           "topologies": size.topologies, "largest_executors": size.largest}
    ensemble = ZooKeeperEnsemble(3, base_dir=base / "zk")
    cluster = nodes = None
    tracker = Tracker()
    t_begin = time.time()
    try:
        ensemble.start()
        cluster = DevCluster(base / "cluster", supervisors=0, nimbuses=2, zookeeper=ensemble, conf=overrides,
                             log_format="json")
        cluster.start(timeout=120)
        leader = cluster.wait_for_leader(120)
        nimbus_pid = cluster.nimbus_procs[leader].proc.pid
        nimbus_log = cluster.nimbus_procs[leader].log_path
        client_conf = cluster.client_conf()
        node_conf = cluster.base_conf()
        node_conf = gconfig.daemon_config(overrides=node_conf)
        nodes = NodeProcesses(size, node_conf, base, args.procs, tracker, args.worker_sessions, args.tuples_per_sec,
                              args.nice)
        nodes.wait_up(300)
        until(lambda: len(cluster.cluster()["supervisors"]) >= size.supervisors, 120, "supervisors registered")
        log(f"{size.label}: {size.supervisors} supervisors x {size.slots_per_supervisor()} slots up")
        rss = Sampler(nimbus_pid)

        # ---- submit
        code_dir = base / "code"
        code_dir.mkdir()
        shutil.copy(HERE / "scale_topology.py", code_dir / "scale_topology.py")
        plan = size.plan(args.executors_per_worker)
        ids: dict[str, str] = {}
        submitted_at: dict[str, float] = {}
        submit_secs = []
        m_submit0 = mntr_totals(ensemble)
        t_submit0 = time.time()
        with NimbusClient(client_conf, timeout=300) as client:
            for name, workers, executors in plan:
                topo = scale_topology(name, executors, workers)
                bundle = make_bundle(code_dir, topo.to_json(), topo.conf)
                tracker.expected[name] = executors
                t0 = time.time()
                ids[name] = client.submit(name, bundle)
                submitted_at[name] = t0
                submit_secs.append(time.time() - t0)
        running_at: dict[str, float] = {}

        def all_running() -> bool:
            now = time.time()
            for name in tracker.fully_running(ids):
                running_at.setdefault(name, now)
            return len(running_at) == len(ids)

        try:
            until(all_running, args.timeout, "every executor running")
        except TimeoutError:
            counts = tracker.executors_running()
            missing = {n: (counts.get(ids[n], 0), tracker.expected[n]) for n in ids if n not in running_at}
            raise TimeoutError(f"not every executor runs after {args.timeout}s: {dict(list(missing.items())[:5])}")
        t_all = time.time()
        out.update(phase_rates("submit", m_submit0, mntr_totals(ensemble), t_all - t_submit0))
        to_running = [running_at[n] - submitted_at[n] for n in ids]
        out.update({
            "executors": sum(tracker.expected.values()),
            "submit_request_secs_p50": round(statistics.median(submit_secs), 3),
            "submit_request_secs_max": round(max(submit_secs), 3),
            "submit_to_running_secs_p50": round(statistics.median(to_running), 2),
            "submit_to_running_secs_max": round(max(to_running), 2),
            "all_submitted_to_running_secs": round(t_all - t_submit0, 2),
        })
        log(f"{size.label}: {out['executors']} executors running {out['all_submitted_to_running_secs']} s after the first submit")

        # ---- steady window
        time.sleep(args.settle)
        proc = psutil.Process(nimbus_pid)
        m0, c0, w0 = mntr_totals(ensemble), proc.cpu_times(), time.time()
        time.sleep(args.steady)
        m1, c1, w1 = mntr_totals(ensemble), proc.cpu_times(), time.time()
        secs = w1 - w0
        steady_rounds = round_lines(nimbus_log, w0, w1)
        rounds_all = round_lines(nimbus_log, t_begin, w1)
        r_steady = [float(r["secs"]) for r in steady_rounds]
        r_all = [float(r["secs"]) for r in rounds_all]
        writes = (m1["txns"] - m0["txns"]) / secs
        out.update({
            "steady_secs": round(secs, 1),
            "round_secs_p50": _r(pct(r_steady, 50)), "round_secs_p99": _r(pct(r_steady, 99)),
            "round_secs_max": _r(max(r_steady, default=None)), "rounds_steady": len(r_steady),
            "round_cpu_secs_p50": _r(pct([float(r.get("cpu_secs", 0)) for r in steady_rounds], 50)),
            "round_cpu_secs_p99": _r(pct([float(r.get("cpu_secs", 0)) for r in steady_rounds], 99)),
            "round_cpu_secs_all_max": _r(max((float(r.get("cpu_secs", 0)) for r in rounds_all), default=None)),
            "round_read_secs_p50": _r(pct([float(r["read_secs"]) for r in steady_rounds], 50)),
            "round_plan_secs_p50": _r(pct([float(r["plan_secs"]) for r in steady_rounds], 50)),
            "round_write_secs_p50": _r(pct([float(r["write_secs"]) for r in steady_rounds], 50)),
            "round_secs_all_p50": _r(pct(r_all, 50)), "round_secs_all_p99": _r(pct(r_all, 99)),
            "round_secs_all_max": _r(max(r_all, default=None)), "rounds_all": len(r_all),
            "zk_writes_per_sec": round(writes, 1),
            "zk_bytes_in_per_sec": round((m1["bytes_in"] - m0["bytes_in"]) / secs),
            "zk_watch_events_per_sec": round((m1["watch_events"] - m0["watch_events"]) / secs, 1),
            "zk_requests_per_sec": round((m1["packets_in"] - m0["packets_in"]) / secs, 1),
            "zk_sessions": int(m1["sessions"]), "zk_data_bytes": int(m1["data_bytes"]),
            "nimbus_cpu_cores": round(((c1.user + c1.system) - (c0.user + c0.system)) / secs, 3),
        })
        big, big_path, count = largest_znode(ensemble.address, cluster.root)
        out.update({"largest_znode_bytes": big, "largest_znode_path": big_path.replace(cluster.root, "") or "/",
                    "largest_znode_vs_jute_maxbuffer": round(big / JUTE_MAXBUFFER, 4), "znodes": count})
        log(f"{size.label}: steady " + ", ".join(f"{k}={out[k]}" for k in (
            "round_secs_p50", "round_secs_p99", "zk_writes_per_sec", "zk_bytes_in_per_sec", "nimbus_cpu_cores")))

        # ---- lose 10% of the supervisors
        victims = max(1, round(len(nodes.procs) / 10))
        lost: set[str] = set()
        m_kill0 = mntr_totals(ensemble)
        t_kill = time.time()
        for i in range(victims):
            lost |= nodes.kill(i)
        tracker.lose_nodes(lost)
        out["supervisors_lost"] = len(lost)
        running_at.clear()
        until(all_running, args.timeout, "every executor running again after the loss")
        out["reassign_after_10pct_loss_secs"] = round(time.time() - t_kill, 2)
        out.update(phase_rates("loss", m_kill0, mntr_totals(ensemble), time.time() - t_kill))
        rss.stop()
        out["nimbus_rss_mib"] = round(rss.max_rss / 2**20, 1)
        out["sim_worker_exits"] = tracker.exits
        log(f"{size.label}: lost {len(lost)} supervisors; every executor ran again after "
            f"{out['reassign_after_10pct_loss_secs']} s")
    except Exception as exc:  # noqa: BLE001 - reported with the size; the next size still runs
        out["error"] = f"{type(exc).__name__}: {exc}"
        log(f"{size.label}: FAILED: {out['error']}")
        if cluster is not None:
            for d in cluster.nimbus_procs:
                log(f"--- {d.name}\n{d.log_tail(15)}")
    finally:
        if nodes is not None:
            nodes.stop()
        if cluster is not None:
            cluster.stop()
        ensemble.cleanup()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return out


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def log(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10:10:10,100:10:10,1000:100:100:2000",
                        help="comma-separated WORKERS:SUPERVISORS:TOPOLOGIES[:LARGEST_EXECUTORS]")
    parser.add_argument("--procs", type=int, default=10, help="processes hosting the simulated supervisors")
    parser.add_argument("--nice", type=int, default=10,
                        help="niceness of the simulated nodes (they stand for other machines; 0: compete with nimbus)")
    parser.add_argument("--executors-per-worker", type=int, default=4)
    parser.add_argument("--worker-sessions", choices=("own", "node"), default="node",
                        help="one ZooKeeper session per node for its simulated workers (default: 3 threads a "
                             "session, 3,000 threads at 1,000 workers otherwise), or each its own (as real workers)")
    parser.add_argument("--tuples-per-sec", type=float, default=100.0, help="synthetic rate in every executor's stats")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of the steady measurement window")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between all running and the window")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the working directories")
    parser.add_argument("-c", dest="overrides", action="append", default=[], help="cluster config key=value")
    args = parser.parse_args()
    overrides = gconfig.parse_overrides(args.overrides)
    results = []
    for text in args.sizes.split(","):
        size = Size.parse(text)
        res = run_size(size, args, overrides)
        results.append(res)
        for k, v in res.items():
            if k != "size":
                print(f"scale_{size.label}_{k}: {v}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"overrides": overrides, "args": vars(args), "results": results},
                                              indent=2, default=str))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
