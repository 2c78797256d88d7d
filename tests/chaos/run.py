"""One chaos run: cluster up, workload on, faults in, convergence, check.

::

    result = run_chaos(base_dir, mode="bounded")            # every fault kind once (CI)
    result = run_chaos(base_dir, mode="soak", duration=600, seed=1)
    result = run_chaos(base_dir, mode="bounded", workload=KafkaEOWorkload())

Timeline: start the cluster (and the workload's services) and submit the workload's topology;
start the input (RabbitMQ: ids at ``rate`` per second; Kafka: keyed records); wait until the
first outputs; inject the planned faults one after another (in a bounded run each once the cluster
is healthy and the workload made progress since; in a soak after a random pause); stop the input
when the last fault is removed (N = inputs the broker acknowledged); then wait for convergence
(RabbitMQ: the queue empty with nothing unacknowledged and every id in the sink; Kafka: every
record's position checkpointed and two more checkpoints committed) and check. The convergence
time is measured from the moment the last fault was removed.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.cluster import ChaosCluster, log
from tests.chaos.fault_context import Context, FaultRecord
from tests.chaos.faults import inject
from tests.chaos.schedule import Step, conflicts, soak_steps
from tests.chaos.workload import RabbitWorkload, Workload


class Sampler:
    """Samples the workload's progress (anything with ``progress()``: the sink's distinct ids, the
    committed counts' total) every ``period`` seconds, for stall and resume times."""

    def __init__(self, sink, now, period: float = 0.5):
        self.sink = sink
        self.now = now
        self.period = period
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((self.now(), self.sink.progress()))
            self._stop.wait(self.period)

    def max_stall(self, start: float, end: float) -> float:
        """Longest interval within [start, end] in which no new id reached the sink."""
        pts = [(t, n) for t, n in self.samples if start <= t <= end]
        if len(pts) < 2:
            return 0.0
        longest, since, last_n = 0.0, pts[0][0], pts[0][1]
        for t, n in pts[1:]:
            longest = max(longest, t - since)
            if n > last_n:
                since, last_n = t, n
        return round(longest, 2)

    def resumed_after(self, at: float) -> float | None:
        """Seconds from ``at`` until the sink saw a new id."""
        base = next((n for t, n in reversed(self.samples) if t <= at), 0)
        for t, n in self.samples:
            if t > at and n > base:
                return round(t - at, 2)
        return None


@dataclass
class RunResult:
    mode: str
    seed: int | None
    duration: float | None
    rate: float
    zookeepers: int = 1
    workload: str = "rabbitmq"
    n: int = 0
    lost: int = 0
    lost_ids: list[int] = field(default_factory=list)
    duplicates: int = 0
    duplicated_ids: int = 0
    unexpected: int = 0
    over_counted: int = 0  # exactly-once: counts beyond the inputs (summed over keys)
    over_counted_keys: dict[str, int] = field(default_factory=dict)
    #: exactly-once: committed checkpoints seen (tests/eo_cuts.py) and those whose state did not add up
    #: to their source positions (one description each)
    cuts_checked: int = 0
    inconsistent_cuts: list[str] = field(default_factory=list)
    lost_keys: dict[str, int] = field(default_factory=dict)
    converged: bool = False
    convergence_secs: float | None = None
    last_heal: float | None = None
    fault_phase_secs: float | None = None
    total_secs: float | None = None
    faults: list[FaultRecord] = field(default_factory=list)
    publish_errors: int = 0
    error: str | None = None
    started_at: str = ""

    @property
    def all_injected(self) -> bool:
        return bool(self.faults) and all(f.injected for f in self.faults)

    @property
    def ok(self) -> bool:
        return (self.error is None and self.converged and self.lost == 0 and self.unexpected == 0
                and self.over_counted == 0 and not self.inconsistent_cuts and self.all_injected)

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "faults"}
        d["faults"] = [f.to_json() for f in self.faults]
        d["all_injected"] = self.all_injected
        d["ok"] = self.ok
        return d


