"""Complete latency of the peers' word count at 50% and 90% of each engine's maximum rate.

Run: ``.venv/bin/python -m benchmarks.bench_latency [--loads 50,90] [--warmup S] [--duration S]
[--engines ...] [--vocabulary N]``

The workload is :mod:`benchmarks.bench_peers`' (sentences → split → keyed running count emitting
every update, one core per engine). For each engine the script first finds its maximum rate — the
paced harness itself with every sentence due at the start (``--throughput-sentences`` of them; the
rate is those sentences over the last one's latency), so the load levels are shares of what the very
code of the paced runs can do, source, pacing checks and latency records included — then drives it
from a **rate-limited source** at each load level for ``--warmup`` + ``--duration`` seconds: sentence ``i``
is due at ``start + i / rate`` (:class:`Schedule`), and its latency is measured from that *scheduled*
time, not from when the source got round to sending it, so a source held back by a slow engine adds
its backlog to the figures (no coordinated omission). Sentences due in the warm-up are not counted.

The paced sentences use the throughput run's vocabulary (``--vocabulary``, by default its sentences
+ 8 words, cycled), so every load runs the workload whose maximum was measured. With
``--vocabulary 0`` the vocabulary grows with the run instead (a new word every sentence, 700,000 at
90% of 65k sentences/s for 12 s): the count bolt's dict then grows seven times past the throughput
run's, and each doubling of it stalls the executor thread while Python rebuilds the table (7 ms at
175k words, 14–22 ms at 350k on the machine of ``docs/benchmarks.md``) — the user's state, not the
engine, and at 90% load a stall of S ms takes about 10 × S to drain.

* ``plain`` — the control: ``bench_peers``' plain Python loop paced the same way, sleeping 1 ms
  (as Gale's spout wait does) when nothing is due; latency is scheduled time → the sentence's last
  word counted. What it shows is the machine: the wait granularity and the scheduling delays of a
  loaded box, which every engine suffers too.
* ``gale_acking`` — Gale local mode as in ``bench_peers`` (one executor thread, one acker), the
  spout emitting each due sentence with its index as message id; latency is Storm's complete latency
  taken by the spout itself: scheduled time → the spout's ``ack(msg_id)``.
* ``gale_noacking`` — acking off; the sentence's index travels with its words, and the latency is
  scheduled time → the count bolt's update of the sentence's last word.
* ``bytewax`` — Bytewax 0.21.1 (``bench_peers``' virtual environment), end to end: a
  ``DynamicSource`` partition that hands out the due sentences and asks to be woken at the next
  one's scheduled time or in 1 ms, whichever is later (``next_awake``), the index carried with each word, and a sink that records
  when the sentence's last word update reaches it.

Prints ``name: value unit`` lines: each engine's maximum rate, and per load level the offered rate,
the sentences measured and p50 / p99 / p99.9 / max latency in ms, then the verdicts on the targets
(Gale's p99 with acking under 10 ms at 50% load and at most 5 ms at 90%, local mode) and, unless
``--no-control``, the plain loop's p99 paced at Gale's 50% rate right after: the part of the tail the
machine itself imposes. Around every run at 80% load or more, the host's check
(:func:`benchmarks.host_pair.speed_dips`, 3 s before and after): how many 50 ms windows of a fixed
Python loop ran below 0.9× its median speed. One such window leaves a thread paced at 90% a backlog
that takes ten times its length to drain, so a missed 90% target with a failed check is reported as
not shown by the host rather than as missed.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import resource
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.bench_peers import DEFAULT_VENV, Count, Split, bytewax_python, sentences
from benchmarks.host_pair import speed_dips
from gale import Bolt, Spout, TopologyBuilder
from gale.config import parse_overrides
from gale.log import configure

ENGINES = ("plain", "gale_acking", "gale_noacking", "bytewax")
TARGET_P99_MS_AT_50PCT = 10.0
TARGET_P99_MS_AT_90PCT = 5.0
#: the rate of the run that finds an engine's maximum: every sentence is due within a microsecond of
#: the start, and the source does the same arithmetic for each as in the paced runs
ALL_DUE_RATE = 1e12
#: the loads whose runs get the host's speed check around them
HOST_CHECK_FROM_PCT = 80


# ----------------------------------------------------------------------------- pure helpers


class Schedule:
    """A rate-limited source's timetable: item ``i`` is due at ``start + i / rate`` (seconds).

    Pure (the caller passes the time in); its source is also pasted into the Bytewax script, whose
    virtual environment has no Gale, so both engines are paced by the same code."""

    def __init__(self, rate: float, start: float):
        if not rate > 0:
            raise ValueError(f"the rate must be positive, got {rate!r}")
        self.rate = float(rate)
        self.start = float(start)

    def at(self, i: int) -> float:
        """When item ``i`` is due."""
        return self.start + i / self.rate

    def due(self, now: float) -> int:
        """How many items are due at ``now``: the number of ``i ≥ 0`` with ``at(i) ≤ now``."""
        if now < self.start:
            return 0
        k = int((now - self.start) * self.rate) + 1
        # the float estimate can be one off either way; settle it against at() itself
        while k > 0 and self.at(k - 1) > now:
            k -= 1
        while self.at(k) <= now:
            k += 1
        return k


def warmup_items(rate: float, warmup: float) -> int:
    """How many items (the first ones) are due during a warm-up of ``warmup`` seconds: those are not
    measured."""
    return math.ceil(rate * warmup)


def summarize(latencies_s: Sequence[float]) -> dict[str, float]:
    """p50, p99, p99.9 and max of latencies given in seconds, in milliseconds (numpy's linear
    interpolation between closest ranks)."""
    if len(latencies_s) == 0:
        raise ValueError("no latencies to summarize")
    ms = np.asarray(latencies_s, dtype=float) * 1000.0
    if np.isnan(ms).any():
        raise ValueError(f"{int(np.isnan(ms).sum())} of {len(ms)} latencies are missing (NaN)")
    p50, p99, p999 = np.percentile(ms, [50.0, 99.0, 99.9])
    return {"p50": float(p50), "p99": float(p99), "p99.9": float(p999), "max": float(ms.max())}


# ----------------------------------------------------------------------------- plain Python loop


def run_plain_paced(data: list[str], rate: float, idle_wait: float = 0.001) -> np.ndarray:
    """The floor the machine sets: ``bench_peers.run_plain``'s loop paced by the same schedule, on
    one thread that sleeps ``idle_wait`` (Gale's ``topology.spout.wait.sleep.millis``) whenever no
    sentence is due; latency is scheduled time → the sentence's last word counted."""
    n = len(data)
    latency = np.empty(n)
    counts: dict[str, int] = {}
    out = []
    append = out.append
    clock = time.perf_counter
    schedule = Schedule(rate, clock())
    i = 0
    while i < n:
        due = min(n, schedule.due(clock()))
        if due == i:
            time.sleep(idle_wait)
            continue
        for j in range(i, due):
            for w in data[j].split():
                c = counts.get(w, 0) + 1
                counts[w] = c
                append((w, c))
            latency[j] = clock() - schedule.at(j)
        out.clear()  # the updates are emitted, not kept: a million sentences would hold 10M tuples
        i = due
    return latency


# ----------------------------------------------------------------------------- Gale


class PacedSentenceSpout(Spout):
    """Emits sentence ``i`` (with its index) once it is due by :class:`Schedule`; with ``tracked``,
    its index is the message id and ``ack`` records scheduled time → ack in ``latency``."""

    output_fields = ["sentence", "index"]

    def __init__(self, data: list[str], rate: float, tracked: bool):
        self.data = data
        self.rate = rate
        self.tracked = tracked

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0
        self.acked = 0
        self.latency = np.full(len(self.data), np.nan)
        self.schedule = Schedule(self.rate, time.perf_counter())

    def next_tuple(self):
        i = self.i
        if i < len(self.data) and i < self.schedule.due(time.perf_counter()):
            if self.tracked:
                self.collector.emit([self.data[i], i], msg_id=i)
            else:
                self.collector.emit([self.data[i], i])
            self.i = i + 1

    def ack(self, msg_id):
        self.latency[msg_id] = time.perf_counter() - self.schedule.at(msg_id)
        self.acked += 1


class IndexedSplit(Bolt):
    """``bench_peers.Split`` that carries the sentence's index with each word (acking off)."""

    output_fields = ["word", "index"]

    def execute(self, tup):
        emit = self.collector.emit
        i = tup[1]
        for w in tup[0].split():
            emit([w, i])


class IndexedCount(Count):
    """``bench_peers.Count`` (acking off) that notes when the last word of each sentence was counted
    (in ``done_at``: index → ``time.perf_counter()``)."""

    words_per_sentence = 10

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.remaining: dict[int, int] = {}
        self.done_at: dict[int, float] = {}

    def execute(self, tup):
        w, i = tup[0], tup[1]
        c = self.counts.get(w, 0) + 1
        self.counts[w] = c
        self.collector.emit([w, c])
        left = self.remaining.get(i, self.words_per_sentence) - 1
        if left:
            self.remaining[i] = left
        else:
            self.remaining.pop(i, None)
            self.done_at[i] = time.perf_counter()


def run_gale_paced(data: list[str], rate: float, acking: bool, extra_conf: dict | None = None,
                   deadline_secs: float = 60.0) -> np.ndarray:
    """Latencies (seconds, one per sentence, in order) of ``data`` offered at ``rate`` sentences/s."""
    from gale import LocalCluster

    builder = TopologyBuilder()
    builder.set_spout("sentences", PacedSentenceSpout, 1, args=(data, rate, acking))
    if acking:
        builder.set_bolt("split", Split, 1).shuffle_grouping("sentences")
        builder.set_bolt("count", Count, 1).fields_grouping("split", ["word"])
    else:
        builder.set_bolt("split", IndexedSplit, 1).shuffle_grouping("sentences")
        builder.set_bolt("count", IndexedCount, 1).fields_grouping("split", ["word"])
    conf = {"topology.worker.executor.threads": 1, "topology.max.spout.pending": 5000,
            "topology.acker.executors": 1 if acking else 0, **(extra_conf or {})}
    n = len(data)
    with LocalCluster() as cluster:
        running = cluster.submit_topology("latency", conf, builder.create_topology())
        executors = {ex.component: ex for ex in running.runtime.executors.values()}
        spout = next(iter(executors["sentences"].spouts.values()))
        count = next(iter(executors["count"].bolts.values()))
        deadline = time.monotonic() + n / rate + deadline_secs
        while True:
            # cheap reads only: a full stats roll would steal the GIL from the executor thread
            if acking:
                finished = spout.acked
            else:
                finished = len(count.done_at)
            if finished >= n:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"gale ({'acking' if acking else 'no acking'}) at {rate:.0f} sentences/s: "
                                   f"{finished} of {n} sentences complete after {n / rate + deadline_secs:.0f} s")
            time.sleep(0.05)  # the benchmark's own polling, not synchronisation of a test
        if acking:
            return spout.latency.copy()
        return np.array([count.done_at[i] - spout.schedule.at(i) for i in range(n)])


