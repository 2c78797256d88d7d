"""The worker fork server (gale.worker.zygote, gale.supervisor.fork_server) with real processes: a
forked child is what an exec would have made, exits are reaped, and every failure falls back to exec.
The cluster tests run every worker through it (test_cluster checks a worker's parent)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gale.supervisor import fork_server as fs_mod
from gale.nimbus.devcluster import DAEMON_PRELOAD
from gale.supervisor.fork_server import ForkServer, python_prefix
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1", "OPENBLAS_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT), **extra}


@pytest.fixture
def server(tmp_path):
    log = open(tmp_path / "fork-server.log", "ab")
    fs = ForkServer(python_prefix([]), _env(), stderr=log)
    fs.start()
    children = []
    launch = fs.launch

    def launching(*args, **kw):
        pid = launch(*args, **kw)
        if pid is not None:
            children.append(pid)
        return pid

    fs.launch = launching
    yield fs
    fs.close()
    log.close()
    for pid in children:  # a probe a failed test left waiting on its FIFO (its title names the test's folder)
        try:
            if str(tmp_path) in " ".join(psutil.Process(pid).cmdline()):
                os.kill(pid, signal.SIGKILL)
        except (psutil.Error, ProcessLookupError):
            pass


def _probe(fs: ForkServer, tmp_path: Path, i: int, code: int) -> tuple[int, Path, Path, Path]:
    fifo = tmp_path / f"fifo{i}"
    os.mkfifo(fifo)
    cwd = tmp_path / f"w{i}"
    cwd.mkdir()
    out = tmp_path / f"out{i}"
    title = f"python -m tests.fork_probe {fifo} {code} worker-id-{i}"
    pid = fs.launch([str(fifo), str(code)], cwd, _env(FORK_PROBE=f"probe-{i}"), out, title, module="tests.fork_probe")
    assert pid is not None, "the fork server did not fork"
    return pid, fifo, cwd, out


def _report(out: Path) -> dict:
    def written():  # the report's line (the probe's standard error follows it when it goes to the same file)
        text = out.read_text() if out.exists() else ""
        assert text.endswith("\n"), f"no report yet: {text!r}"
        return json.loads(text.splitlines()[0])

    return eventually(written, 30)


def _exits(tmp_path: Path) -> dict[int, int]:
    lines = (tmp_path / "fork-server.log").read_text().splitlines()
    return {m["pid"]: m["code"] for m in map(json.loads, lines) if m.get("event") == "worker-exited"}


def test_a_forked_worker_is_what_an_exec_would_have_made(server, tmp_path):
    children = [_probe(server, tmp_path, i, 10 + i) for i in range(2)]
    reports = [_report(out) for _, _, _, out in children]
    for i, ((pid, fifo, cwd, _), report) in enumerate(zip(children, reports)):
        proc = psutil.Process(pid)
        assert f"worker-id-{i}" in " ".join(proc.cmdline()), proc.cmdline()  # how a supervisor recognises it
        assert proc.ppid() == server.pid
        # /proc/<pid>/environ is left readable (the fork server's, as it started; the child's own is os.environ)
        assert proc.environ().get("OPENBLAS_NUM_THREADS") == "1"
        assert report["pid"] == pid and report["sid"] == pid and report["pgid"] == pid  # its own session
        assert report["cwd"] == str(cwd) == report["path0"]
        assert report["env"] == f"probe-{i}" and report["hashseed"] == "0"
        assert report["main"] == "__main__" and report["argv"][1:] == [str(fifo), str(10 + i)]
        assert report["stdin"] == ""  # /dev/null, not the fork server's requests
    assert reports[0]["random"] != reports[1]["random"], "random was not reseeded in the child"
    assert reports[0]["numpy_random"] != reports[1]["numpy_random"], "numpy's generator was not reseeded"
    # the tuple ids: two workers of one fork server drawing the same root ids would mix their trees in the ackers
    assert None not in (reports[0]["tuple_id"], reports[1]["tuple_id"]), "the fork server did not import the collectors"
    assert reports[0]["tuple_id"] != reports[1]["tuple_id"], "the tuple ids' generator was not reseeded"
    for pid, fifo, _, _ in children:
        with open(fifo, "w"):
            pass  # let the child finish

    def reaped():
        exits = _exits(tmp_path)
        assert {pid: exits.get(pid) for pid, *_ in children} == {children[0][0]: 10, children[1][0]: 11}
        for pid, *_ in children:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).ppid() != server.pid, "not reaped"

    eventually(reaped, 30)
    assert server.launches == 2


def test_a_worker_outlives_its_fork_server(server, tmp_path):
    pid, fifo, _, out = _probe(server, tmp_path, 0, 3)
    _report(out)
    fork_server_pid = server.pid
    server.close()
    assert not psutil.pid_exists(fork_server_pid) or psutil.Process(fork_server_pid).status() == psutil.STATUS_ZOMBIE
    assert psutil.Process(pid).is_running()
    with open(fifo, "w"):
        pass
    eventually(lambda: _gone(pid), 30)


def _gone(pid: int) -> None:
    try:
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, "still running"
    except psutil.NoSuchProcess:
        pass


def test_a_dead_fork_server_means_exec_then_a_new_one(server, tmp_path, monkeypatch):
    pid, fifo, _, out = _probe(server, tmp_path, 0, 0)
    _report(out)
    with open(fifo, "w"):
        pass
    os.kill(server.pid, signal.SIGKILL)
    monkeypatch.setattr(fs_mod, "RESTART_SECS", 3600.0)
    cwd = tmp_path / "x"
    cwd.mkdir()
    assert server.launch(["a", "0"], cwd, _env(), tmp_path / "x.out", "t", module="tests.fork_probe") is None
    assert server.launch(["a", "0"], cwd, _env(), tmp_path / "x.out", "t", module="tests.fork_probe") is None
    assert server.proc is None  # not restarted within RESTART_SECS
    monkeypatch.setattr(fs_mod, "RESTART_SECS", 0.0)
    server._retry_at = 0.0
    pid2, _, _, out2 = _probe(server, tmp_path, 1, 0)  # restarted, forks again
    assert _report(out2)["pid"] == pid2 and psutil.Process(pid2).ppid() == server.pid


def test_the_answer_comes_once_the_child_is_the_worker_or_says_why_not(server, tmp_path):
    """The fork server answers only when the child has taken its directory, output and command
    line (a supervisor looks for it by its command line at once), or with why it could not."""
    pid, fifo, _, out = _probe(server, tmp_path, 0, 0)
    assert "worker-id-0" in " ".join(psutil.Process(pid).cmdline())  # no waiting: it is there on the answer
    with open(fifo, "w"):
        pass
    missing = tmp_path / "removed"
    assert server.launch(["a", "0"], missing, _env(), tmp_path / "o", "t", module="tests.fork_probe") is None
    # that launch execs (and fails as an exec would); the fork server stays and serves the next one
    pid2, _, _, out2 = _probe(server, tmp_path, 1, 0)
    assert _report(out2)["pid"] == pid2 and psutil.Process(pid2).ppid() == server.pid


def test_what_a_fork_cannot_give_is_left_to_exec(tmp_path):
    missing = ForkServer(["/nonexistent/python"], _env())
    missing.start()
    assert missing.launch(["a"], tmp_path, _env(), tmp_path / "o", "t") is None
    fs = ForkServer(python_prefix([]), _env())
    try:
        # the interpreter reads PYTHON* settings when it starts: a fork cannot change them
        assert fs.launch(["a"], tmp_path, _env(PYTHONHASHSEED="1"), tmp_path / "o", "t") is None
        assert fs.proc is None or fs.launches == 0
    finally:
        fs.close()


@pytest.fixture
def spawned(tmp_path):
    """The probes a test spawned: killed at its end if a failed assertion left one waiting on its
    FIFO (its title names the test's folder)."""
    children: list = []
    yield children
    for child in children:
        try:
            if str(tmp_path) in " ".join(psutil.Process(child.pid).cmdline()):
                os.kill(child.pid, signal.SIGKILL)
        except (psutil.Error, ProcessLookupError):
            pass


def test_a_spawned_process_acts_like_popen_with_its_exit_code_reported(tmp_path, spawned):
    """``spawn``: what a dev cluster's daemons and the tests' command-line calls are forked by — a
    fork server that imported the daemons instead of the worker; separate output and error files;
    the exit code as the fork server reaped it, wait's timeout, signals."""
    fs = ForkServer(python_prefix([]), _env(), preload=list(DAEMON_PRELOAD))
    fs.start()
    try:
        fifo = tmp_path / "early"
        os.mkfifo(fifo)
        # still importing: the caller is told to exec rather than made to wait
        assert fs.spawn([sys.executable, "-m", "tests.fork_probe", str(fifo), "0"], ROOT, _env(), tmp_path / "o") is None
        assert fs.wait_ready(60) and fs.proc is not None

        def spawn(i: int, code: int):
            fifo = tmp_path / f"fifo{i}"
            os.mkfifo(fifo)
            out, err = tmp_path / f"out{i}", tmp_path / f"err{i}"
            argv = [sys.executable, "-m", "tests.fork_probe", str(fifo), str(code)]
            child = fs.spawn(argv, ROOT, _env(FORK_PROBE=f"spawn-{i}"), out, err)
            assert child is not None
            spawned.append(child)
            assert child.poll() is None and child.returncode is None
            return child, fifo, out, err

        child, fifo, out, err = spawn(0, 5)
        report = eventually(lambda: _report(out), 30)
        assert report["env"] == "spawn-0" and report["argv"][1:] == [str(fifo), "5"] and report["cwd"] == str(ROOT)
        assert report["loaded"] == ["gale.nimbus.serve"]  # the daemons' preload, not the worker's
        assert eventually(lambda: err.read_text(), 10) == "the probe's standard error\n"
        assert " ".join(psutil.Process(child.pid).cmdline()).startswith(f"{sys.executable} -m tests.fork_probe ")
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.2)
        with open(fifo, "w"):
            pass
        assert child.wait(30) == 5 and child.poll() == 5

        child, fifo, out, _ = spawn(1, 0)
        eventually(lambda: _report(out), 30)
        child.terminate()
        assert child.wait(30) == -signal.SIGTERM
        child.kill()  # an exited child: nothing to signal

        # a module run another way than `<this interpreter> -m` is left to exec
        assert fs.spawn(["/bin/true"], ROOT, _env(), tmp_path / "o") is None
        assert fs.spawn([sys.executable, "script.py"], ROOT, _env(), tmp_path / "o") is None
    finally:
        fs.close()


def test_a_spawned_process_outliving_its_fork_server_is_gone_with_an_unknown_code(tmp_path, spawned):
    fs = ForkServer(python_prefix([]), _env(), preload=["json"])
    fs.start()
    assert fs.wait_ready(60)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    child = fs.spawn([sys.executable, "-m", "tests.fork_probe", str(fifo), "0"], ROOT, _env(), tmp_path / "out")
    assert child is not None
    spawned.append(child)
    eventually(lambda: _report(tmp_path / "out"), 30)
    fs.close()
    assert child.poll() is None  # runs on, reaped by whoever adopts it
    with open(fifo, "w"):
        pass
    assert child.wait(30) == -1
