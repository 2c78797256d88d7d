"""Everything a topology author imports: ``from common.api import Spout, Bolt, TopologyBuilder``."""

from common.topology.builder import Topology, TopologyBuilder
from common.topology.components import (
    BasicBolt,
    Bolt,
    FailedException,
    OutputFieldsDeclarer,
    ReportedFailedException,
    Spout,
    TopologyContext,
)
from common.topology.tuple import DEFAULT_STREAM, Fields, Tuple

__all__ = [
    "BasicBolt", "Bolt", "DEFAULT_STREAM", "FailedException", "Fields", "OutputFieldsDeclarer",
    "ReportedFailedException", "Spout", "Topology", "TopologyBuilder", "TopologyContext", "Tuple",
]
