"""Where the test suite waits: every wait of a test, command-line call, cluster start and slow
fixture, with its duration and the test line that made it.

Record (a pytest plugin; each test process appends to its own file in the directory)::

    GALE_SUITE_WAITS=/tmp/waits .venv/bin/python -m pytest -p benchmarks.suite_waits -n 3 --dist loadfile

Report (the largest first)::

    python -m benchmarks.suite_waits /tmp/waits [--top 40]

What is recorded: ``tests.waiting.eventually`` (and ``until``, which calls it), the tests' ``cli``
helper (``tests/cluster.py``: one ``nimbus`` command-line process each), ``DevCluster.start`` and
``cleanup``, and every fixture whose setup takes more than half a second. Each record names the
line of the test file that led to it (``site``) and the innermost line of ``tests/`` (``inner``: a
helper's). Prints ``waits_<kind>: seconds s (calls)`` lines, then the sites by total time.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest

#: a fixture whose setup takes less than this is not recorded
SLOW_FIXTURE_SECS = 0.5


def aggregate(records: Iterable[dict]) -> tuple[dict[str, list[float]], list[tuple[tuple[str, str, str], float, int, float]]]:
    """(kind → [total seconds, calls]; sites as ((kind, site, detail), total, calls, longest), the
    largest total first) of records with ``kind``, ``dt`` and ``site`` (pure). A command-line call's
    kind names its subcommand (``cli submit --wait``)."""
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    sites: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0, 0.0])
    for r in records:
        kind = r["kind"] + (f" {r['args']}" if r["kind"] == "cli" else "")
        k = kinds[kind]
        k[0] += r["dt"]
        k[1] += 1
        s = sites[(r["kind"], r["site"], r.get("args") or r.get("inner") or "")]
        s[0] += r["dt"]
        s[1] += 1
        s[2] = max(s[2], r["dt"])
    ordered = sorted(((key, t, int(n), m) for key, (t, n, m) in sites.items()), key=lambda x: -x[1])
    return dict(sorted(kinds.items(), key=lambda kv: -kv[1][0])), ordered


def read(directory: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(directory.glob("waits.*.jsonl")) for line in f.read_text().splitlines()
            if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    kinds, sites = aggregate(read(args.directory))
    for kind, (total, calls) in kinds.items():
        print(f"waits_{kind.replace(' ', '_')}: {total:.1f} s ({int(calls)} calls)")
    for (kind, site, detail), total, calls, longest in sites[:args.top]:
        print(f"{total:8.1f} s {calls:4d} calls, longest {longest:6.1f} s  {kind} {site} {detail}")


# ----------------------------------------------------------------------------- the pytest plugin

_state: dict = {"test": None, "out": None}


def _site() -> tuple[str, str]:
    frames = traceback.extract_stack()[:-2]  # without this function and the wrapper calling it
    in_test = [f for f in frames if os.path.basename(f.filename).startswith("test_")]
    in_tests = [f for f in frames if f"{os.sep}tests{os.sep}" in f.filename and not f.filename.endswith("waiting.py")]
    outer = in_test[-1] if in_test else (frames[-1] if frames else None)
    inner = in_tests[-1] if in_tests else outer
    name = lambda f: f"{os.path.basename(f.filename)}:{f.lineno}" if f else "?"  # noqa: E731
    return name(outer), name(inner)


def _record(kind: str, t0: float, site: tuple[str, str], **extra) -> None:
    out = _state["out"]
    if out is not None:
        out.write(json.dumps({"kind": kind, "dt": round(time.monotonic() - t0, 3), "site": site[0],
                              "inner": site[1], "test": _state["test"], **extra}) + "\n")


def _timed(kind: str, fn, detail=None):
    def wrapper(*args, **kwargs):
        t0, site = time.monotonic(), _site()
        try:
            return fn(*args, **kwargs)
        finally:
            _record(kind, t0, site, **({"args": detail(args)} if detail else {}))
    return wrapper


def _cli_detail(args: tuple) -> str:
    words = args[1:]
    return (words[0] if words else "") + (" --wait" if "--wait" in words else "")


def pytest_configure(config) -> None:
    directory = os.environ.get("GALE_SUITE_WAITS")
    if not directory:
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _state["out"] = open(Path(directory) / f"waits.{worker}.{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115
    # before the test modules import them by name: they bind what these modules hold then
    import tests.cluster as cluster
    import tests.waiting as waiting
    from gale.nimbus.devcluster import DevCluster

    waiting.eventually = _timed("wait", waiting.eventually)
    cluster.cli = _timed("cli", cluster.cli, _cli_detail)
    for method in ("start", "cleanup"):
        setattr(DevCluster, method, _timed(f"devcluster.{method}", getattr(DevCluster, method)))


def pytest_runtest_protocol(item, nextitem) -> None:  # noqa: ARG001 - pytest's signature
    _state["test"] = item.nodeid


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):  # noqa: ARG001 - pytest's signature
    t0 = time.monotonic()
    try:
        return (yield)
    finally:
        if time.monotonic() - t0 > SLOW_FIXTURE_SECS:
            _record("fixture", t0, (fixturedef.argname, fixturedef.scope))


if __name__ == "__main__":
    main()
