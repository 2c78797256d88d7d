"""Gale as an installed package, next to other software and user code with clashing names.

* A topology whose directory holds ``common.py``, ``worker.py``, ``nimbus.py``, ``supervisor.py``
  (the names of Gale's source folders) and ``gale_helpers.py`` runs with those modules — in local
  mode (started from the repository's root, where the folders themselves are on ``sys.path``) and
  on a real cluster.
* supervisord (PyPI's ``supervisor``) and Gale live in one virtual environment: both import, both
  sets of console scripts work (supervisord installs ``supervisord``, ``supervisorctl``,
  ``echo_supervisord_conf``, ``pidproxy``; Gale's ``supervisor`` script is untouched), and
  supervisord can run Gale's ``supervisor`` command.
* A wheel built with ``python -m build`` installs into a clean virtual environment outside the
  repository; there ``nimbus local`` runs an example copied to a scratch directory, and
  ``nimbus dev-cluster --demo`` serves the UI (pages and static assets) and submits the flagship
  example — all from inside the installed package.

The clean environment gets Gale's dependencies through a ``.pth`` file naming the project
environment's site-packages (so nothing large is downloaded); Gale itself comes only from the wheel.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import zipfile
from pathlib import Path

import httpx
import psutil
import pytest

from tests.cluster import cli, dump_logs, make_cluster
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parent.parent
SHADOW = Path(__file__).resolve().parent / "shadow_topology"
WORDS = ["alpha", "beta", "gamma", "delta"]
VENV_BIN = Path(sys.executable).parent


# ------------------------------------------------------------------------------ the package list


def test_every_source_package_is_in_the_distribution():
    """pyproject lists the packages by hand (the folders map into ``gale`` through package-dir):
    every folder with an ``__init__.py`` under a mapped folder must be listed, or a wheel lacks it
    (``gale.worker.state`` once was missing: stateful topologies failed outside the repository)."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    expected = set()
    for name, folder in setup["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if "__pycache__" not in rel.parts:
                expected.add(".".join([name, *rel.parts]))
    assert expected - listed == set(), f"missing from [tool.setuptools] packages: {sorted(expected - listed)}"
    assert listed - expected == set(), f"listed but not a package folder: {sorted(listed - expected)}"


# ------------------------------------------------------------------------------ shadowing names


def _marked(word: str) -> str:
    return f"user-common:{word.upper()}!@user-nimbus#user-supervisor"


def _records(out: Path) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for path in sorted(out.glob("task-*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            found[rec["word"]] = rec
    return found


def _check_user_modules_were_used(records: dict[str, dict], sources: Path) -> None:
    assert sorted(records) == sorted(WORDS), records
    for word, rec in records.items():
        assert rec["marked"] == _marked(word) and rec["shout"] == word.upper() + "!"
        assert sorted(rec["origins"]) == ["common", "nimbus", "supervisor", "worker"]
        for name, origin in rec["origins"].items():
            origin = Path(origin)
            assert origin.name == f"{name}.py" and ROOT not in origin.parents, origin
            assert origin.read_text() == (sources / f"{name}.py").read_text()


@pytest.fixture
def shadow_dir(tmp_path) -> Path:
    topo = tmp_path / "topo"
    shutil.copytree(SHADOW, topo, ignore=shutil.ignore_patterns("__pycache__"))
    return topo


def test_topology_modules_named_like_gales_folders_run_in_local_mode(shadow_dir, tmp_path):
    out = tmp_path / "out"
    # from the repository's root: its folders common/, worker/, nimbus/, supervisor/ are on sys.path too
    proc = subprocess.run(
        [sys.executable, "-m", "gale.nimbus.cli", "local", str(shadow_dir / "shadow.py"), "--duration", "4", "--json",
         "-c", f"shadow.out={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["errors"] == {} and result["components"]["words"]["acked"] == len(WORDS)
    _check_user_modules_were_used(_records(out), shadow_dir)


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_topology_modules_named_like_gales_folders_run_on_a_cluster(zk_server, shadow_dir, tmp_path):
    out = tmp_path / "out"
    cluster = make_cluster(zk_server, tmp_path, supervisors=1, slots=1)
    cluster.start()
    try:
        cli(cluster, "submit", str(shadow_dir / "shadow.py"), "--name", "shadow", "-c", f"shadow.out={out}")

        def all_words_marked():
            records = _records(out)
            assert sorted(records) == sorted(WORDS), records
            return records

        records = eventually(all_words_marked, timeout=120)
        _check_user_modules_were_used(records, shadow_dir)
        # the modules came from the worker's copy of the code bundle, not from the submitted directory
        assert all(shadow_dir not in Path(o).parents for r in records.values() for o in r["origins"].values())
        cli(cluster, "kill", "shadow", "--wait", "0")
    except BaseException:
        print(dump_logs(cluster))
        raise
    finally:
        cluster.cleanup()


# ------------------------------------------------------------------------------ supervisord


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("timeout", 120)
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_supervisord_and_gale_share_one_virtualenv(tmp_path):
    # supervisord's console scripts and Gale's, side by side in the project environment
    for script in ("supervisord", "supervisorctl", "echo_supervisord_conf", "pidproxy", "supervisor", "nimbus", "worker"):
        assert (VENV_BIN / script).exists(), script
    assert "from gale.supervisor.cli import main" in (VENV_BIN / "supervisor").read_text()
    assert re.fullmatch(r"4\.\d+\.\d+", _run([VENV_BIN / "supervisord", "--version"], cwd=tmp_path).stdout.strip())
    assert "supervisor serve" in _run([VENV_BIN / "supervisor", "--help"], cwd=tmp_path).stdout
    # both packages import in one interpreter: supervisord's `supervisor` and Gale's `gale.supervisor`
    code = ("import json, supervisor, supervisor.options, supervisor.supervisord, gale.supervisor.daemon; "
            "print(json.dumps([supervisor.__file__, gale.supervisor.daemon.__file__]))")
    theirs, ours = json.loads(_run([sys.executable, "-c", code], cwd=tmp_path).stdout)
    assert Path(theirs).parent.name == "supervisor" and "site-packages" in theirs
    assert Path(ours).name == "daemon.py" and Path(theirs).parent != Path(ours).parent

    # supervisord runs Gale's `supervisor` command as one of its programs
    conf = tmp_path / "supervisord.conf"
    assert "[supervisord]" in _run([VENV_BIN / "echo_supervisord_conf"], cwd=tmp_path).stdout
    conf.write_text(_supervisord_conf(tmp_path))
    daemon = subprocess.Popen([VENV_BIN / "supervisord", "-n", "-c", conf], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def gale_ran_under_supervisord():
            status = subprocess.run([VENV_BIN / "supervisorctl", "-c", conf, "status", "gale-supervisor"],
                                    capture_output=True, text=True, timeout=30)
            assert "EXITED" in status.stdout, status.stdout + status.stderr
            assert "supervisor serve" in (tmp_path / "gale-supervisor.out").read_text()

        eventually(gale_ran_under_supervisord, timeout=60, retry_on=(AssertionError, FileNotFoundError))
        _run([VENV_BIN / "supervisorctl", "-c", conf, "shutdown"], cwd=tmp_path)
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def _supervisord_conf(base: Path) -> str:
    return f"""\
[unix_http_server]
file={base}/s.sock

[supervisord]
logfile={base}/supervisord.log
pidfile={base}/supervisord.pid
nodaemon=true

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{base}/s.sock

[program:gale-supervisor]
command={VENV_BIN}/supervisor --help
directory={base}
autostart=true
autorestart=false
startsecs=0
stdout_logfile={base}/gale-supervisor.out
redirect_stderr=true
"""


# ------------------------------------------------------------------------------ the wheel


def _copy_sources(dest: Path) -> Path:
    skip = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                  ".hypothesis", "storm-local", "artifacts")
    shutil.copytree(ROOT, dest, ignore=skip)
    return dest


def generated_c(module: str) -> Path:
    """Where a build run from a checkout's root writes ``module``'s C file, relative to that root
    (setup.py names the sources from the root; Cython mirrors the name under ``build/cython-c``)."""
    return Path("build", "cython-c", "build", "cython-src", *module.split(".")).with_suffix(".c")


def _seed_compiled_build(src: Path) -> list[str]:
    """Give the copy at ``src`` the checkout's up-to-date build of the hot path, as an incremental
    build in the checkout itself would find it: each module's generated C (``build/cython-c``) and
    extension module (``build/lib.*``, from the one ``make deps`` built next to the source). The
    wheel build then runs all its steps in an isolated environment — Cython checks every C file
    against its ``.py``/``.pxd`` and setuptools every extension against its C file — and compiles
    only what is out of date (everything, when the checkout has no current build). Returns the
    modules seeded."""
    import importlib.util

    compiled = importlib.util.spec_from_file_location("_gale_compiled", ROOT / "common" / "compiled.py")
    module = importlib.util.module_from_spec(compiled)
    compiled.loader.exec_module(module)
    import tomllib

    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    lib = src / "build" / f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
    seeded = []
    for name in module.MODULES:
        package, leaf = name.rsplit(".", 1)
        top = max((p for p in folders if package == p or package.startswith(p + ".")), key=len)
        folder = ROOT / folders[top] / Path(*package[len(top):].split(".")[1:])
        source, ext = folder / f"{leaf}.py", folder / f"{leaf}{suffix}"
        inside = Path(*name.split("."))
        c_file = ROOT / generated_c(name)
        deps = [source] + ([source.with_suffix(".pxd")] if source.with_suffix(".pxd").exists() else [])
        if not (ext.exists() and c_file.exists()):
            continue
        newest_dep = max(d.stat().st_mtime for d in deps)
        if not newest_dep <= c_file.stat().st_mtime <= ext.stat().st_mtime:
            continue  # a stale build: the wheel build regenerates and compiles this one
        c_copy = src / generated_c(name)
        c_copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(c_file, c_copy)
        ext_copy = lib / inside.parent / ext.name
        ext_copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ext, ext_copy)
        seeded.append(name)
    return seeded


@pytest.mark.build_independent  # what the checkout's build wrote, whichever build the tests run
def test_the_generated_c_files_are_named_without_the_checkouts_location():
    """setup.py names the hot modules' sources from the checkout's root, so Cython writes the same C
    file names in every checkout and the build caches (Cython's, ccache) hit across checkouts."""
    from gale.compiled import MODULES

    made = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "build" / "cython-c").rglob("*.c"))
    if not made:
        pytest.skip("no build in this checkout (an installed wheel, or GALE_PURE_PYTHON without a build)")
    expected = sorted(generated_c(m).as_posix() for m in MODULES)
    assert [p for p in made if p in expected] == expected, made


#: the tests that use ``installed``: the first pays for the fixture, whose wheel build alone may take
#: 600 s (``_run`` below): seconds on a quiet machine, but at the start of ``make test`` the two
#: passes, their clusters and Spark's JVMs load both cores (one run's setup went past the default
#: 300 s there while it took 25 s alone), and a timeout shorter than the build's own would fail a
#: build that was still going — or the other pass's build, which it waits for (:func:`_wheel`)
WHEEL_TIMEOUT = pytest.mark.timeout(900)


#: the wheels the tests built, a folder per source tree (named by its hash): the two passes of
#: ``make test`` run at once in one checkout, and the first to get there builds the wheel the other
#: takes (at the start of a run, under the full load, a build took 255–421 s of one pass)
WHEEL_CACHE = ROOT / "build" / "test-wheels"
#: a cached wheel of other sources is dropped once it is this old (a run shares it in its first minutes)
WHEEL_CACHE_HOURS = 2


def _tree_hash(src: Path) -> str:
    """A hash of the interpreter and of every file's path and bytes under ``src``."""
    h = hashlib.blake2b(sys.version.encode() + sysconfig.get_platform().encode(), digest_size=16)
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        h.update(path.relative_to(src).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _has_hot_path(wheel: Path) -> bool:
    with zipfile.ZipFile(wheel) as z:
        return any(name.endswith(".so") for name in z.namelist())


def _drop_old_wheels(keep: Path) -> None:
    cutoff = time.time() - WHEEL_CACHE_HOURS * 3600
    for folder in WHEEL_CACHE.iterdir():
        if folder != keep and folder.is_dir() and folder.stat().st_mtime < cutoff:
            shutil.rmtree(folder, ignore_errors=True)


def _wheel(base: Path) -> Path:
    """The wheel of the checkout's sources, built with ``python -m build`` (its hot path compiled
    incrementally from the checkout's build: :func:`_seed_compiled_build`) — or the one a test
    process built from the very same sources, waited for under a lock: the Python-source pass and
    the compiled one share it. Under ``GALE_REQUIRE_COMPILED=1`` a wheel without the compiled hot
    path (a build that fell back to Python) is built again, with that requirement."""
    src = _copy_sources(base / "src")
    folder = WHEEL_CACHE / _tree_hash(src)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or the process ends)
        made = sorted(folder.glob("gale-*.whl"))
        if made and (os.environ.get("GALE_REQUIRE_COMPILED") != "1" or _has_hot_path(made[0])):
            wheel = made[0]
        else:
            _seed_compiled_build(src)
            _run([sys.executable, "-m", "build", "--wheel", "--outdir", base / "dist", src], timeout=600)
            (built,) = (base / "dist").glob("gale-*.whl")
            for old in made:
                old.unlink()
            wheel = folder / built.name
            shutil.copy2(built, folder / ".partial")
            os.replace(folder / ".partial", wheel)
            _drop_old_wheels(keep=folder)
    shutil.rmtree(src)  # nothing may come from the copied sources
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A virtual environment outside the repository with Gale installed from the checkout's wheel
    (:func:`_wheel`)."""
    base = tmp_path_factory.mktemp("wheel")
    wheel = _wheel(base)
    venv = base / "venv"
    # without pip of its own (ensurepip took 8 of the fixture's 10 s): the project environment's pip
    # installs the wheel into it
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    py = venv / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    # Gale's dependencies from the project environment (no downloads); Gale itself only from the wheel
    (site / "gale-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index",
          "--disable-pip-version-check", "-q", wheel])
    return venv


@WHEEL_TIMEOUT
def test_wheel_installs_into_a_clean_virtualenv_with_everything_inside_the_package(installed, tmp_path):
    py = installed / "bin" / "python"
    code = """
import json, gale, gale.examples
from pathlib import Path
from gale import compiled
from gale.nimbus import ui
from gale.nimbus.demo import flagship_path
print(json.dumps({"gale": gale.__file__, "flagship": str(flagship_path()),
                  "static": sorted(p.name for p in ui.STATIC.iterdir()),
                  "hot_path": compiled.hot_path(), "checkout": compiled.in_checkout()}))
"""
    where = json.loads(_run([py, "-c", code], cwd=tmp_path).stdout)
    site = installed / "lib"
    for key in ("gale", "flagship"):
        assert site in Path(where[key]).parents, where
    assert Path(where["flagship"]).is_file()
    assert {"index.html", "app.js", "app.css", "topology.html"} <= set(where["static"])
    for script in ("nimbus", "supervisor", "worker"):
        assert "from gale." in (installed / "bin" / script).read_text()
    # the wheel carries the compiled hot path, and its files' install times are not build times
    assert where["checkout"] is False
    if os.environ.get("GALE_REQUIRE_COMPILED") == "1":
        assert where["hot_path"] == "compiled", where


@WHEEL_TIMEOUT
def test_wheel_runs_an_example_in_local_mode_outside_the_repository(installed, tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(ROOT / "examples" / "word_count.py", app)
    proc = _run([installed / "bin" / "nimbus", "local", "word_count.py", "--duration", "3", "--json",
                 "-c", "topology.max.spout.pending=100"], cwd=app)
    result = json.loads(proc.stdout)
    assert result["errors"] == {}
    assert result["components"]["sentences"]["acked"] > 0 and result["components"]["count"]["executed"] > 0


def _lines(proc: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_line(lines: queue.Queue, pattern: str, seen: list[str], timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no line matching {pattern!r} within {timeout}s; output:\n{''.join(seen)}") from None
        if line is None:
            raise AssertionError(f"process ended without a line matching {pattern!r}; output:\n{''.join(seen)}")
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match


@pytest.mark.cluster
@pytest.mark.spark
@WHEEL_TIMEOUT
def test_wheel_dev_cluster_serves_the_ui_and_runs_the_demo(installed, tmp_path):
    proc = subprocess.Popen(
        [installed / "bin" / "nimbus", "dev-cluster", "--supervisors", "1", "--slots", "1", "--http-port", "0",
         "--dir", tmp_path / "dev", "--demo", "--demo-duration", "6"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    seen: list[str] = []
    try:
        lines = _lines(proc)
        url = _wait_line(lines, r"^nimbus\s+(http://\S+)", seen, 120).group(1)
        # its daemons are forked from one fork server that imported them, not exec'd one by one
        zygotes = [c for c in psutil.Process(proc.pid).children() if "gale.worker.zygote" in " ".join(c.cmdline())]
        assert len(zygotes) == 1, [c.cmdline() for c in psutil.Process(proc.pid).children()]
        daemons = [" ".join(c.cmdline()) for c in zygotes[0].children()]
        assert [d for d in daemons if "gale.nimbus.cli serve" in d] and [d for d in daemons if "gale.supervisor.cli serve" in d], daemons
        page = httpx.get(url + "/", timeout=30)
        assert page.status_code == 200 and "/ui/app.js" in page.text
        for asset, kind in (("/ui/app.js", "javascript"), ("/ui/app.css", "css")):
            r = httpx.get(url + asset, timeout=30)
            assert r.status_code == 200 and kind in r.headers["content-type"] and r.text.strip(), asset
        _wait_line(lines, r"^submitted spark_word_count\.py as spark-word-count-", seen, 120)
        _wait_line(lines, r"^stopping the dev cluster", seen, 120)
        assert proc.wait(timeout=120) == 0, "".join(seen)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