def run_chaos(base: Path, *, mode: str = "bounded", duration: float = 600.0, seed: int = 1, rate: float = 40.0,
              zookeepers: int = 1, workload: Workload | None = None,
              converge_timeout: float = 300.0, plan: list[Step] | None = None) -> RunResult:
    """Run one chaos experiment in ``base`` (removed afterwards unless the run failed).
    ``workload`` defaults to the RabbitMQ one at ``rate`` ids per second."""
    rng = random.Random(seed)
    work = workload if workload is not None else RabbitWorkload(rate)
    result = RunResult(mode=mode, seed=seed, duration=duration if mode == "soak" else None, rate=rate,
                       zookeepers=zookeepers, workload=work.name,
                       started_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    t_start = time.monotonic()
    c = ChaosCluster(base, zookeepers=zookeepers)
    sampler = None
    running: list[tuple[threading.Thread, FaultRecord]] = []
    try:
        c.start(services=lambda: work.start_services(c))
        c.submit(work.topology, work.submit_conf(c))
        ctx = Context(c, rng, time.monotonic())
        work.start(c)
        sampler = Sampler(work, ctx.now).start()
        first, _ = wait_first(lambda: work.progress() > 0, 60)
        if not first:
            raise RuntimeError("no output within 60 s of the input starting")
        log(f"workload {work.name} flowing: {work.progress()} processed")
        steps = (iter(plan if plan is not None else work.bounded_plan(zookeepers)) if mode == "bounded"
                 else soak_steps(rng, work.kinds(zookeepers)))
        phase_start = ctx.now()
        for step in steps:
            if mode == "soak" and ctx.now() - phase_start >= duration:
                break
            running = wait_for_slot(running, step)
            healthy, settle = None, None
            if step.wait_healthy and not running:
                healthy, settle, problems = c.wait_healthy(120)
                if not healthy:
                    log(f"not healthy after 120 s ({problems}); injecting {step.kind} anyway")
            if mode == "bounded":
                # the next fault lands on a flowing workload: new output since the cluster was healthy
                wait_first(lambda since=ctx.now(): sampler.resumed_after(since) is not None, step.gap_secs)
            else:
                time.sleep(step.gap_secs)
            rec = FaultRecord(kind=step.kind, params=dict(step.params), healthy_before=healthy,
                              settle_secs=None if settle is None else round(settle, 2),
                              overlapped=[r.kind for t, r in running if t.is_alive()])
            result.faults.append(rec)
            thread = threading.Thread(target=inject, args=(ctx.for_fault(step.seed), rec), name=f"fault-{step.kind}",
                                      daemon=True)
            thread.start()
            running.append((thread, rec))
        for thread, _ in running:
            thread.join()
        result.fault_phase_secs = round(ctx.now() - phase_start, 2)
        result.last_heal = max((f.healed for f in result.faults if f.healed is not None), default=ctx.now())
        result.n = work.stop_input()
        log(f"faults done; {result.n} inputs acknowledged by the broker; converging ...")
        converged = work.converge(c, converge_timeout)
        result.converged = converged
        if converged:
            result.convergence_secs = round(ctx.now() - result.last_heal, 2)
        sampler.stop()
        for rec in result.faults:
            rec.max_stall_secs = sampler.max_stall(rec.start, rec.end or rec.start)
            if rec.healed is not None:
                rec.resumed_secs = sampler.resumed_after(rec.healed)
        work.check(result)
        log(f"result: N={result.n} lost={result.lost} duplicates={result.duplicates} "
            f"over-counted={result.over_counted} "
            f"converged={result.converged} in {result.convergence_secs}s after the last fault")
    except Exception as exc:  # noqa: BLE001 - reported in the result, the caller decides
        result.error = f"{type(exc).__name__}: {exc}"
        log(f"run failed: {result.error}")
    finally:
        c.closing.set()  # faults still running stop at their next step (they undo what they did)
        for thread, _ in running:
            thread.join(30)
        if sampler is not None:
            sampler.stop()
        if not result.ok and c.dev is not None:
            log("log tails of the failed run:\n" + c.log_tails())
        try:
            c.stop()
        finally:
            try:
                work.stop_services()
            finally:
                result.total_secs = round(time.monotonic() - t_start, 2)
    return result


def wait_for_slot(running: list[tuple[threading.Thread, FaultRecord]],
                  step: Step) -> list[tuple[threading.Thread, FaultRecord]]:
    """Wait until ``step`` may start: every running fault has ended, or — for a step that may
    overlap — until it conflicts with none of them. Returns the faults still running."""
    while True:
        running = [(t, r) for t, r in running if t.is_alive()]
        if not running or (step.overlap and not conflicts(step.kind, [r.kind for _, r in running])):
            return running
        running[0][0].join(0.25)


def wait_first(predicate, timeout: float) -> tuple[bool, float]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return True, time.monotonic() - t0
        time.sleep(0.25)
    return False, timeout
