"""A persistent windowed bolt (``with_persistence()``) over the durable source, for the kill -9 test
(tests/test_windows_state_cluster.py).

DurableSpout (durable_wc.py: replays every id not acked, across restarts) → ``window`` (persistent
tumbling windows of ``test.window.ms`` of processing time, emitting the ids of each window; its
tuples are acked when the checkpoint holding them commits) → ``wsink`` (windowed_wc.py: appends every
id to ``sink-w<task>.log`` before acking). Config keys as durable_wc.py's, plus ``test.window.ms``
and the state keys (``topology.state.provider``, ``topology.state.redis.url``).
"""

from __future__ import annotations

from durable_wc import DurableSpout
from windowed_wc import WindowIds, WindowSink

from gale import TopologyBuilder


class PersistentWindowIds(WindowIds):
    def __init__(self, window_ms=2000):
        super().__init__(window_ms)
        self.with_persistence()


def topology(conf=None):
    conf = conf or {}
    b = TopologyBuilder()
    b.set_spout("source", DurableSpout, 2)
    b.set_bolt("window", PersistentWindowIds, 1, kwargs={"window_ms": int(conf.get("test.window.ms", 2000))}) \
        .shuffle_grouping("source")
    b.set_bolt("wsink", WindowSink, 1).shuffle_grouping("window")
    return b.create_topology(conf={"topology.workers": 2, "topology.max.spout.pending": 500,
                                   "topology.state.checkpoint.interval.ms": 200})
