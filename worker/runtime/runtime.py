"""WorkerRuntime: the executors of one topology hosted in one process, and the routing between them.

Used both by local mode (every executor in one process) and by a cluster worker (the executors its
assignment places on its slot, with a transport for tasks elsewhere). Executors run on
``topology.worker.executor.threads`` executor threads (default 1: one event loop per worker, which
measured fastest under the GIL; see docs/benchmarks.md). Tuples to a task in this process go
straight onto its executor's queue; tuples to other workers go to :attr:`remote`. In a cluster
worker the first executor thread also moves the transfer's batches between its rounds and sleeps
on its socket (:attr:`WorkerRuntime.io`, :class:`TransferIO`).
"""

from __future__ import annotations

import gc
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from gale.clock import REAL_CLOCK
from gale.config import as_config
from gale.config_keys import Config
from gale.errors import TopologyError
from gale.log import get_logger
from gale.records import ExecutorStats, executor_key
from gale.topology.definition import ACKER_COMPONENT, GroupingDef, Topology, TopologyTasks, round_order
from gale.topology.components import TopologyContext
from gale.topology.state import CHECKPOINT_COMPONENT
from gale.topology.tuple import Fields
from gale.worker.runtime.route import StreamRoute
from gale.worker.runtime.delivery import Delivery
from gale.worker.runtime.bolt import BoltExecutor, attach_ticks
from gale.worker.runtime.executor import AckerExecutor, Executor
from gale.worker.runtime.spout import SpoutExecutor
from gale.worker.runtime.threads import ExecutorThread, TransferIO
from gale.worker.runtime.grouping import (EVERYTHING, WORKER_LOCAL, Grouper, LoadAwareShuffleGrouper, make_grouper,
                                          process_hash_is_shared)

log = get_logger("runtime")

#: how often load-aware shuffles re-read loads and move their scope
LOAD_REFRESH_SECS = 1.0
#: the most a queue that is not full reports (a report's 1000 per mille means full: backpressure)
NOT_FULL = 0.999


def raise_gc_threshold(threshold: int | None) -> None:
    """Raise the garbage collector's generation-0 threshold to ``threshold`` (process-wide; never
    lowered, so two runtimes in one process agree). Every tuple in flight is a few GC-tracked
    objects (the Tuple, its values list, its message id dict): with Python's default of 700 the
    collector runs every few hundred tuples and takes ~15% of the per-tuple path."""
    if threshold:
        t0, t1, t2 = gc.get_threshold()
        if t0 and t0 < threshold:
            gc.set_threshold(int(threshold), t1, t2)


class RemoteSender(Protocol):
    """Delivery to tasks hosted by other workers (see ``gale.worker.transfer``)."""

    def send_tuple(self, task: int, tup: Any) -> None: ...
    def send_acker(self, task: int, msg: tuple) -> None: ...
    def send_result(self, task: int, result: tuple) -> None: ...
    def congested(self) -> bool: ...
    def load_of(self, task: int) -> float: ...
    def locate(self, task: int) -> int: ...
    def busy_of(self, task: int) -> float | None: ...
    def own_busy(self) -> float | None: ...


class ExecutorFactory(Protocol):
    """Makes a worker's executors: the core with the body and layers each component needs
    (``gale.worker.assembly.Assembly``; the runtime imports no capability itself)."""

    def attach(self, runtime: WorkerRuntime) -> None:
        """Start the per-worker resources the local components need (before any task is prepared)."""

    def make(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str) -> Executor: ...

    def grouper(self, runtime: WorkerRuntime, target: str, grouping: GroupingDef, fields: Fields) -> Grouper | None:
        """The grouper of a subscription when a capability routes it (keyed state), else None."""


