"""Builds the compiled hot path (``gale.compiled``): Cython compiles each hot module's ``.py`` (with
its ``.pxd``) into an extension module next to the source. Everything else about the project is in
``pyproject.toml``.

A module that cannot be built (no C compiler, no Cython) is skipped with a warning and runs as
Python; ``GALE_REQUIRE_COMPILED=1`` makes that an error instead (``make deps`` sets it, so a
machine that can build never silently runs the slower path).
"""

from __future__ import annotations

import os
import runpy
import shutil
import sysconfig
import tomllib
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
#: import package → source folder ([tool.setuptools.package-dir] of pyproject.toml)
FOLDERS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
MODULES = runpy.run_path(str(ROOT / "common" / "compiled.py"))["MODULES"]
REQUIRED = os.environ.get("GALE_REQUIRE_COMPILED", "") == "1"


def source_tree() -> Path:
    """A tree of links shaped like the import package (``gale/...``), so Cython names each module
    ``gale.…`` and finds the ``.pxd`` files a ``cimport gale.…`` asks for."""
    tree = ROOT / "build" / "cython-src"
    top = tree / "gale"
    top.mkdir(parents=True, exist_ok=True)
    for entry in (ROOT / "common").iterdir():
        link = top / entry.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(entry)
    for package, folder in FOLDERS.items():
        if package != "gale":
            link = top / package.split(".", 1)[1]
            if not link.exists() and not link.is_symlink():
                link.symlink_to(ROOT / folder)
    return tree


def extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        if REQUIRED:
            raise
        print("gale: Cython is missing; the hot path runs as Python")
        return []
    tree = source_tree()
    # named from the checkout's root when the build runs there (it does for pip and build): Cython
    # mirrors a source's path under build_dir, and a path without the checkout's location gives every
    # checkout the same C file names, so a compiler cache (use_ccache) hits across checkouts
    rel = Path(os.path.relpath(tree, ROOT)) if Path.cwd().resolve() == ROOT else tree
    exts = [Extension(name, [str(rel / (name.replace(".", "/") + ".py"))], optional=not REQUIRED,
                      extra_compile_args=NO_DEBUG_INFO)
            for name in MODULES]
    return cythonize(exts, include_path=[str(tree)], build_dir=str(ROOT / "build" / "cython-c"),
                     language_level=3, quiet=True, cache=CACHES)


#: Python's own CFLAGS ask for ``-g``: debug info for ~15 MB of generated C is a third of gcc's time
#: (the largest module: 11.0 s with it, 7.5 s without, same ``-O3``); the symbols that profilers name
#: functions by stay
NO_DEBUG_INFO = ["-g0"]

#: the hot modules compile one per core (setuptools' ``build_ext --parallel``): a fresh install's
#: build took 87 s on one core of a 2-core machine, 48 s on both
JOBS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

#: the build's caches (``GALE_NO_BUILD_CACHE=1`` turns both off): Cython's own (the C generated from a
#: module whose source and options it saw before, in ``~/.cython``) and ccache's (:func:`use_ccache`);
#: a fresh checkout's build of the hot path, most of ``make deps``'s time, then reuses what any
#: checkout on the machine built before (paths are relative to the checkout, so its location does not
#: count)
CACHES = os.environ.get("GALE_NO_BUILD_CACHE") != "1"


def use_ccache() -> None:
    """Compile through ccache when it is installed and the compiler was not chosen by the caller
    (``CC`` unset)."""
    if os.environ.get("CC") or not CACHES or not shutil.which("ccache"):
        return
    cc = sysconfig.get_config_var("CC")
    if not cc:
        return
    os.environ["CC"] = f"ccache {cc}"
    os.environ.setdefault("CCACHE_BASEDIR", str(ROOT))
    os.environ.setdefault("CCACHE_NOHASHDIR", "1")


use_ccache()
setup(ext_modules=extensions(), options={"build_ext": {"parallel": JOBS}})
