"""Gale: distributed realtime computation in Python with Storm's architecture.

Everything a topology author needs::

    from gale import Spout, ReliableSpout, Bolt, BasicBolt, TopologyBuilder, Tuple, Fields, FailedException
    from gale import ConfigError, TopologyError                # errors a topology file may raise or catch
    from gale import WindowedBolt, Count, Duration, TupleWindow  # windows (docs/windows.md)
    from gale import StatefulBolt, KeyValueState, StateError   # managed state (docs/state.md)
    from gale import TransactionalSink, SinkError              # sinks that commit with the checkpoint (docs/sinks.md)
    from gale.sinks import PostgresSink, KafkaSink, FileSink, RedisSink
    from gale import LocalCluster, complete_topology          # local mode and tests
    from gale import ShellBolt, ShellSpout                     # multi-lang: a subprocess per task
    from gale.spark import SparkBolt, SparkSink                # Spark stages
    from gale.connectors import KafkaSpout, KafkaBolt, RabbitMQSpout, RabbitMQBolt

This package's source is the repository's ``common/`` folder (the shared foundation: configuration,
the ZooKeeper layout and records, LocalState, the topology definition); ``nimbus/``, ``supervisor/``
and ``worker/`` are its subpackages ``gale.nimbus``, ``gale.supervisor`` and ``gale.worker``.
Local mode lives in the worker and is imported on first use, so ``import gale`` stays light and the
foundation never imports the daemons.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if __name__ != "gale":  # pragma: no cover - the repository root on sys.path
    raise ImportError(
        f"Gale's foundation was imported as {__name__!r}; its only import name is 'gale' "
        "(install the project: pip install -e . — a module of yours named 'common' shadows nothing of Gale's)"
    )

from gale import compiled as _compiled

_compiled.install()  # before any hot module loads: GALE_PURE_PYTHON and stale builds (gale.compiled)

if TYPE_CHECKING:  # pragma: no cover
    from gale.errors import ConfigError, GaleError, TopologyError
    from gale.topology.builder import TopologyBuilder
    from gale.topology.collector import BoltOutputCollector, SpoutOutputCollector
    from gale.topology.components import (
        BasicBolt,
        Bolt,
        FailedException,
        OutputFieldsDeclarer,
        ReportedFailedException,
        Spout,
        TopologyContext,
    )
    from gale.topology.definition import Topology
    from gale.topology.reliable_spout import ReliableSpout
    from gale.topology.sink import SinkError, TransactionalSink
    from gale.topology.state import KeyValueState, StateError, StatefulBolt
    from gale.topology.tuple import DEFAULT_STREAM, Fields, Tuple
    from gale.topology.windowing import Count, Duration, TupleWindow, WindowedBolt
    from gale.worker.local import LocalCluster, complete_topology
    from gale.worker.multilang.components import ShellBolt, ShellSpout

#: every public name, loaded from its module on first use (PEP 562): ``import gale`` alone — as the
#: daemons' and the command line's imports of ``gale.<module>`` do — loads none of the topology API
_LAZY = {
    **dict.fromkeys(("ConfigError", "GaleError", "TopologyError"), "gale.errors"),
    "TopologyBuilder": "gale.topology.builder",
    **dict.fromkeys(("BoltOutputCollector", "SpoutOutputCollector"), "gale.topology.collector"),
    **dict.fromkeys(("BasicBolt", "Bolt", "FailedException", "OutputFieldsDeclarer", "ReportedFailedException",
                     "Spout", "TopologyContext"), "gale.topology.components"),
    "Topology": "gale.topology.definition",
    "ReliableSpout": "gale.topology.reliable_spout",
    **dict.fromkeys(("SinkError", "TransactionalSink"), "gale.topology.sink"),
    **dict.fromkeys(("KeyValueState", "StateError", "StatefulBolt"), "gale.topology.state"),
    **dict.fromkeys(("DEFAULT_STREAM", "Fields", "Tuple"), "gale.topology.tuple"),
    **dict.fromkeys(("Count", "Duration", "TupleWindow", "WindowedBolt"), "gale.topology.windowing"),
    **dict.fromkeys(("LocalCluster", "complete_topology"), "gale.worker.local"),
    **dict.fromkeys(("ShellBolt", "ShellSpout"), "gale.worker.multilang.components"),
}

__all__ = [
    "BasicBolt", "Bolt", "BoltOutputCollector", "ConfigError", "Count", "DEFAULT_STREAM", "Duration",
    "FailedException", "Fields",
    "GaleError", "LocalCluster", "OutputFieldsDeclarer", "ReliableSpout", "ReportedFailedException", "ShellBolt",
    "ShellSpout", "Spout", "SpoutOutputCollector", "Topology", "TopologyBuilder", "TopologyContext", "TopologyError",
    "Tuple", "TupleWindow", "WindowedBolt", "complete_topology", "KeyValueState", "StateError", "StatefulBolt",
    "SinkError", "TransactionalSink",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gale' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
