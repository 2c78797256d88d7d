"""Proves a binary wheel runs where no C compiler is: ``python -m tests.wheel_check dist/gale-*.whl``
(``make wheel-check``, after ``make wheel``).

It builds a ``PATH`` with every program of today's ``PATH`` except the C and C++ compilers (and
sets ``CC``/``CXX`` to a path that does not exist), creates a fresh virtual environment with that
environment, installs the wheel with its ``test`` extra from the package index (binary
distributions preferred: anything that would need compiling fails here), checks that the installed
Gale runs its compiled hot path, and runs the suite's tests that need no cluster and no Spark
against it (the tests come from this checkout; ``gale`` only from the wheel). Exits with pytest's
status; prints what it checked.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: program names that compile C or C++ (gcc, cc, c++, clang, x86_64-linux-gnu-gcc-12, ...)
COMPILER = re.compile(r"^(.+-)?(gcc|g\+\+|cc|c\+\+|cpp|clang|clang\+\+|tcc|icc)(-[\d.]+)?$")


def compiler_free_path(into: Path, path: str) -> str:
    """A directory of links to every program on ``path`` but the compilers; returns it as a PATH."""
    into.mkdir(parents=True, exist_ok=True)
    for folder in path.split(os.pathsep):
        d = Path(folder)
        if not d.is_dir():
            continue
        for entry in d.iterdir():
            link = into / entry.name
            if COMPILER.match(entry.name) or link.exists() or link.is_symlink():
                continue
            if entry.is_file() and os.access(entry, os.X_OK):
                link.symlink_to(entry)
    return str(into)


def run(cmd: list, env: dict, **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], env=env, check=True, **kw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--workers", default="2", help="pytest-xdist processes (0: none)")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    wheel = args.wheel.resolve()
    if not wheel.is_file() or "manylinux" not in wheel.name:
        parser.error(f"{wheel}: not a manylinux wheel (make wheel writes one to dist/)")
    with tempfile.TemporaryDirectory(prefix="gale-wheel-check-") as tmp:
        base = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GALE_", "VIRTUAL_ENV", "PYTHON"))}
        env["PATH"] = compiler_free_path(base / "bin", os.environ.get("PATH", os.defpath))
        env["CC"] = env["CXX"] = str(base / "no-compiler-here")
        found = [c for c in ("gcc", "cc", "g++", "c++", "clang") if shutil.which(c, path=env["PATH"])]
        if found:
            raise SystemExit(f"compilers still on PATH: {found}")
        print(f"PATH without a C compiler ({base / 'bin'}); CC={env['CC']}", flush=True)
        python = shutil.which("python3", path=env["PATH"]) or sys.executable
        venv = base / "venv"
        run([python, "-m", "venv", venv], env)
        py = venv / "bin" / "python"
        run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--prefer-binary",
             f"{wheel}[test]"], env)
        probe = ("import gale, gale.compiled as c; print(gale.__file__, c.hot_path()); "
                 "raise SystemExit(0 if c.hot_path() == 'compiled' else 3)")
        run([py, "-c", probe], env, cwd=base)
        # (not GALE_REQUIRE_COMPILED: the packaging tests build a wheel from source here, which
        # without a compiler is the pure one, as a user's would be)
        env["GALE_REQUIRE_COMPONENTS"] = "1"
        xdist = ["-p", "no:xdist"] if args.workers == "0" else ["-n", args.workers, "--dist", "loadfile"]
        cmd = [py, "-m", "pytest", *xdist, "-p", "no:cacheprovider", "-m", "not cluster and not spark",
               *args.pytest_args]
        print("+", " ".join(map(str, cmd)), flush=True)
        return subprocess.run([str(c) for c in cmd], env=env, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