# ----------------------------------------------------------------------------- Bytewax

BYTEWAX_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from datetime import datetime, timezone
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import run_main
    """
) + textwrap.dedent(inspect.getsource(Schedule)) + textwrap.dedent(
    """
    rate, n, vocab = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) or int(sys.argv[2]) + 8
    data = [" ".join(f"w{(k + j) % vocab}" for j in range(10)) for k in range(n)]
    schedule = [None]
    remaining = [10] * n
    latency = [None] * n

    class _Paced(StatelessSourcePartition):
        def __init__(self):
            self.i = 0
            schedule[0] = Schedule(rate, time.time())

        def next_batch(self):
            if self.i >= n:
                raise StopIteration()
            k = min(n, schedule[0].due(time.time()))
            batch = [(j, data[j]) for j in range(self.i, k)]
            self.i = max(self.i, k)
            return batch

        def next_awake(self):
            # the next sentence's time, but at most one wake-up a millisecond (as Gale's spout
            # wait): Bytewax's per-activation cost would otherwise cap its rate far below its max
            if self.i >= n:
                return None
            return datetime.fromtimestamp(max(schedule[0].at(self.i), time.time() + 0.001), timezone.utc)

    class PacedSource(DynamicSource):
        def build(self, step_id, worker_index, worker_count):
            return _Paced()

    class _Part(StatelessSinkPartition):
        def write_batch(self, items):
            now = time.time()
            for _word, (_count, j) in items:
                left = remaining[j] - 1
                remaining[j] = left
                if left == 0:
                    latency[j] = now - schedule[0].at(j)

    class LatencySink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return _Part()

    def count(state, item):
        state = (state or 0) + 1
        return state, (state, item[1])

    flow = Dataflow("latency")
    s = op.input("in", flow, PacedSource())
    words = op.flat_map("split", s, lambda item: [(w, item[0]) for w in item[1].split()])
    keyed = op.key_on("key", words, lambda wi: wi[0])
    counted = op.stateful_map("count", keyed, count)
    op.output("out", counted, LatencySink())
    run_main(flow)
    missing = sum(1 for x in latency if x is None)
    assert missing == 0, f"{missing} of {n} sentences never completed"
    print(json.dumps({"latency": [round(x, 7) for x in latency]}))
    """
)


def run_bytewax_paced(n: int, rate: float, python: Path, vocab: int = 0) -> np.ndarray:
    """Bytewax's latencies for ``sentences(n, vocab)`` (``vocab`` 0: n + 8 words) offered at ``rate``."""
    out = subprocess.run([str(python), "-c", BYTEWAX_SCRIPT, repr(rate), str(n), str(vocab)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"the paced Bytewax run failed:\n{out.stderr[-3000:]}")
    return np.array(json.loads(out.stdout.strip().splitlines()[-1])["latency"], dtype=float)


# ----------------------------------------------------------------------------- main


def run_paced(engine: str, n: int, rate: float, vocab: int, python: Path | None, extra: dict) -> np.ndarray:
    """Latencies (seconds) of ``engine`` offered ``sentences(n, vocab)`` at ``rate`` (at
    :data:`ALL_DUE_RATE`, a throughput run of the paced code)."""
    if engine == "bytewax":
        assert python is not None
        return run_bytewax_paced(n, rate, python, vocab)
    if engine == "plain":
        return run_plain_paced(sentences(n, vocab), rate)
    return run_gale_paced(sentences(n, vocab), rate, engine == "gale_acking", extra)


def parse_loads(text: str) -> list[int]:
    """``"50,90"`` → ``[50, 90]``: percentages of the maximum rate, each in 1..100."""
    loads = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            load = int(part)
        except ValueError:
            raise ValueError(f"a load level must be a whole percentage, got {part!r}") from None
        if not 1 <= load <= 100:
            raise ValueError(f"a load level must be between 1 and 100 (% of the maximum rate), got {load}")
        loads.append(load)
    if not loads:
        raise ValueError(f"no load levels in {text!r}")
    return loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--loads", default="50,90", help="load levels, %% of each engine's maximum rate")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds offered before measuring")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured at each load")
    parser.add_argument("--throughput-sentences", type=int, default=100_000,
                        help="sentences in the run that finds each engine's maximum rate")
    parser.add_argument("--vocabulary", type=int, default=None, metavar="WORDS",
                        help="words the paced sentences cycle through (default: the throughput run's, "
                             "its sentences + 8; 0: a new word every sentence, growing with the run)")
    parser.add_argument("--max-rate", action="append", default=[], metavar="ENGINE=RATE",
                        help="skip the throughput run of ENGINE and take RATE sentences/s as its maximum")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="Bytewax's virtual environment")
    parser.add_argument("--no-control", dest="control", action="store_false",
                        help="skip the plain loop paced at Gale's 50%% rate after the verdict")
    parser.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a topology config override for the Gale runs (repeatable)")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engines {unknown}; known: {', '.join(ENGINES)}")
    try:
        loads = parse_loads(args.loads)
    except ValueError as exc:
        parser.error(str(exc))
    given: dict[str, float] = {}
    for item in args.max_rate:
        engine, sep, rate = item.partition("=")
        if not sep or engine not in ENGINES:
            parser.error(f"--max-rate wants ENGINE=RATE with ENGINE one of {', '.join(ENGINES)}, got {item!r}")
        try:
            given[engine] = float(rate)
        except ValueError:
            parser.error(f"--max-rate {item!r}: the rate is not a number")
    if args.vocabulary is not None and args.vocabulary < 0:
        parser.error(f"--vocabulary wants a number of words (0: growing), got {args.vocabulary}")
    vocab = args.throughput_sentences + 8 if args.vocabulary is None else args.vocabulary
    configure(fmt="console", level="WARNING")
    extra = parse_overrides(args.conf)
    python = bytewax_python(args.venv) if "bytewax" in engines else None

    print(f"latency_vocabulary: {vocab or 'a new word every sentence'}"
          + (" words" if vocab else ""), flush=True)
    verdicts: dict[int, tuple[float, float, int, int]] = {}
    host_dips: dict[int, int] = {}
    for engine in engines:
        if engine in given:
            max_rate = given[engine]
        else:
            n = args.throughput_sentences
            # all due at the start: the last sentence's latency is the whole run
            max_rate = n / float(run_paced(engine, n, ALL_DUE_RATE, vocab, python, extra).max())
        print(f"latency_{engine}_max_sentences_per_sec: {max_rate:.0f} sentences/s", flush=True)
        for load in loads:
            rate = max_rate * load / 100.0
            n = math.ceil(rate * (args.warmup + args.duration))
            skip = warmup_items(rate, args.warmup)
            dips = [speed_dips()] if load >= HOST_CHECK_FROM_PCT else []
            switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
            load_avg = os.getloadavg()[0]
            lat = run_paced(engine, n, rate, vocab, python, extra)
            if dips:
                dips.append(speed_dips())
            s = summarize(lat[skip:])
            tag = f"latency_{engine}"
            switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw - switches
            print(f"{tag}_rate_at_{load}pct: {rate:.0f} sentences/s ({n - skip} measured; load average "
                  f"{load_avg:.1f} at the start" + ("" if engine == "bytewax" else
                                                    f", {switches} involuntary context switches") + ")")
            for key, name in (("p50", "p50"), ("p99", "p99"), ("p99.9", "p999"), ("max", "max")):
                print(f"{tag}_{name}_ms_at_{load}pct: {s[key]:.2f} ms")
            for when, d in zip(("before", "after"), dips):
                print(f"{tag}_host_speed_{when}_{load}pct: {d.line()}")
            sys.stdout.flush()
            if engine == "gale_acking":
                verdicts[load] = (s["p99"], rate, n, skip)
                host_dips[load] = sum(d.below_90 for d in dips)
    if 90 in verdicts:
        p99 = verdicts[90][0]
        ok = "met" if p99 <= TARGET_P99_MS_AT_90PCT else "MISSED"
        if ok == "MISSED" and host_dips.get(90):
            # a window of the host slower than 0.9x leaves a thread paced at 90% a growing backlog
            ok = (f"not shown: the host check failed, {host_dips[90]} windows of 50 ms below 0.9x its median "
                  "speed around the run")
        print(f"latency_target_gale_acking_p99_at_90pct: {p99:.2f} ms "
              f"(target <= {TARGET_P99_MS_AT_90PCT:.0f} ms: {ok})", flush=True)
    if 50 in verdicts:
        p99, rate, n, skip = verdicts[50]
        ok = "met" if p99 < TARGET_P99_MS_AT_50PCT else "MISSED"
        print(f"latency_target_gale_acking_p99_at_50pct: {p99:.2f} ms "
              f"(target < {TARGET_P99_MS_AT_50PCT:.0f} ms: {ok})", flush=True)
        if args.control:
            # the machine's share of that tail: the plain loop paced at the same rate, right after
            control = summarize(run_plain_paced(sentences(n, vocab), rate)[skip:])["p99"]
            print(f"latency_control_p99_at_gale_acking_50pct_rate: {control:.2f} ms (the plain loop at "
                  f"{rate:.0f} sentences/s; load average {os.getloadavg()[0]:.1f} after)")


if __name__ == "__main__":
    main()
