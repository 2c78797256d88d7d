"""Managed state benchmark: the cost of a stateful word count, of checkpoints and of restoring state.

Run: ``.venv/bin/python -m benchmarks.bench_state [--sentences N] [--repeat R] [--no-redis] [--only NAME ...]``

Prints ``name: value unit`` lines:

* ``state_wordcount_{stateless,stateful_memory,exactly_once_memory,stateful_redis}_spout_tuples_per_sec`` — sentences
  fully processed (acked) per second in local mode, in steady state (``--window`` seconds after a
  3 s warm-up; ``--window 0``: whole runs of ``--sentences``, including the wait for the last checkpoint): spout → split ×4 (shuffle) → count ×4 (fields on
  word), the count a plain dict (stateless) or a ``StatefulBolt`` with 1 s checkpoints (memory
  provider; Redis from Debian's ``redis-server``, started here), ``topology.max.spout.pending``
  ``--pending`` (default 20000) for all three, best of ``--repeat``, interleaved; and ``..._ratio``
  (stateful / stateless, the issue's target is ≥ 0.8); ``exactly_once_memory`` is the stateful one with
  ``topology.state.guarantee: exactly-once`` (acks at once, a pause per checkpoint). A stateful bolt's acks wait for the next
  commit, so its rate is bounded by about pending / (1.5 × interval): the ratio depends on
  ``--pending``;
* ``state_wordcount_{...}_cpu_us_per_sentence`` and ``..._cpu_ratio`` (with ``--window``) — this
  process's CPU time per acked sentence in the window (least over the repeats), and stateless /
  stateful: the rates' ratio without the noise of a machine whose other processes take the cores
  (the rates are then bounded by the CPU the process gets, not by its cost per sentence);
* ``state_wordcount_{...}_checkpoint_ms_{p50,p90}`` and ``..._checkpoints`` (stateful variants, with
  ``--window``) — each checkpoint committed in the window, from its start to its commit: exactly once,
  from the pause (the sources stop) to the commit (they emitted again from the commit point on);
  at least once, from PREPARE to the commit; and how many committed;
* ``state_host_plain_loop_secs_by_window`` — before each window, the CPU seconds of a fixed
  plain-Python job (:func:`benchmarks.host_pair.job`): the host's speed, which drifts on shared
  machines; windows whose figures differ by more than about 10% are not comparable;
* ``state_checkpoint_{memory,redis}_{N}_changed_keys_ms`` — one task's prepare + commit of a
  checkpoint in which N keys changed;
* ``state_restore_redis_{N}_keys_secs`` — loading a task's committed state of N keys (what a task
  restarted after ``kill -9`` does at INITSTATE before processing again).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import stateful_word_count  # noqa: E402
import word_count  # noqa: E402

from benchmarks.host_pair import job  # noqa: E402
from gale import LocalCluster, TopologyBuilder  # noqa: E402
from gale.log import configure  # noqa: E402
from gale.worker.state.provider import MemoryStateProvider  # noqa: E402
from gale.worker.state.task_state import TaskState  # noqa: E402


EXTRA: dict = {}


def topology(sentences: int, stateful: bool, pending: int | None):
    b = TopologyBuilder()
    b.set_spout("sentences", word_count.RandomSentenceSpout, 1, kwargs={"limit": sentences, "seed": 1})
    b.set_bolt("split", word_count.SplitSentence, 4).shuffle_grouping("sentences")
    count = stateful_word_count.StatefulWordCount if stateful else word_count.WordCount
    b.set_bolt("count", count, 4).fields_grouping("split", ["word"])
    return b.create_topology("bench", {"topology.max.spout.pending": pending, **EXTRA})


def run(sentences: int, stateful: bool, conf: dict, pending: int | None, window: float = 0.0) -> float:
    """Sentences acked per second: over the whole run of ``sentences`` (until the last is acked), or
    with ``window`` > 0, in steady state — acked during ``window`` seconds after a 3 s warm-up, the
    spout unbounded."""
    topo = topology(0 if window else sentences, stateful, pending)
    with LocalCluster() as cluster:
        t0 = time.perf_counter()
        running = cluster.submit_topology("bench", conf, topo)
        spouts = [ex for ex in running.runtime.executors.values() if ex.component == "sentences"]

        def acked() -> int:
            return sum(sum(ex.stats.acked.values()) for ex in spouts)

        if window:
            time.sleep(3.0)  # benchmark pacing: warm-up, then a timed window
            a1, t1, c1 = acked(), time.perf_counter(), time.process_time()
            durations = sample_checkpoints(running, window)
            a2, t2, c2 = acked(), time.perf_counter(), time.process_time()
            if durations:
                CHECKPOINT_MS.setdefault(topo_name(stateful, conf), []).extend(durations)
            CPU_US[topo_name(stateful, conf)] = min(CPU_US.get(topo_name(stateful, conf), float("inf")),
                                                    (c2 - c1) / max(a2 - a1, 1) * 1e6)
            return (a2 - a1) / (t2 - t1)
        while acked() < sentences:
            time.sleep(0.05)
        return sentences / (time.perf_counter() - t0)


#: per variant, the least process CPU time per acked sentence (µs) over its windows: what a loaded
#: machine disturbs less than the rates (other processes take cores, not this process's CPU time)
CPU_US: dict[str, float] = {}


#: per variant, the duration (ms) of every checkpoint committed in its windows
CHECKPOINT_MS: dict[str, list[float]] = {}


def sample_checkpoints(running, seconds: float) -> list[float]:
    """Sleep ``seconds`` (benchmark pacing), meanwhile reading the checkpoint spout's figures every
    5 ms: the duration of each checkpoint committed meanwhile."""
    coordinators = [ex for ex in running.runtime.executors.values() if ex.component == "$checkpointspout"]
    seen: dict[float, float] = {}
    end = time.monotonic() + seconds
    first = None
    while time.monotonic() < end:
        for ex in coordinators:
            extra = ex.stats.extra
            txid, ms = extra.get("checkpoint_txid_max"), extra.get("checkpoint_duration_ms")
            if txid is not None and ms is not None:
                if first is None:
                    first = txid  # committed before the window: not counted
                elif txid != first:
                    seen[txid] = ms
        time.sleep(0.005)
    return list(seen.values())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def topo_name(stateful: bool, conf: dict) -> str:
    return repr((stateful, sorted(conf.items())))


def checkpoint_ms(provider, keys: int) -> float:
    state = TaskState(provider, "bench", f"count{keys}", 0, 1, None)
    state.load()
    for i in range(keys):
        state.kv.put(f"word-{i}", i)
    t0 = time.perf_counter()
    state.prepare(1)
    state.commit(1)
    return (time.perf_counter() - t0) * 1000.0


def restore_secs(provider, keys: int) -> float:
    state = TaskState(provider, "bench", f"restore{keys}", 0, 1, None)
    for i in range(0, keys, 100_000):
        for j in range(i, min(i + 100_000, keys)):
            state.kv.put(f"word-{j}", j)
        state.prepare(i + 1)
        state.commit(i + 1)
    fresh = TaskState(provider, "bench", f"restore{keys}", 0, 1, None)
    t0 = time.perf_counter()
    fresh.load()
    assert len(fresh.kv) == keys
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=30_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument("--interval", type=int, default=1000, help="topology.state.checkpoint.interval.ms")
    parser.add_argument("--window", type=float, default=10.0,
                        help="measure steady state over this many seconds (0: whole runs of --sentences)")
    parser.add_argument("--pending", type=int, default=20_000,
                        help="topology.max.spout.pending of all variants (0: unlimited)")
    parser.add_argument("--only", nargs="*", default=None,
                        help="run only these variants (stateless always runs: the ratios are to it)")
    parser.add_argument("--no-micro", action="store_true", help="skip the checkpoint and restore micro-benchmarks")
    args = parser.parse_args()
    EXTRA["topology.state.checkpoint.interval.ms"] = args.interval
    configure(fmt="console", level="WARNING")
    redis = None
    if not args.no_redis:
        from gale.redisserver import RedisServer

        redis = RedisServer().start()
    try:
        variants = [("stateless", False, {}), ("stateful_memory", True, {"topology.state.provider": "memory"}),
                    ("exactly_once_memory", True, {"topology.state.provider": "memory",
                                                   "topology.state.guarantee": "exactly-once"})]
        if redis is not None:
            variants.append(("stateful_redis", True, {"topology.state.provider": "redis",
                                                      "topology.state.redis.url": redis.url}))
            variants.append(("exactly_once_redis", True, {"topology.state.provider": "redis",
                                                          "topology.state.redis.url": redis.url,
                                                          "topology.state.guarantee": "exactly-once"}))
        if args.only:
            variants = [v for v in variants if v[0] == "stateless" or v[0] in args.only]
        best: dict[str, float] = {}
        host: list[str] = []
        for _ in range(args.repeat):  # interleaved, so a change in machine load hits every variant alike
            for name, stateful, conf in variants:
                if redis is not None and stateful:
                    from gale.worker.state.redis_provider import RedisStateProvider

                    RedisStateProvider(redis.url).client.flushdb()
                host.append(f"{name}={job():.3f}")
                best[name] = max(best.get(name, 0.0),
                                 run(args.sentences, stateful, conf, args.pending or None, args.window))
        # the host's speed before each window: a fixed plain-Python job's CPU seconds (windows whose
        # figures differ by more than about 10% ran on a host of a different speed)
        print(f"state_host_plain_loop_secs_by_window: {' '.join(host)}")
        for name, _, _ in variants:
            print(f"state_wordcount_{name}_spout_tuples_per_sec: {best[name]:.0f} tuples/s")
            if name != "stateless":
                print(f"state_wordcount_{name}_ratio: {best[name] / best['stateless']:.2f}")
        if args.window:
            cpu = {name: CPU_US[topo_name(stateful, conf)] for name, stateful, conf in variants}
            for name, _, _ in variants:
                print(f"state_wordcount_{name}_cpu_us_per_sentence: {cpu[name]:.1f} us")
                if name != "stateless":
                    print(f"state_wordcount_{name}_cpu_ratio: {cpu['stateless'] / cpu[name]:.2f}")
            for name, stateful, conf in variants:
                durations = CHECKPOINT_MS.get(topo_name(stateful, conf))
                if durations:
                    print(f"state_wordcount_{name}_checkpoint_ms_p50: {percentile(durations, 0.5):.1f} ms")
                    print(f"state_wordcount_{name}_checkpoint_ms_p90: {percentile(durations, 0.9):.1f} ms")
                    print(f"state_wordcount_{name}_checkpoints: {len(durations)}")
        sys.stdout.flush()
        if args.no_micro:
            return
        providers = [("memory", MemoryStateProvider())]
        if redis is not None:
            from gale.worker.state.redis_provider import RedisStateProvider

            providers.append(("redis", RedisStateProvider(redis.url)))
        for pname, provider in providers:
            for keys in (1_000, 10_000, 100_000):
                print(f"state_checkpoint_{pname}_{keys}_changed_keys_ms: {checkpoint_ms(provider, keys):.1f} ms")
        if redis is not None:
            keys = 1_000_000
            print(f"state_restore_redis_{keys}_keys_secs: {restore_secs(providers[-1][1], keys):.2f} s")
    finally:
        if redis is not None:
            redis.cleanup()


if __name__ == "__main__":
    main()
