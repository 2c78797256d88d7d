"""A windowed bolt over the durable source, for the kill -9 test (tests/test_windows_cluster.py).

DurableSpout (durable_wc.py: replays every id not acked, across restarts) → ``window`` (a windowed
bolt, tumbling windows of ``test.window.ms``, emitting the ids of each window; processing time, or
with ``test.event.time`` event time ``id * 5`` ms with late tuples on the ``late`` stream) →
``wsink`` (appends every id of every window, and of every late tuple, to ``sink-w<task>.log`` before
acking). Config keys as durable_wc.py's, plus ``test.window.ms`` and ``test.event.time``.
"""

from __future__ import annotations

from pathlib import Path

from durable_wc import DurableSpout

from gale import Bolt, Duration, TopologyBuilder, WindowedBolt


def event_time(tup):
    return tup["id"] * 5


class WindowIds(WindowedBolt):
    def __init__(self, window_ms=2000, event=False):
        super().__init__()
        self.with_tumbling_window(Duration(window_ms))
        if event:
            self.with_timestamp_extractor(event_time).with_late_tuple_stream("late").with_idle_timeout(Duration(2000))

    def declare_output_fields(self, declarer):
        declarer.declare(["start", "end", "ids"])

    def execute(self, window):
        self.collector.emit([window.start, window.end, [t["id"] for t in window.get()]])


class WindowSink(Bolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        Path(conf["test.state.dir"]).mkdir(parents=True, exist_ok=True)
        self.log = open(Path(conf["test.state.dir"]) / f"sink-w{context.task_id}.log", "a")

    def execute(self, tup):
        ids = [tup["late_tuple"][0]] if "late_tuple" in tup.fields else tup["ids"]
        self.log.write("".join(f"{i}\n" for i in ids))
        self.log.flush()
        self.collector.ack(tup)


def topology(conf=None):
    conf = conf or {}
    b = TopologyBuilder()
    b.set_spout("source", DurableSpout, 2)
    event = bool(conf.get("test.event.time", False))
    b.set_bolt("window", WindowIds, 1, kwargs={"window_ms": int(conf.get("test.window.ms", 2000)), "event": event}) \
        .shuffle_grouping("source")
    sink = b.set_bolt("wsink", WindowSink, 1).shuffle_grouping("window")
    if event:
        sink.shuffle_grouping("window", "late")
    return b.create_topology(conf={"topology.workers": 2, "topology.max.spout.pending": 500})
