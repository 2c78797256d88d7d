"""The nimbus CLI without a cluster: every command's --help has an example, and errors name the
problem and the fix on one line with exit code 1 (usage errors: 2)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gale.zkserver import free_port
from gale.nimbus.cli import main

# no tuple passes the hot path here (tests/hot_path_audit.py): the compiled pass runs these only
pytestmark = pytest.mark.build_independent


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_help_has_an_example(command):
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output and f"nimbus {command}" in result.output, result.output


def test_data_commands_offer_json():
    for command in ("list", "status", "cluster", "workers", "kill", "activate", "deactivate", "rebalance", "local"):
        assert "--json" in CliRunner().invoke(main, [command, "--help"]).output, command


def test_unreachable_nimbus_says_what_to_check(tmp_path, monkeypatch):
    config = tmp_path / "client.yaml"
    config.write_text(f"nimbus.seeds: ['127.0.0.1:{free_port()}']\n")
    for args in (["list"], ["cluster"], ["workers", "x"], ["kill", "x", "--wait", "0", "--wait-removal"]):
        result = CliRunner().invoke(main, [*args, "--config", str(config)])
        assert result.exit_code == 1, (args, result.output)
        assert result.output.count("\n") == 1 and "nimbus is unreachable" in result.output
        assert "check nimbus.seeds and nimbus.http.port in your config" in result.output


def test_usage_errors_are_refused_before_any_call(tmp_path):
    config = tmp_path / "client.yaml"
    config.write_text(f"nimbus.seeds: ['127.0.0.1:{free_port()}']\n")
    result = CliRunner().invoke(main, ["rebalance", "x", "-e", "split=many", "--config", str(config)])
    assert result.exit_code == 1 and "-e expects COMPONENT=N" in result.output
    result = CliRunner().invoke(main, ["kill", "x", "--wait", "-1", "--config", str(config)])
    assert result.exit_code == 2 and "0<=x<=86400" in result.output
    result = CliRunner().invoke(main, ["list", "--config", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 1 and "cannot read config file" in result.output
