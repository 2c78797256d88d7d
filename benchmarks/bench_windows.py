"""Windowed bolts: throughput of windowed aggregations and memory per buffered tuple.

Run: ``.venv/bin/python -m benchmarks.bench_windows [--tuples N] [--repeat R]``

Prints ``name: value unit`` lines:

* ``windows_{count_tumbling,time_tumbling,time_sliding,session}_tuples_per_sec`` — input tuples fully
  processed (every spout tuple acked: windowed, fired, its window's output emitted anchored to all of
  it, expired and acked) per second through the real runtime (one spout with event timestamps, one
  windowed bolt counting per window, one acker; one executor thread), best of ``--repeat``. Count:
  tumbling windows of 1000 tuples; time: 1 s event-time windows (1000 tuples each), sliding ones every
  250 ms; sessions: 200 keys with 50 ms gaps;
* ``windows_{count,time}_tumbling_persistent_tuples_per_sec`` — the same two windows with
  ``with_persistence()`` (the buffer in managed state, memory provider, 100 ms checkpoints; a tuple
  counts when its spout was told ``ack``, i.e. when the checkpoint holding it committed);
* ``windows_core_time_sliding_tuples_per_sec`` — the pure core alone (add + advance, no runtime);
* ``window_buffer_bytes_per_tuple`` — what the window adds per buffered tuple (its entry, the store's
  slot, the pane's slot), by tracemalloc over 200,000 buffered tuples (the tuples themselves excluded:
  they exist without a window too), and ``window_buffer_with_tuple_bytes_per_tuple`` including a
  two-field tuple; ``window_buffer_persistent_bytes_per_tuple`` the same for a persistent window
  (the state's working dict and the not yet checkpointed change as well);
* ``windows_anchor_emit_per_sec_{100,10000}_tuple_window`` — emits anchored to a whole window of that
  size (every output carries one edge per window tuple).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from gale import Bolt, Count, Duration, Spout, TopologyBuilder, WindowedBolt
from gale.log import configure
from gale.worker.local import LocalTopology, local_conf

N_KEYS = 200


class TimedSpout(Spout):
    """``n`` tuples ``[key, ts]``, one event-time millisecond apart, each tracked."""

    def __init__(self, n):
        self.n = n

    def declare_output_fields(self, d):
        d.declare(["key", "ts"])

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.i = 0
        self.acked = 0

    def next_tuple(self):
        if self.i < self.n:
            i = self.i
            self.i += 1
            self.collector.emit([f"k{i % N_KEYS}", i], msg_id=i)

    def ack(self, msg_id):
        self.acked += 1


class CountPerWindow(WindowedBolt):
    def __init__(self, kind):
        super().__init__()
        if kind.endswith("_persistent"):
            self.with_persistence()
            kind = kind[: -len("_persistent")]
        if kind == "count_tumbling":
            self.with_tumbling_window(Count(1000))
        elif kind == "time_tumbling":
            self.with_tumbling_window(Duration(1000)).with_timestamp_field("ts")
        elif kind == "time_sliding":
            self.with_window(Duration(1000), Duration(250)).with_timestamp_field("ts")
        else:
            self.with_session_window(Duration(50), key_field="key").with_timestamp_field("ts")
        self.with_watermark_interval(Duration(1)).with_idle_timeout(Duration(100))

    def declare_output_fields(self, d):
        d.declare(["start", "end", "n"])

    def execute(self, window):
        self.collector.emit([window.start, window.end, len(window.get())])


def run_topology(kind: str, n: int) -> float:
    b = TopologyBuilder()
    b.set_spout("src", TimedSpout, 1, kwargs={"n": n})
    b.set_bolt("win", CountPerWindow, 1, kwargs={"kind": kind}).global_grouping("src")
    topo = b.create_topology(name=f"bench-{kind}", conf={"topology.max.spout.pending": 20000,
                                                          "topology.acker.executors": 1,
                                                          "topology.state.checkpoint.interval.ms": 100})
    conf = local_conf(topo, {})
    t0 = time.perf_counter()
    lt = LocalTopology(kind, topo, conf)
    spout = next(s for ex in lt.runtime.executors.values() if ex.component == "src" for s in ex.spouts.values())
    # the count window's last partial window never fires: those tuples stay buffered
    # (persistent windows ack them at their checkpoint)
    target = n - (n % 1000 if kind == "count_tumbling" else 0)
    try:
        while spout.acked < target:
            time.sleep(0.002)  # benchmark: poll the spout's ack count
        elapsed = time.perf_counter() - t0
    finally:
        lt.kill()
    return target / elapsed


def core_throughput(n: int) -> float:
    from gale.worker.windows.core import TimeWindows
    from gale.worker.windows.store import Entry

    core = TimeWindows(1000, 250)
    t0 = time.perf_counter()
    for i in range(n):
        core.add(Entry(i, i, None))
        if i % 100 == 0:
            core.advance(i)
    core.flush()
    return n / (time.perf_counter() - t0)


def buffer_bytes(n: int = 200_000, persistent: bool = False) -> tuple[float, float]:
    from gale.topology.state import KeyValueState
    from gale.topology.tuple import Fields, new_tuple
    from gale.worker.windows.core import TimeWindows
    from gale.worker.windows.store import Entry
    from gale.worker.state.windows import StateWindowStore

    fields = Fields(["key", "ts"], "src:default")
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tuples = [new_tuple([f"k{i % N_KEYS}", i], fields, 1, {i: i}, i) for i in range(n)]
    with_tuples = tracemalloc.get_traced_memory()[0]
    # persistent: the state's working dict and the changes not yet checkpointed (packed) as well
    core = TimeWindows(10 * n, 1000, store=StateWindowStore(KeyValueState(), None) if persistent else None)
    for i, t in enumerate(tuples):
        core.add(Entry(i, i, t))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(core) == n
    return (after - with_tuples) / n, (after - base) / n


class Sink(Bolt):
    def execute(self, tup):
        self.collector.ack(tup)


def anchor_emits(window: int, emits: int = 200) -> float:
    """Emits anchored to ``window`` tracked tuples, through the real collector."""
    b = TopologyBuilder()
    b.set_spout("src", TimedSpout, 1, kwargs={"n": 0})
    b.set_bolt("win", CountPerWindow, 1, kwargs={"kind": "time_tumbling"}).global_grouping("src")
    b.set_bolt("sink", Sink, 1).shuffle_grouping("win")
    topo = b.create_topology(name="bench-anchor", conf={"topology.acker.executors": 1})
    lt = LocalTopology("anchor", topo, local_conf(topo, {}), spawn=False)
    from gale.topology.tuple import Fields, new_tuple

    ex = next(ex for ex in lt.runtime.executors.values() if ex.component == "win")
    collector = next(iter(ex.collectors.values()))
    fields = Fields(["key", "ts"], "src:default")
    tuples = [new_tuple(["k", i], fields, 1, {i * 7 + 1: i + 1}, i + 1) for i in range(window)]
    queues = [q for e in lt.runtime.executors.values() if e.component in ("__acker", "sink") for q in e.queue_list]
    collector.auto_anchor = tuples
    t0 = time.perf_counter()
    for i in range(emits):
        collector.emit([0, 1, i])
    elapsed = time.perf_counter() - t0
    sink = next(q for e in lt.runtime.executors.values() if e.component == "sink" for q in e.queue_list)
    assert len(sink) == emits and len(sink[0].message_id) == window  # one edge per window tuple's root
    for q in queues:
        q.clear()
    lt.runtime.stop()
    return emits / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="run only these topology kinds (e.g. count_tumbling_persistent)")
    args = parser.parse_args()
    configure(level="WARNING")
    kinds = ("count_tumbling", "time_tumbling", "count_tumbling_persistent", "time_tumbling_persistent",
             "time_sliding", "session")
    for kind in args.only or kinds:
        best = max(run_topology(kind, args.tuples) for _ in range(args.repeat))
        print(f"windows_{kind}_tuples_per_sec: {best:.0f} tuples/s")
    print(f"windows_core_time_sliding_tuples_per_sec: {max(core_throughput(200_000) for _ in range(args.repeat)):.0f} "
          "tuples/s")
    overhead, total = buffer_bytes()
    print(f"window_buffer_bytes_per_tuple: {overhead:.1f} bytes")
    print(f"window_buffer_with_tuple_bytes_per_tuple: {total:.1f} bytes")
    overhead, _ = buffer_bytes(persistent=True)
    print(f"window_buffer_persistent_bytes_per_tuple: {overhead:.1f} bytes (before its checkpoint)")
    for size in (100, 10_000):
        print(f"windows_anchor_emit_per_sec_{size}_tuple_window: {anchor_emits(size, 2000 if size == 100 else 20):.0f} "
              "emits/s")


if __name__ == "__main__":
    main()
