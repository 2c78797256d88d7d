"""A Spark stage between a source and state under exactly-once, across rollbacks that happen while the
stage holds tuples (Spark still starting, its batch filling): one micro-batch must never mix tuples
of two generations. Its outputs may anchor to several inputs (an aggregation, or a transform that
loses the row lineage anchors each row to the whole batch); a row anchored to a rolled-back tuple
and to a current one is dropped by the stateful bolt as stale, which would lose the current one's
effect while its tuple tree completes — the source's position past it, its count missing.

The Spark application is a stand-in (its readiness is the test's to give) and the job runs in plain
Python, so the flow is driven round by round on a simulated clock, as tests/test_spark_units.py does."""

from __future__ import annotations

import time

from gale import TopologyBuilder
from gale.clock import SimulatedClock
from gale.spark import SparkBolt
from gale.worker.assembly import Assembly
from gale.worker.local import LocalTopology, local_conf
from gale.worker.runtime.runtime import WorkerRuntime
from gale.worker.state.exactly_once import read_epoch
from gale.worker.state.inspect import read_committed
from tests.combination_components import RewindableItemSpout, Tally
from tests.test_spark_units import StandInSession, StandInSpark

ITEMS = 60


class WholeBatchPass(SparkBolt):
    """Passes each input on, every output row anchored to the whole batch (a transform whose row
    lineage is lost, as ``selectExpr("value AS word")``)."""

    output_fields = ["i"]

    def spark_job(self, spark, tuples):
        from gale.worker.spark.lineage import Anchoring, Lineage
        from gale.worker.spark.stage import BatchResult

        return BatchResult(values=[[t["i"]] for t in tuples], anchoring=Anchoring([None] * len(tuples)),
                           lineage=Lineage("batch"))


def _runtime(clock):
    b = TopologyBuilder()
    b.set_spout("src", RewindableItemSpout, 1)
    b.set_bolt("stage", WholeBatchPass, 1).shuffle_grouping("src")
    b.set_bolt("count", Tally, 1).fields_grouping("stage", ["i"])
    topo = b.create_topology(conf={
        "test.items": ITEMS, "topology.state.guarantee": "exactly-once",
        "topology.state.checkpoint.interval.ms": 100, "topology.message.timeout.secs": 3,
        "topology.spark.batch.size": 1000, "topology.spark.batch.millis": 100,
    })
    spark = StandInSpark()
    full = local_conf(topo, None)
    lt = LocalTopology("t", topo, full, start=False)
    rt = WorkerRuntime(topo, topology_id="t-local", conf=full, layout=lt.layout, executors=lt.layout.executors,
                       clock=clock, resources={"spark": spark}, factory=Assembly())
    rt.start(spawn=False)
    return rt, spark


def _step(rt, clock, seconds):
    clock.advance(seconds)
    rt.fire_timers(clock.monotonic())
    rt.run_until_idle(1000)


def test_rollbacks_while_the_stage_holds_tuples_never_lose_a_current_tuple():
    clock = SimulatedClock()
    rt, spark = _runtime(clock)
    provider, prefix = rt.resources["state"], rt.resources["state_prefix"]
    stage = next(ex for ex in rt.executors.values() if ex.component == "stage")
    try:
        # Spark is starting: the stage holds what arrives; pauses cannot drain, so the topology
        # rolls back (every 3 s) and the source re-sends everything under a new generation
        for _ in range(200):  # 10 simulated seconds
            _step(rt, clock, 0.05)
        generation = read_epoch(provider, prefix).generation
        assert generation >= 2, f"no rollback while Spark was starting (generation {generation})"
        assert stage.pending_count() > 0
        spark.future.set_result(StandInSession())

        deadline = time.monotonic() + 60
        last = None
        while time.monotonic() < deadline:
            _step(rt, clock, 0.05)
            time.sleep(0.001)  # the job thread runs the batch meanwhile
            epoch = read_epoch(provider, prefix)
            counts = read_committed(provider, prefix, "count", key_groups=128)
            last = (epoch, counts)
            if epoch.phase == "COMMITTED" and len(counts) == ITEMS and all(v == 1 for v in counts.values()):
                break
        epoch, counts = last
        # every item once: none lost in a mixed batch, none counted twice
        assert counts == {i: 1 for i in range(ITEMS)}, (epoch, sorted(counts.items()))
        stale = stage.stats.extra.get("state_stale_tuples", 0)
        assert stale > 0, "the stage dropped no tuple of a rolled-back generation"
    finally:
        rt.stop()
