"""Windowed bolts' configuration: Storm's keys, consistency, and the submit rules (window vs
``topology.message.timeout.secs``, count window vs ``topology.max.spout.pending``) named in the
error, checked by the builder, by the definition nimbus reads and with the effective config."""

from __future__ import annotations

import json

import pytest

from gale import ConfigError, TopologyError
from gale.topology.definition import TopologyDef
from gale.topology.windowing import validate_windows
from tests.test_windowed_bolt import Collect, topology

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

def test_window_configuration_is_component_configuration_with_storms_keys():
    bolt = Collect({"kind": "time", "length": 60_000, "slide": 10_000, "event_time": True, "lag": 5000,
                    "late_stream": "late"})
    conf = bolt.component_configuration()
    assert conf["topology.bolts.window.length.duration.ms"] == 60_000
    assert conf["topology.bolts.window.sliding.interval.duration.ms"] == 10_000
    assert conf["topology.bolts.tuple.timestamp.field.name"] == "ts"
    assert conf["topology.bolts.tuple.timestamp.max.lag.ms"] == 5000
    assert conf["topology.bolts.late.tuple.stream"] == "late"
    topo = topology({"kind": "time", "length": 100, "slide": 100, "event_time": True, "late_stream": "late"})
    assert topo.definition.components["win"].streams["late"].fields == ["late_tuple"]


@pytest.mark.parametrize("window, message", [
    ({"kind": "time", "length": 100, "slide": 200}, "longer than topology.bolts.window.length.duration.ms"),
    ({"kind": "time", "length": 100, "slide": 100, "lateness": 10}, "needs event time"),
])
def test_inconsistent_window_configuration_is_refused_at_build(window, message):
    with pytest.raises(TopologyError, match=message):
        topology(window)


def test_a_window_longer_than_the_message_timeout_is_refused_at_build_with_the_rule_named():
    window = {"kind": "time", "length": 25_000, "slide": 10_000}
    with pytest.raises(TopologyError) as err:
        topology(window)
    text = str(err.value)
    assert "windowed bolt 'win'" in text and "rule 'window duration <= topology.message.timeout.secs'" in text
    assert "35000 ms" in text and "managed state" in text
    topology(window, conf={"topology.message.timeout.secs": 40})  # within the rule: accepted


def test_event_time_counts_lag_interval_and_allowed_lateness_against_the_timeout():
    window = {"kind": "time", "length": 10_000, "slide": 10_000, "event_time": True, "lag": 5000,
              "lateness": 6000, "interval": 1000}
    with pytest.raises(TopologyError, match="lag \\+ watermark interval \\+ allowed lateness = 32000 ms"):
        topology(window)


def test_a_count_window_larger_than_max_spout_pending_is_refused_with_the_rule_named():
    window = {"kind": "count", "length": 800, "slide": 300}
    with pytest.raises(TopologyError, match="rule 'window count <= topology.max.spout.pending': .* 1100 tuples"):
        topology(window, conf={"topology.max.spout.pending": 1000})
    topology(window, conf={"topology.max.spout.pending": 1100})
    topology(window)  # no limit on pending tuples: nothing to check


def test_the_window_rules_are_checked_again_from_the_json_definition_nimbus_reads():
    topo = topology({"kind": "time", "length": 10_000, "slide": 10_000})  # 20 s <= 30 s
    defn = json.loads(topo.to_json())
    defn["conf"]["topology.message.timeout.secs"] = 10
    with pytest.raises(TopologyError, match="rule 'window duration <= topology.message.timeout.secs'"):
        TopologyDef.from_json(json.dumps(defn))
    with pytest.raises(ConfigError, match="longer than topology.message.timeout.secs = 5 s"):
        validate_windows(topo.definition.components, {**topo.conf, "topology.message.timeout.secs": 5})


def test_mixed_windows_follow_storms_rules():
    topology({"kind": "count_every_duration", "length": 100, "slide": 5000})
    topology({"kind": "duration_every_count", "length": 5000, "slide": 100})
    with pytest.raises(TopologyError, match="rule 'window count <= topology.max.spout.pending': window length = "
                                            "2000 tuples"):
        topology({"kind": "count_every_duration", "length": 2000, "slide": 5000},
                 conf={"topology.max.spout.pending": 1000})
    with pytest.raises(TopologyError, match="window length = 40000 ms is longer than"):
        topology({"kind": "duration_every_count", "length": 40_000, "slide": 10})
    with pytest.raises(TopologyError, match="applies to duration and session windows"):
        topology({"kind": "duration_every_count", "length": 1000, "slide": 10, "event_time": True, "lateness": 5})
