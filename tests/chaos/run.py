"""One chaos run: cluster up, workload on, faults in, convergence, check.

::

    result = run_chaos(base_dir, mode="bounded")            # every fault kind once (CI)
    result = run_chaos(base_dir, mode="soak", duration=600, seed=1)

Timeline: start the cluster and submit the topology; start publishing ids at ``rate`` per second;
wait until the sink sees the first ids; inject the planned faults one after another; stop
publishing when the last fault is removed (N = ids the broker confirmed); then wait for
convergence: the queue empty with nothing unacknowledged and every id in the sink. The
convergence time is measured from the moment the last fault was removed.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.cluster import ChaosCluster, log
from tests.chaos.faults import Context, FaultRecord, inject
from tests.chaos.schedule import Step, bounded_ensemble_plan, bounded_plan, conflicts, kinds_for, soak_steps
from tests.chaos.workload import Publisher, SinkReader, check


class Sampler:
    """Samples the sink every ``period`` seconds: (t, distinct ids) for stall and resume times."""

    def __init__(self, sink: SinkReader, now, period: float = 0.5):
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
            self.sink.poll()
            self.samples.append((self.now(), self.sink.distinct))
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
    n: int = 0
    lost: int = 0
    lost_ids: list[int] = field(default_factory=list)
    duplicates: int = 0
    duplicated_ids: int = 0
    unexpected: int = 0
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
        return self.error is None and self.converged and self.lost == 0 and self.unexpected == 0 and self.all_injected

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "faults"}
        d["faults"] = [f.to_json() for f in self.faults]
        d["all_injected"] = self.all_injected
        d["ok"] = self.ok
        return d


def converge(c: ChaosCluster, sink: SinkReader, published: list[int], timeout: float,
             settle_secs: float = 20.0) -> tuple[bool, float | None]:
    """Wait until the queue is empty with nothing unacknowledged and every published id is in the
    sink. Gives up early when the queue has been empty and idle for ``settle_secs`` with ids still
    missing (nothing is left that could bring them: they are lost)."""
    t0 = time.monotonic()
    wanted = set(published)
    idle_since = None
    while time.monotonic() - t0 < timeout:
        counts = sink.poll()
        missing = sum(1 for i in wanted if counts.get(i, 0) == 0)
        q = c.queue_counts()
        if q == (0, 0):
            if not missing:
                return True, round(time.monotonic() - t0, 2)
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > settle_secs:
                log(f"queue empty for {settle_secs}s with {missing} ids missing from the sink")
                return False, None
        else:
            idle_since = None
        time.sleep(1.0)
    return False, None


def run_chaos(base: Path, *, mode: str = "bounded", duration: float = 600.0, seed: int = 1, rate: float = 40.0,
              zookeepers: int = 1,
              converge_timeout: float = 300.0, plan: list[Step] | None = None) -> RunResult:
    """Run one chaos experiment in ``base`` (removed afterwards unless the run failed)."""
    rng = random.Random(seed)
    result = RunResult(mode=mode, seed=seed, duration=duration if mode == "soak" else None, rate=rate,
                       zookeepers=zookeepers,
                       started_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    t_start = time.monotonic()
    c = ChaosCluster(base, zookeepers=zookeepers)
    publisher = sampler = None
    running: list[tuple[threading.Thread, FaultRecord]] = []
    try:
        c.start()
        c.submit()
        ctx = Context(c, rng, time.monotonic())
        sink = SinkReader(c.state_dir)
        sampler = Sampler(sink, ctx.now).start()
        publisher = Publisher("127.0.0.1", c.rabbit.port, c.queue, rate).start()
        first, _ = wait_first(lambda: sink.distinct > 0, 60)
        if not first:
            raise RuntimeError("the sink saw nothing within 60 s of publishing")
        log(f"workload flowing: {publisher.count} published, {sink.distinct} processed")
        default_plan = bounded_ensemble_plan() if zookeepers > 1 else bounded_plan()
        steps = (iter(plan if plan is not None else default_plan) if mode == "bounded"
                 else soak_steps(rng, kinds_for(zookeepers)))
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
        publisher.stop()
        result.n = publisher.count
        result.publish_errors = len(publisher.errors)
        log(f"faults done; {result.n} ids published; converging ...")
        converged, _ = converge(c, sink, publisher.confirmed, converge_timeout)
        result.converged = converged
        if converged:
            result.convergence_secs = round(ctx.now() - result.last_heal, 2)
        sampler.stop()
        for rec in result.faults:
            rec.max_stall_secs = sampler.max_stall(rec.start, rec.end or rec.start)
            if rec.healed is not None:
                rec.resumed_secs = sampler.resumed_after(rec.healed)
        verdict = check(publisher.confirmed, sink.poll())
        result.lost, result.lost_ids = len(verdict.lost), verdict.lost[:100]
        result.duplicates, result.duplicated_ids = verdict.duplicates, verdict.duplicated_ids
        result.unexpected = len(verdict.unexpected)
        log(f"result: N={result.n} lost={result.lost} duplicates={result.duplicates} "
            f"converged={result.converged} in {result.convergence_secs}s after the last fault")
    except Exception as exc:  # noqa: BLE001 - reported in the result, the caller decides
        result.error = f"{type(exc).__name__}: {exc}"
        log(f"run failed: {result.error}")
    finally:
        c.closing.set()  # faults still running stop at their next step (they undo what they did)
        for thread, _ in running:
            thread.join(30)
        if publisher is not None:
            publisher.stop()
        if sampler is not None:
            sampler.stop()
        if not result.ok and c.dev is not None:
            log("log tails of the failed run:\n" + c.log_tails())
        try:
            c.stop()
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
