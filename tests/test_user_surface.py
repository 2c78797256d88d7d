"""The user surface: what ``gale``, ``gale.spark`` and ``gale.connectors`` export, the collector
protocols and their implementations, and the one way to declare outputs (with its alias)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import gale
import gale.connectors
import gale.spark
from gale import Bolt, BoltOutputCollector, OutputFieldsDeclarer, Spout, SpoutOutputCollector, TopologyBuilder
from gale.errors import TopologyError
from gale.worker.runtime import collector as runtime_collector


@pytest.mark.parametrize("module", [gale, gale.spark, gale.connectors], ids=lambda m: m.__name__)
def test_every_exported_name_resolves(module):
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        module.Nope  # noqa: B018


def test_import_gale_alone_loads_no_topology_api():
    """The daemons and the command line import ``gale.<module>``, which imports ``gale`` first: that
    must not load the builder, the records or the windows (a third of a second a process)."""
    code = ("import sys, gale; "
            "print(sorted(m for m in sys.modules if m.startswith('gale.topology') or m == 'gale.records'))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
    assert set(gale.__all__) <= set(dir(gale))
    assert sorted(gale.__all__) == sorted(gale._LAZY)


def _protocol_methods(protocol):
    return {
        name: member for name, member in inspect.getmembers(protocol, inspect.isfunction)
        if not name.startswith("_")
    }


@pytest.mark.parametrize(("protocol", "implementation"), [
    (SpoutOutputCollector, runtime_collector.SpoutOutputCollector),
    (BoltOutputCollector, runtime_collector.BoltOutputCollector),
])
def test_runtime_collectors_implement_the_user_protocols_exactly(protocol, implementation):
    methods = _protocol_methods(protocol)
    assert {"emit", "emit_direct", "report_error", "incr_metric", "declare_metrics"} <= set(methods)
    for name, declared in methods.items():
        implemented = getattr(implementation, name)
        want = [(p.name, p.kind, p.default) for p in inspect.signature(declared).parameters.values()]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(implemented).parameters.values()]
        assert got == want, f"{implementation.__name__}.{name}{inspect.signature(implemented)} != protocol {want}"
    # and nothing public that the protocol does not document
    public = {n for n, _ in inspect.getmembers(implementation, inspect.isfunction) if not n.startswith("_")}
    assert public - set(methods) <= {"targets"}


def test_components_annotate_the_protocols():
    assert inspect.get_annotations(Spout)["collector"] == "SpoutOutputCollector"
    assert inspect.get_annotations(Bolt)["collector"] == "BoltOutputCollector"
    hints = inspect.signature(Bolt.prepare, eval_str=True).parameters["collector"].annotation
    assert hints is BoltOutputCollector


class Declared(Bolt):
    def declare_output_fields(self, declarer):
        declarer.declare(["a", "b"])
        declarer.declare_stream("errors", ["message"])


class Aliased(Bolt):
    output_fields = ["a", "b"]


class Both(Bolt):
    output_fields = ["ignored"]

    def declare_output_fields(self, declarer):
        declarer.declare(["mine"])


class Src(Spout):
    output_fields = ["a"]


def _streams(cls):
    d = OutputFieldsDeclarer()
    cls().declare_output_fields(d)
    return {sid: s.fields for sid, s in d.streams.items()}


def test_output_fields_is_only_an_alias_of_declare_output_fields():
    assert _streams(Declared) == {"default": ["a", "b"], "errors": ["message"]}
    assert _streams(Aliased) == {"default": ["a", "b"]}
    assert _streams(Both) == {"default": ["mine"]}  # declare_output_fields is the one way; the alias is its default
    assert _streams(Bolt) == {}
    b = TopologyBuilder()
    b.set_spout("src", Src)
    b.set_bolt("x", Aliased).shuffle_grouping("src")
    b.set_bolt("y", Both).fields_grouping("x", ["b"])
    topo = b.create_topology()
    assert topo.definition.components["x"].streams["default"].fields == ["a", "b"]
    b.set_bolt("z", Both).fields_grouping("y", ["ignored"])
    with pytest.raises(TopologyError, match="ignored"):
        b.create_topology()