class PlainExecutors:
    """The core alone: plain Python spouts and bolts and the acker. A component that needs a body or
    a layer of a capability (managed state, windows, shell, Spark) is refused by name: run such
    topologies with ``gale.worker.assembly.Assembly``."""

    def attach(self, runtime: WorkerRuntime) -> None:
        pass

    def make(self, runtime: WorkerRuntime, executor_id: tuple[int, int], component: str) -> Executor:
        if component != ACKER_COMPONENT:
            comp = runtime.defn.components[component]
            cls = runtime.topology.component_class(component)
            if component == CHECKPOINT_COMPONENT or comp.spark or getattr(cls, "task_body", None) is not None \
                    or comp.stateful or comp.windowed:
                raise TopologyError(f"component {component!r} needs a capability beyond the executor core "
                                    "(state, windows, shell or Spark): give WorkerRuntime factory=Assembly()")
        if component == ACKER_COMPONENT:
            return AckerExecutor(runtime, executor_id, component)
        if runtime.defn.components[component].kind == "spout":
            return SpoutExecutor(runtime, executor_id, component).python_body()
        bolt = BoltExecutor(runtime, executor_id, component).python_body()
        attach_ticks(bolt)
        return bolt

    def grouper(self, runtime: WorkerRuntime, target: str, grouping: GroupingDef, fields: Fields) -> Grouper | None:
        return None


