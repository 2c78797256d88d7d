"""Which tests run the hot path: the audit behind the ``build_independent`` marks.

``make test`` runs the tests that need no cluster twice: on the compiled hot path and on its Python
source (``GALE_PURE_PYTHON=1``). A test that never calls a function of a hot module
(:data:`gale.compiled.MODULES`) and starts no process runs the very same code in both builds, so the
second run can only repeat the first; such a test is marked ``build_independent`` and runs in the
compiled pass only.

This plugin tells which tests those are, on the Python source (where the hot modules are Python
functions a profile hook sees)::

    GALE_PURE_PYTHON=1 GALE_AUDIT_OUT=audit.jsonl .venv/bin/python -m pytest -p tests.hot_path_audit \\
        -p no:xdist -m "not cluster and not spark"

Each test's line in ``GALE_AUDIT_OUT``: its node id, whether it called into a hot module (``hot``: the
first such function), the processes it started (``spawned``: their first arguments), and whether it
is marked ``build_independent``. A marked test that called into a hot module or started a process
that may run Gale's code (:func:`may_run_gale`: a Python interpreter, a Gale command, a JVM, a shell;
not a broker or a database) **fails** (the mark is wrong: it would
skip the Python-source run of code that differs between the builds). Calls are attributed to the
test running when they happen, its fixtures' set-up and tear-down included — a module fixture's
servers count against the module's first test, a thread left running by one test against the next
ones: the audit errs towards "hot", never towards "independent".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import pytest

from gale.compiled import MODULES, pure_requested


#: programs that may run Gale's code: Python interpreters, Gale's and its compatibility layers' commands
#: and shells; a broker, a database, a fuzzer or ZooKeeper's JVM does not
_MAY_RUN_GALE = re.compile(r"^(python[0-9.]*|nimbus|supervisor|worker|streamparse_run|sparkrun|sh|bash|dash|env)$")


def may_run_gale(command: str) -> bool:
    """Whether the process started with ``command`` (its arguments joined by spaces) may run Gale's code:
    a program :data:`_MAY_RUN_GALE` names, or anything of Spark's (its JVMs start Python workers)."""
    program = command.split(" ", 1)[0]
    return bool(_MAY_RUN_GALE.match(os.path.basename(program))) or "spark" in command.lower()


def _hot_files() -> frozenset[str]:
    import importlib.util

    files = set()
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            files.add(os.path.realpath(spec.origin))
    return frozenset(files)


class _Audit:
    def __init__(self, out: str | None):
        self.hot_files = _hot_files()
        if len(self.hot_files) != len(MODULES):
            raise pytest.UsageError("tests.hot_path_audit needs every hot module as Python: set GALE_PURE_PYTHON=1")
        self.current: str | None = None
        self.hot: dict[str, str] = {}
        self.spawned: dict[str, list[str]] = {}
        self.out = open(out, "w") if out else None  # noqa: SIM115 - open for the session
        self._seen_code: dict[object, bool] = {}

    def profile(self, frame, event, arg):
        if event != "call":
            return
        test = self.current
        if test is None or test in self.hot:
            return
        code = frame.f_code
        is_hot = self._seen_code.get(code)
        if is_hot is None:
            is_hot = code.co_name != "<module>" and os.path.realpath(code.co_filename) in self.hot_files
            self._seen_code[code] = is_hot
        if is_hot:
            self.hot[test] = f"{code.co_filename}:{code.co_firstlineno} {code.co_qualname}"

    def spawn(self, what: str) -> None:
        if self.current is not None:
            self.spawned.setdefault(self.current, []).append(what)

    def install(self) -> None:
        audit = self
        popen_init = subprocess.Popen.__init__

        def init(self, args, *a, **kw):
            argv = [os.fsdecode(args)] if isinstance(args, (str, bytes, os.PathLike)) else [str(x) for x in args]
            audit.spawn(" ".join(argv[:8]))
            popen_init(self, args, *a, **kw)

        subprocess.Popen.__init__ = init
        fork = os.fork

        def forked():
            audit.spawn("os.fork")
            return fork()

        os.fork = forked
        sys.setprofile(self.profile)
        threading.setprofile(self.profile)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.current = item.nodeid
        yield
        self.current = None
        marked = item.get_closest_marker("build_independent") is not None
        if self.out is not None:
            self.out.write(json.dumps({"id": item.nodeid, "hot": self.hot.get(item.nodeid),
                                       "spawned": self.spawned.get(item.nodeid, []), "marked": marked}) + "\n")
            self.out.flush()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        result = yield
        # set-up and tear-down are attributed too; the verdict is given at the call's end, which
        # sees the set-up's calls (a module fixture's tear-down after the last test is not judged)
        if item.get_closest_marker("build_independent") is None:
            return result
        problem = self.hot.get(item.nodeid) or next(filter(may_run_gale, self.spawned.get(item.nodeid, [])), None)
        if problem:
            pytest.fail(f"marked build_independent, but it ran the hot path or started a process: {problem}",
                        pytrace=False)
        return result


def pytest_configure(config):
    if not pure_requested():
        raise pytest.UsageError("tests.hot_path_audit runs on the Python source: set GALE_PURE_PYTHON=1")
    audit = _Audit(os.environ.get("GALE_AUDIT_OUT"))
    config.pluginmanager.register(audit, "gale-hot-path-audit")
    audit.install()
