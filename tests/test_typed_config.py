"""Typed configuration: the one table of keys is the frozen :class:`gale.config_keys.Config`, and
no module reads configuration by a key's name outside the configuration modules.

The scan (``tests/config_scan.py``) looks at every module of common/, nimbus/, supervisor/ and
worker/ and fails naming the file, line and key of any read by name; a synthetic module below shows
it finds every kind of read and lets writes be.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import types
import typing
from collections.abc import Mapping

import pytest

from gale import config as gconfig
from gale.config_keys import ATTRIBUTES, KEYS, SECRET_KEYS, Config, attribute_name
from gale.config_types import AnyValue, Bool, Int, ListOf, MapOf, Number, Optional, Str, Type
from gale.errors import ConfigError
from tests.config_scan import Read, scan, scan_source

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent

# ------------------------------------------------------------------------------ the scan


@pytest.fixture(scope="module")
def reads() -> list[Read]:
    return scan()


def test_no_module_reads_configuration_by_a_keys_name(reads):
    offending = [str(r) for r in reads]
    assert not offending, (
        "configuration read by a key's name; resolve it once (Config.resolve / as_config) and read the "
        "attribute:\n" + "\n".join(offending))


SAMPLE = '''
from gale.topology.windowing import PERSISTENT, WINDOW_KEYS
from gale.topology import windowing
TIMEOUT = "topology.message.timeout.secs"

def reads(conf, comp):
    a = conf["topology.workers"]
    b = conf.get("topology.debug", False)
    c = conf.pop("topology.secret", None)
    d = conf.setdefault("nimbus.seeds", [])
    e = "storm.local.dir" in conf
    f = conf[TIMEOUT]
    g = comp.conf.get(PERSISTENT)
    h = conf.get(windowing.PERSISTENT)
    i = any(comp.conf.get(k) is not None for k in WINDOW_KEYS)
    for key in WINDOW_KEYS:
        conf.get(key)

def writes(conf):
    out = {"topology.workers": 2, TIMEOUT: 30}
    conf["topology.debug"] = True
    conf.update({"storm.local.dir": "/x"})
    unknown = conf.get("kafka.topic"), conf["my.app.limit"]
    return out
'''


def test_the_scan_finds_every_kind_of_read_and_no_write():
    windowing = {"PERSISTENT": "topology.bolts.window.persistent"}
    window_keys = ("topology.bolts.window.length.count", "topology.bolts.window.session.gap.ms")
    modules = {"gale.topology.windowing": (windowing, {"WINDOW_KEYS": window_keys})}
    got = sorted((r.line, r.key) for r in scan_source(SAMPLE, "sample.py", modules))
    assert got == [
        (7, "topology.workers"), (8, "topology.debug"), (9, "topology.secret"), (10, "nimbus.seeds"),
        (11, "storm.local.dir"), (12, "topology.message.timeout.secs"), (13, "topology.bolts.window.persistent"),
        (14, "topology.bolts.window.persistent"),
        (15, "topology.bolts.window.length.count"), (15, "topology.bolts.window.session.gap.ms"),
        (17, "topology.bolts.window.length.count"), (17, "topology.bolts.window.session.gap.ms"),
    ]


# ------------------------------------------------------------------------------ the table


def _annotation(t: Type) -> object:
    """The Python type a key of value type ``t`` has as an attribute."""
    if isinstance(t, Optional):
        return _annotation(t.inner) | None
    if isinstance(t, ListOf):
        return tuple[_annotation(t.item), ...]
    if isinstance(t, MapOf):
        return Mapping[str, _annotation(t.value)]
    return {Int: int, Number: float, Str: str, Bool: bool, AnyValue: typing.Any}[type(t)]


def test_every_key_is_one_typed_field_declared_once():
    keyed = [f for f in dataclasses.fields(Config) if "key" in f.metadata]
    names = [f.metadata["key"].name for f in keyed]
    assert len(names) == len(set(names)) == len(KEYS) > 100
    hints = typing.get_type_hints(Config)
    for f in keyed:
        key = f.metadata["key"]
        assert f.name == attribute_name(key.name) == ATTRIBUTES[key.name]
        assert KEYS[key.name] is key
        assert hints[f.name] == _annotation(key.type), key.name
        assert key.type.check(key.default), key.name
    assert [f.name for f in dataclasses.fields(Config) if "key" not in f.metadata] == ["user"]


def test_the_defaults_are_the_tables():
    config = Config()
    assert config.to_dict() == gconfig.defaults()
    assert config.topology_message_timeout_secs == 30 and config.supervisor_slots_ports == (6700, 6701, 6702, 6703)
    assert config.topology_localityaware_higher_bound == 0.8 and config.topology_acker_executors is None
    assert Config.resolve({}, allow_user_keys=False) == config


def test_secret_keys_are_marked_and_left_out_of_the_repr():
    assert SECRET_KEYS == {"nimbus.api.token", "storm.zookeeper.auth.payload", "topology.secret"}
    config = Config.resolve({"nimbus.api.token": "tok-123", "topology.secret": "sec-456"}, allow_user_keys=False)
    assert "tok-123" not in repr(config) and "sec-456" not in repr(config)
    assert "topology_workers=1" in repr(config)


# ------------------------------------------------------------------------------ resolution


def test_resolve_fills_defaults_and_keeps_user_keys_apart():
    config = Config.resolve({"topology.workers": 3, "kafka.topic": "words", "my.app.limit": [1, 2]},
                            where="topology configuration", allow_user_keys=True)
    assert config.topology_workers == 3 and config.topology_debug is False
    assert dict(config.user) == {"kafka.topic": "words", "my.app.limit": [1, 2]}
    assert not hasattr(config, "kafka_topic")


def test_resolve_refuses_an_unknown_key_of_a_reserved_namespace_naming_it():
    with pytest.raises(ConfigError, match=r"unknown configuration key 'topology\.wrokers' in topology configuration; "
                                          r"did you mean 'topology\.workers'\?"):
        Config.resolve({"topology.wrokers": 2}, where="topology configuration", allow_user_keys=True)
    with pytest.raises(ConfigError, match=r"unknown configuration key 'topology\.frobnicate'"):
        Config.resolve({"topology.frobnicate": 1}, allow_user_keys=True)
    with pytest.raises(ConfigError, match=r"unknown configuration key 'kafka\.topic' in daemon config"):
        Config.resolve({"kafka.topic": "x"}, where="daemon config", allow_user_keys=False)


def test_resolve_refuses_a_mistyped_value_naming_key_value_and_type():
    with pytest.raises(ConfigError) as info:
        Config.resolve({"topology.workers": "two"}, where="topology configuration", allow_user_keys=True)
    assert str(info.value) == ("invalid value for 'topology.workers' in topology configuration: 'two' (str); "
                               "expected an integer >= 1")
    with pytest.raises(ConfigError, match=r"'supervisor\.slots\.ports'.*expected a list of integers from 1 to 65535"):
        Config.resolve({"supervisor.slots.ports": [6700, 70000]}, allow_user_keys=False)


def test_a_components_configuration_goes_over_its_topologys():
    topology = Config.resolve({"topology.message.timeout.secs": 60, "kafka.topic": "a", "my.x": 1},
                              where="topology configuration", allow_user_keys=True)
    component = topology.with_overrides({"topology.tick.tuple.freq.secs": 5, "kafka.topic": "b"},
                                        where="configuration of component 'count'")
    assert component.topology_tick_tuple_freq_secs == 5 and component.topology_message_timeout_secs == 60
    assert dict(component.user) == {"kafka.topic": "b", "my.x": 1}
    assert topology.topology_tick_tuple_freq_secs is None and topology.user["kafka.topic"] == "a"  # unchanged
    assert topology.with_overrides({}) is topology
    with pytest.raises(ConfigError, match=r"invalid value for 'topology\.tick\.tuple\.freq\.secs' in configuration "
                                          r"of component 'count': -1"):
        topology.with_overrides({"topology.tick.tuple.freq.secs": -1}, where="configuration of component 'count'")
    with pytest.raises(ConfigError, match="did you mean 'topology.tick.tuple.freq.secs'"):
        topology.with_overrides({"topology.tick.tuple.freq.sec": 1})


def test_the_object_is_frozen_and_its_values_immutable():
    config = Config.resolve({"supervisor.slots.ports": [6700], "topology.spark.conf": {"a": 1}, "app.k": [1]},
                            allow_user_keys=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.topology_workers = 2  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        config.kafka_topic = "x"  # type: ignore[attr-defined]
    assert config.supervisor_slots_ports == (6700,)
    with pytest.raises(TypeError):
        config.topology_spark_conf["a"] = 2  # type: ignore[index]
    with pytest.raises(TypeError):
        config.user["app.k"] = 2  # type: ignore[index]
    assert isinstance(config.topology_spark_conf, types.MappingProxyType)


def test_to_dict_round_trips_and_gives_plain_values():
    given = {"supervisor.slots.ports": (6700, 6701), "topology.spark.conf": {"spark.x": "1"}, "topology.workers": 4,
             "kafka.topic": "t", "topology.secret": "s" * 32}
    config = Config.resolve(given, allow_user_keys=True)
    out = config.to_dict()
    assert out["supervisor.slots.ports"] == [6700, 6701] and type(out["topology.spark.conf"]) is dict
    assert out["kafka.topic"] == "t" and list(out)[-1] == "kafka.topic"  # user keys after the table's
    assert list(out)[:len(KEYS)] == list(KEYS)
    assert Config.resolve(out, allow_user_keys=True) == config
    out["supervisor.slots.ports"].append(1)
    assert config.supervisor_slots_ports == (6700, 6701)  # a copy
    assert "topology.secret" not in config.to_dict(without_secret=True)
    assert config.to_dict(without_secret=True)["kafka.topic"] == "t"
    assert pickle.loads(pickle.dumps(config)) == config
    assert copy.deepcopy(config) == config


# ------------------------------------------------------------------------------ the mapping functions


def test_the_mapping_functions_take_a_config_too(tmp_path):
    conf = {**gconfig.defaults(), "storm.zookeeper.servers": ["zk1", "zk2:2182"], "nimbus.api.token": "t"}
    config = Config.resolve(conf, allow_user_keys=False)
    assert gconfig.zookeeper_hosts(conf) == gconfig.zookeeper_hosts(config) == "zk1:2181,zk2:2182"
    assert gconfig.api_token(conf) == gconfig.api_token(config) == "t"
    assert gconfig.as_config(config) is config and gconfig.as_config(conf) == config
    bad = {"topology.localityaware.lower.bound": 0.5, "topology.localityaware.higher.bound": 0.5}
    for form in (bad, Config.resolve(bad, allow_user_keys=False)):
        with pytest.raises(ConfigError, match="must be below topology.localityaware.higher.bound"):
            gconfig.check_bounds(form)
    path = tmp_path / "gale.yaml"
    path.write_text("nimbus.http.port: 9090\nsupervisor.slots.ports: [7000]\n")
    loaded = gconfig.load_daemon_config(path)
    assert (loaded.nimbus_http_port, loaded.supervisor_slots_ports, loaded.user) == (9090, (7000,), {})
    assert loaded.to_dict() == gconfig.daemon_config(path)


def test_the_topology_secret_helpers():
    assert gconfig.stored_secret({"topology.secret": "abc"}) == "abc"
    assert gconfig.stored_secret({"topology.secret": ""}) is None and gconfig.stored_secret({}) is None
    assert gconfig.stored_secret(["not", "a", "mapping"]) is None
    gconfig.refuse_secret({"topology.workers": 1})
    with pytest.raises(ConfigError, match="topology.secret is generated by nimbus at submit"):
        gconfig.refuse_secret({"topology.secret": None})