class WorkerRuntime:
    def __init__(
        self,
        topology: Topology,
        *,
        topology_id: str,
        conf: Mapping[str, Any],
        layout: TopologyTasks,
        executors: Iterable[tuple[int, int]],
        clock: Any = REAL_CLOCK,
        remote: RemoteSender | None = None,
        io: TransferIO | None = None,
        error_sink: Callable[[str, str], None] | None = None,
        capture: Callable[[str, str, Any], None] | None = None,
        worker_port: int = 0,
        local_dir: str = "",
        code_dir: str = "",
        resources: Mapping[str, Any] | None = None,
        rng: random.Random | None = None,
        on_crash: Callable[[BaseException], None] | None = None,
        factory: ExecutorFactory | None = None,
    ):
        self.topology = topology
        self.defn = topology.definition
        self.topology_id = topology_id
        #: the topology's configuration as its tasks see it (a dict: Storm's API hands user code a Map)
        self.conf = dict(conf)
        #: the same, resolved: what the worker itself reads (attributes, never key names)
        self.config: Config = as_config(conf, "topology configuration")
        self.layout = layout
        self.clock = clock
        self.remote = remote
        #: the transfer the first executor thread drives (a cluster worker's; None in one process)
        self.io = io
        self.error_sink = error_sink
        self.capture = capture
        self.worker_port = worker_port
        self.local_dir = local_dir
        self.code_dir = code_dir
        self.resources = dict(resources or {})
        self.rng = rng or random.Random()
        self.on_crash = on_crash
        #: makes the executors (core, body, layers) and the per-worker resources
        self.factory: ExecutorFactory = factory if factory is not None else PlainExecutors()
        self.acker_component = ACKER_COMPONENT
        self.active = False
        self.stopping = False
        self.congested = False
        self.errors: dict[str, list[str]] = {}
        config = self.config
        self.idle_wait = max(0.0005, float(config.topology_spout_wait_sleep_millis) / 1000.0)
        self.queue_high_water = int(config.topology_executor_receive_buffer_size)
        #: (higher, lower) bounds of load-aware shuffles; None in one process or when disabled
        self.locality: tuple[float, float] | None = None
        if remote is not None and not config.topology_disable_loadaware_messaging:
            self.locality = (float(config.topology_localityaware_higher_bound),
                             float(config.topology_localityaware_lower_bound))
        #: the load-aware shuffles of every executor here, refreshed every LOAD_REFRESH_SECS
        self.load_aware: list[LoadAwareShuffleGrouper] = []
        self.next_load_refresh = 0.0

        # every task in this process, or workers that share PYTHONHASHSEED: Python's hash routes
        # fields groupings consistently (and several times faster than the portable hash)
        self.builtin_hash = remote is None or process_hash_is_shared()
        self.acker_tasks = layout.component_tasks(ACKER_COMPONENT)
        self.acking = bool(self.acker_tasks)
        #: every spout task of the topology (the acker sends its verdicts to these only)
        self.spout_tasks = frozenset(t for cid, comp in self.defn.components.items() if comp.kind == "spout"
                                     for t in layout.component_tasks(cid))
        self._stream_fields: dict[tuple[str, str], Fields] = {
            (cid, sid): Fields(s.fields, f"{cid}:{sid}")
            for cid, comp in self.defn.components.items()
            for sid, s in comp.streams.items()
        }
        self._component_conf: dict[str, dict[str, Any]] = {}
        self._component_config: dict[str, Config] = {}
        self.executors: dict[tuple[int, int], Executor] = {}
        self._local: dict[int, Executor] = {}
        for ex_id in sorted(executors):
            component = layout.executor_to_component[ex_id]
            ex = self._make_executor(ex_id, component)
            self.executors[ex_id] = ex
            for task in ex.tasks:
                self._local[task] = ex
        self.local_tasks = frozenset(self._local)
        self._all_queues = [q for ex in self.executors.values() for q in ex.queue_list]
        self._bind_fast_paths()
        self.threads: list[ExecutorThread] = []
        self.timer_period = 0.05

    # ------------------------------------------------------------------ construction

    def component_conf(self, component: str) -> dict[str, Any]:
        conf = self._component_conf.get(component)
        if conf is None:
            conf = dict(self.conf)
            comp = self.defn.components.get(component)
            if comp is not None:
                conf.update(comp.conf)
            self._component_conf[component] = conf
        return conf

    def component_config(self, component: str) -> Config:
        """The component's configuration (the topology's, its own keys over it), resolved."""
        config = self._component_config.get(component)
        if config is None:
            comp = self.defn.components.get(component)
            config = self.config if comp is None or not comp.conf else self.config.with_overrides(
                comp.conf, where=f"configuration of component {component!r}")
            self._component_config[component] = config
        return config

    def stream_fields(self, component: str, stream: str) -> Fields:
        """The :class:`Fields` of a declared stream (one object per stream, shared by its tuples)."""
        return self._stream_fields[(component, stream)]

    def task_conf(self, component: str) -> dict[str, Any]:
        """A fresh copy of the component's configuration: what a task's open/prepare receives."""
        return dict(self.component_conf(component))

    def _make_executor(self, ex_id: tuple[int, int], component: str) -> Executor:
        return self.factory.make(self, ex_id, component)

    def instantiate(self, component: str) -> Any:
        comp = self.defn.components[component]
        cls = self.topology.component_class(component)
        return cls(*comp.args, **comp.kwargs)

    def topology_context(self, component: str, task: int) -> TopologyContext:
        return TopologyContext(
            topology_id=self.topology_id,
            topology_name=self.defn.name or self.topology_id,
            component_id=component,
            task_id=task,
            task_to_component=self.layout.task_to_component,
            component_streams={
                cid: {sid: s.fields for sid, s in comp.streams.items()} for cid, comp in self.defn.components.items()
            },
            worker_port=self.worker_port,
            worker_tasks=sorted(self._local),
            local_dir=self.local_dir,
            code_dir=self.code_dir,
            resources=self.resources,
        )

    def routes_for(self, component: str) -> dict[str, StreamRoute]:
        """Output routes of ``component``: its declared streams and who subscribes to them."""
        comp = self.defn.components[component]
        subscribers: dict[str, list] = {sid: [] for sid in comp.streams}
        for cid, target in sorted(self.defn.components.items()):
            for inp in target.inputs:
                if inp.component == component and inp.stream in subscribers:
                    subscribers[inp.stream].append((cid, inp.grouping))
        routes = {}
        for sid, stream in comp.streams.items():
            fields = self._stream_fields[(component, sid)]
            groupers = [
                make_grouper(g, self.layout.component_tasks(cid), fields, self.local_tasks,
                             random.Random(self.rng.random()), builtin_hash=self.builtin_hash,
                             locality=self.locality)
                for cid, g in subscribers[sid]
            ]
            self.load_aware.extend(g for g in groupers if isinstance(g, LoadAwareShuffleGrouper))
            groupers = [self.factory.grouper(self, cid, g, fields) or grouper
                        for (cid, g), grouper in zip(subscribers[sid], groupers)]
            routes[sid] = StreamRoute(sid, fields, groupers, stream.direct, self.queue_of)
        return routes

    def task_load(self, task: int) -> float:
        """0..1: how full ``task``'s input queue is here, or the way to it when it is elsewhere."""
        q = self.queue_of(task)
        if q is not None:
            return min(len(q) / self.queue_high_water, 1.0)
        return self.remote.load_of(task) if self.remote is not None else 1.0

    def local_loads(self) -> list[tuple[int, float]]:
        """Each task of this worker and how full its input queue is (0..1): the worker's load report.
        1 means full (more than ``queue_high_water`` waiting, as :meth:`queue_full` judges it: peers
        pause their spouts); a queue not over it reads at most 0.999."""
        hw = self.queue_high_water
        loads = []
        for task, ex in list(self._local.items()):
            n = len(ex.queues[task])
            loads.append((task, 1.0 if n > hw else min(n / hw, NOT_FULL)))
        return loads

    def task_busy(self, task: int) -> float | None:
        """The busy share (0..1) of the worker hosting ``task`` (None: not known)."""
        if self.remote is None:
            return None
        return self.remote.own_busy() if task in self.local_tasks else self.remote.busy_of(task)

    def locate(self, task: int) -> int:
        if task in self.local_tasks:
            return WORKER_LOCAL
        return self.remote.locate(task) if self.remote is not None else EVERYTHING

    def refresh_loads(self, now: float) -> None:
        """Move every load-aware shuffle's scope by the loads now (any executor thread; a grouper
        swaps its choices in one assignment)."""
        self.next_load_refresh = now + LOAD_REFRESH_SECS
        for grouper in list(self.load_aware):
            grouper.refresh(self.task_load, self.locate, self.task_busy)

    def _bind_fast_paths(self) -> None:
        # Executor threads append straight onto local queues; a thread wakes sleeping peers whose
        # queues it filled at the end of its round (see ExecutorThread.run_round). Only other
        # threads (the transfer receiver) go through deliver(), which wakes at once.
        queues = {task: ex.queues[task] for task, ex in self._local.items()}
        remote = self.remote
        acker_tasks = self.acker_tasks
        #: the sends of this worker's executor threads, compiled (gale.worker.runtime.delivery)
        delivery = self.delivery = Delivery(queues, remote, acker_tasks)
        self.queue_of = queues.get  # task → its deque in this process (None: elsewhere)
        self.send_tuple = delivery.send_tuple
        #: send_tuple for a task known not to be in this process (the caller asked queue_of)
        self.send_remote = remote.send_tuple if remote is not None else delivery.send_tuple
        self.send_acker = delivery.send_acker
        self.send_result = delivery.send_result
        #: a control message (four unsigned integers) for a spout task, here or in another worker
        self.send_control = delivery.send_control
        self.acker_task = delivery.acker_task
        #: hand an executor's ack buffer (root → XORed ack value) to the ackers, and empty it
        self.flush_acks = delivery.flush_acks
        # indices (into acker_tasks) of the ackers in this process: spouts pick root ids that hash
        # to one of them, so init/ack-result traffic stays in the worker (bolts elsewhere still
        # send their acks over the network)
        self.local_acker_indices = [i for i, t in enumerate(acker_tasks) if t in queues]

    def busy_time(self) -> float:
        """Seconds the executor threads have been busy, summed over threads, on ``time.monotonic``'s
        scale (a clock for :class:`gale.worker.loads.BusyMeter`: its share is how busy they were)."""
        now = time.monotonic()
        return sum(now - t.made - t.idle_secs for t in self.threads)

    def single_acker_queue(self) -> Any:
        """The input deque of the topology's only acker task when it runs in this process."""
        return self.delivery.single_acker

    def deliver(self, task: int, payload: Any) -> bool:
        """Hand a payload that arrived from another worker to a local task's executor."""
        ex = self._local.get(task)
        if ex is None:
            return False
        ex.receive(task, payload)
        return True

    def deliver_many(self, task: int, payloads: list) -> int:
        """:meth:`deliver` for the messages of one group, in one call; returns how many were refused."""
        ex = self._local.get(task)
        if ex is None:
            return len(payloads)
        ex.receive_many(task, payloads)
        return 0

    # ------------------------------------------------------------------ running

    def local_components(self) -> set[str]:
        return {ex.component for ex in self.executors.values()}

    def attach_resources(self) -> None:
        """Start per-worker resources the local components need, before any task is prepared (the
        factory's: a state provider, a Spark application). Tasks see them as
        ``context.resources``; resources with a ``close()`` are closed by :meth:`stop`."""
        self.factory.attach(self)

    def prepare(self) -> None:
        """Attach resources, then instantiate and open/prepare every task (in the calling thread)."""
        self.attach_resources()
        prepared: list[Executor] = []
        try:
            for ex in self.executors.values():
                ex.safe_prepare()
                prepared.append(ex)
        except BaseException:
            # close what already opened (connections, threads, Spark) before giving up on this worker
            for ex in prepared:
                try:
                    ex.shutdown()
                except Exception:  # noqa: BLE001
                    log.exception("shutdown-after-failed-prepare", component=ex.component)
            self.close_resources()
            raise

    def start(self, active: bool = True, threads: int | None = None, spawn: bool = True) -> None:
        """Prepare every task and start the executor threads.

        With ``spawn=False`` the threads are built but not started: the caller drives them with
        :meth:`run_until_idle` (tests with a simulated clock).
        """
        n = max(1, int(threads or self.config.topology_worker_executor_threads))
        # in round order (spouts, then bolts after what they subscribe to, the ackers last): a
        # tuple emitted in a round is executed in the same round
        rank = round_order(self.defn)
        executors = sorted(self.executors.values(), key=lambda ex: (rank.get(ex.component, len(rank)), ex.executor_id))
        groups: list[list[Executor]] = [[] for _ in range(min(n, len(executors)) or 1)]
        for i, ex in enumerate(executors):
            groups[i % len(groups)].append(ex)
        # made (not started) before the tasks are prepared: an executor's collectors keep its
        # thread's ack buffer
        self.threads = [ExecutorThread(self, g, f"executors-{i}", self.io if i == 0 else None)
                        for i, g in enumerate(groups)]
        self.prepare()
        raise_gc_threshold(self.config.topology_worker_gc_threshold)
        self.active = active
        if spawn:
            for t in self.threads:
                t.start()

    def set_active(self, active: bool) -> None:
        self.active = active
        for t in self.threads:
            t.wake()

    def fire_timers(self, now: float) -> None:
        """Fire every executor's timers now, each on its own thread's behalf (simulated-time tests
        call this from the driving thread; running threads fire their own in run_round)."""
        for t in self.threads:
            t.fire_timers(now)

    def queue_full(self) -> bool:
        """Whether a queue of this worker holds more than ``queue_high_water`` tuples (any thread:
        the transfer reports it to the peers, even while every executor thread is inside a call)."""
        hw = self.queue_high_water
        for q in self._all_queues:
            if len(q) > hw:
                return True
        return False

    def update_congestion(self) -> None:
        """Spouts pause (:attr:`congested`) while a queue of this worker is full, the way to a peer
        is backed up, or a peer reports a full queue."""
        congested = self.queue_full()
        if not congested and self.remote is not None:
            congested = self.remote.congested()
        self.congested = congested

    def run_until_idle(self, max_rounds: int = 100000) -> int:
        """Drive executors in the calling thread (tests with a simulated clock). Returns rounds."""
        if not self.threads:
            raise RuntimeError("call start(spawn=False) before run_until_idle()")
        rounds = 0
        while rounds < max_rounds:
            worked = sum(t.run_round() for t in self.threads)
            rounds += 1
            if not worked and not any(self._all_queues):
                break
        return rounds

    def stop(self, timeout: float = 10.0) -> None:
        """Deactivate spouts, stop executor threads, then close/cleanup every task."""
        self.set_active(False)
        self.stopping = True
        for t in self.threads:
            t.wake()
        for t in self.threads:
            if t is not threading.current_thread() and t.is_alive():
                t.join(timeout)
        for ex in self.executors.values():
            ex.shutdown()
            if ex.ack_buf:
                self.flush_acks(ex.ack_buf)
        self.close_resources()

    def close_resources(self) -> None:
        for name, resource in list(self.resources.items()):
            close = getattr(resource, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001
                    log.exception("resource-close-failed", resource=name)

    def crashed(self, exc: BaseException) -> None:
        self.stopping = True
        if self.on_crash is not None:
            self.on_crash(exc)

    # ------------------------------------------------------------------ errors & stats

    def report_error(self, component: str, text: str) -> None:
        kept = self.errors.setdefault(component, [])
        kept.append(text)
        del kept[:-10]
        if self.error_sink is not None:
            try:
                self.error_sink(component, text)
            except Exception:  # noqa: BLE001 - never let error reporting kill an executor
                log.exception("error-sink-failed", component=component)

    def roll_stats(self, now: float | None = None) -> None:
        for ex in self.executors.values():
            ex.stats.roll(now)

    def executor_stats(self) -> dict[str, ExecutorStats]:
        return {executor_key(ex_id): ex.stats_record() for ex_id, ex in self.executors.items()}
