import pytest

from gale import config
from gale.errors import ConfigError


def test_defaults_follow_storm():
    d = config.defaults()
    assert d["storm.zookeeper.port"] == 2181
    assert d["storm.zookeeper.root"] == "/storm"
    assert d["supervisor.slots.ports"] == [6700, 6701, 6702, 6703]
    assert d["topology.message.timeout.secs"] == 30
    assert d["nimbus.task.timeout.secs"] == 30
    assert d["nimbus.task.launch.secs"] == 120
    assert d["nimbus.monitor.freq.secs"] == 10
    assert d["supervisor.worker.timeout.secs"] == 30
    assert d["topology.acker.executors"] is None
    assert d["nimbus.http.port"] == 8080
    assert d["topology.max.error.report.per.interval"] == 5


def test_defaults_validate():
    config.validate(config.defaults(), allow_user_keys=False)


def test_defaults_are_copies():
    a = config.defaults()
    a["supervisor.slots.ports"].append(1)
    assert config.defaults()["supervisor.slots.ports"] == [6700, 6701, 6702, 6703]


def test_unknown_key_suggests_closest():
    with pytest.raises(ConfigError, match=r"'storm\.zookeeper\.servrs'.*did you mean 'storm\.zookeeper\.servers'"):
        config.validate({"storm.zookeeper.servrs": ["a"]}, allow_user_keys=False)


def test_unknown_key_in_reserved_namespace_refused_even_for_topologies():
    with pytest.raises(ConfigError, match="topology.wrokers.*did you mean 'topology.workers'"):
        config.validate({"topology.wrokers": 2}, allow_user_keys=True)
    with pytest.raises(ConfigError, match="unknown configuration key 'topology.frobnicate'"):
        config.validate({"topology.frobnicate": 2}, allow_user_keys=True)


def test_user_keys_allowed_in_topology_config_but_not_typos():
    config.validate({"kafka.topic": "x", "my.app.threshold": 3}, allow_user_keys=True)
    with pytest.raises(ConfigError, match="did you mean 'topology.workers'"):
        config.validate({"topolgy.workers": 2}, allow_user_keys=True)


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("topology.workers", "two", "an integer >= 1"),
        ("topology.workers", 0, "an integer >= 1"),
        ("topology.workers", True, "an integer >= 1"),
        ("storm.zookeeper.servers", "localhost", "a list of strings"),
        ("supervisor.slots.ports", [6700, 70000], "a list of integers from 1 to 65535"),
        ("topology.debug", "yes", "true or false"),
        ("topology.acker.executors", -1, "an integer >= 0 or null"),
    ],
)
def test_wrong_type_names_key_value_and_expected(key, value, expected):
    with pytest.raises(ConfigError) as info:
        config.validate({key: value}, allow_user_keys=True)
    msg = str(info.value)
    assert repr(key) in msg and repr(value) in msg and expected in msg


def test_parse_overrides():
    got = config.parse_overrides(["topology.workers=2", "kafka.topic=words", "topology.debug=true", "a.b=[1, 2]"])
    assert got == {"topology.workers": 2, "kafka.topic": "words", "topology.debug": True, "a.b": [1, 2]}
    # a string-typed key keeps digits as a string
    assert config.parse_overrides(["storm.local.dir=123"]) == {"storm.local.dir": "123"}
    with pytest.raises(ConfigError, match="key=value"):
        config.parse_overrides(["topology.workers"])


def test_yaml_file(tmp_path):
    p = tmp_path / "gale.yaml"
    p.write_text("storm.zookeeper.servers: [zk1, zk2]\nnimbus.http.port: 9090\n")
    conf = config.daemon_config(p)
    assert conf["storm.zookeeper.servers"] == ["zk1", "zk2"]
    assert conf["nimbus.http.port"] == 9090
    assert conf["topology.workers"] == 1
    assert config.zookeeper_hosts(conf) == "zk1:2181,zk2:2181"


def test_yaml_errors_name_file_and_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("storm.zookeeper.servers: [zk1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml is not valid YAML at line \d+"):
        config.daemon_config(bad)
    notmap = tmp_path / "list.yaml"
    notmap.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        config.daemon_config(notmap)
    with pytest.raises(ConfigError, match="cannot read config file"):
        config.daemon_config(tmp_path / "missing.yaml")
    typo = tmp_path / "typo.yaml"
    typo.write_text("nimbus.http.prot: 80\n")
    with pytest.raises(ConfigError, match=r"typo.yaml.*did you mean 'nimbus.http.port'"):
        config.daemon_config(typo)
    user = tmp_path / "user.yaml"
    user.write_text("my.app.key: 1\n")
    with pytest.raises(ConfigError, match="unknown configuration key 'my.app.key'"):
        config.daemon_config(user)


def test_a_config_file_that_is_not_utf8_is_refused_naming_the_file_and_the_place(tmp_path):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("storm.zookeeper.port: 2181\n# r\u00e9sum\u00e9 of the cluster\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"config file .*latin1.yaml is not UTF-8 text: byte 0xe9 at line 2, "
                                          r"column 4 \(save it as UTF-8\)"):
        config.daemon_config(latin1)


def test_topology_config_overlays_cluster():
    cluster = config.defaults()
    eff = config.topology_config(cluster, {"topology.workers": 3, "kafka.topic": "t"})
    assert eff["topology.workers"] == 3 and eff["kafka.topic"] == "t"
    assert cluster["topology.workers"] == 1


@pytest.mark.parametrize("argv", [["-m", "gale.nimbus.cli", "list"], ["-m", "gale.nimbus.cli", "serve"],
                                  ["-m", "gale.supervisor.cli", "serve"]],
                         ids=["nimbus-list", "nimbus-serve", "supervisor-serve"])
def test_a_daemon_or_command_given_a_config_file_that_is_not_utf8_says_so_in_one_line(tmp_path, argv):
    import subprocess
    import sys

    latin1 = tmp_path / "gale.yaml"
    latin1.write_bytes(b"# caf\xe9\nstorm.zookeeper.port: 2181\n")
    proc = subprocess.run([sys.executable, *argv, "--config", str(latin1)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not UTF-8 text: byte 0xe9 at line 1, column 6" in lines[0], proc.stderr
