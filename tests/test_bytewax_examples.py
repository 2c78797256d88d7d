"""The Bytewax examples are plain Bytewax files: each gives on Gale what Bytewax's own engine gives
(both run here, in this process: the ``bytewax`` package ships its engine), and the commands a user
runs them with work — ``nimbus local`` and ``python -m gale.bytewax``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from gale.topology.loader import load_topology_file
from gale.worker.bytewax.run import run_topology

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["bytewax_word_count.py", "bytewax_windowed.py"]


def bytewax_output(path: Path, capsys) -> list[str]:
    from bytewax.testing import run_main

    spec = importlib.util.spec_from_file_location(f"bw_ref_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capsys.readouterr()
    run_main(module.flow)
    return sorted(capsys.readouterr().out.splitlines())


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_example_gives_on_gale_what_it_gives_on_bytewax(example, capsys):
    path = ROOT / "examples" / example
    expected = bytewax_output(path, capsys)
    assert expected
    run_topology(load_topology_file(path, {"topology.workers": 2}), timeout=60)
    assert sorted(capsys.readouterr().out.splitlines()) == expected


def test_nimbus_local_and_python_m_gale_bytewax_run_a_file_until_its_input_ends(tmp_path):
    path = ROOT / "examples" / "bytewax_word_count.py"
    nimbus = Path(sys.executable).parent / "nimbus"
    local = subprocess.run([str(nimbus), "local", str(path), "--json"], capture_output=True, text=True, timeout=120)
    assert local.returncode == 0, local.stderr
    assert "('the', 400)" in local.stdout and '"ended": true' in local.stdout
    module = subprocess.run([sys.executable, "-m", "gale.bytewax", f"{path}:flow", "-w", "2"], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)
    assert module.returncode == 0, module.stderr
    assert sorted(module.stdout.splitlines()) == sorted(line for line in local.stdout.splitlines()
                                                         if line.startswith("('"))


def test_a_user_error_stops_python_m_gale_bytewax_with_the_traceback(tmp_path):
    (tmp_path / "broken.py").write_text(
        "import bytewax.operators as op\n"
        "from bytewax.dataflow import Dataflow\n"
        "from bytewax.testing import TestingSource\n"
        "from bytewax.connectors.stdio import StdOutSink\n"
        "flow = Dataflow('broken')\n"
        "s = op.input('inp', flow, TestingSource([1, 0]))\n"
        "op.output('out', op.map('inv', s, lambda x: 1 / x), StdOutSink())\n")
    proc = subprocess.run([sys.executable, "-m", "gale.bytewax", "broken:flow"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 1
    assert "ZeroDivisionError" in proc.stderr and "broken.inv.flat_map_batch" in proc.stderr
