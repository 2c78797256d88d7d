"""The topologies of the scale benchmark: a spout and a bolt that simulated workers never run.

:func:`scale_topology` builds a definition with a given number of executors and workers; the
benchmark ships this module as the topology's code bundle, so supervisors download real code and
simulated workers load the real definition.
"""

from __future__ import annotations

from typing import Any

from gale import Bolt, Spout, TopologyBuilder
from gale.topology.builder import Topology


class ScaleSpout(Spout):
    def declare_output_fields(self, declarer) -> None:
        declarer.declare(["n"])

    def next_tuple(self) -> None:  # pragma: no cover - simulated workers run no executors
        pass


class ScaleBolt(Bolt):
    def declare_output_fields(self, declarer) -> None:
        declarer.declare(["n"])

    def execute(self, tup) -> None:  # pragma: no cover
        self.collector.ack(tup)


def scale_topology(name: str, executors: int, workers: int) -> Topology:
    """A spout and a bolt with ``executors`` executors in all, acker executors included (one
    per worker, Storm's default): a quarter spouts, the rest bolts."""
    if executors < workers + 2:
        raise ValueError(f"{name}: {executors} executors cannot cover {workers} ackers, a spout and a bolt")
    rest = executors - workers  # what is not an acker
    spouts = max(1, rest // 4)
    bolts = rest - spouts
    b = TopologyBuilder()
    b.set_spout("spout", ScaleSpout, spouts)
    b.set_bolt("bolt", ScaleBolt, bolts).shuffle_grouping("spout")
    conf: dict[str, Any] = {"topology.workers": workers}
    return b.create_topology(name=name, conf=conf)
