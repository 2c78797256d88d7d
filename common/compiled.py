"""The compiled hot path: which modules Cython builds, and which build a process runs.

The per-tuple path — :class:`~gale.topology.tuple.Tuple`, the output collectors and stream routes,
the executors, the acker table, the spout's pending map — is plain Python that Cython can also
compile (its ``.pxd`` files give ``Tuple``, ``Fields``, ``StreamRoute`` and the collectors typed C
slots). ``pip install`` (``make deps``) builds each of :data:`MODULES` as an extension module next
to its source when a C compiler and Cython are at hand (``setup.py``); a module that fails to build
is skipped and runs as Python. Both builds run the same source, so they give identical results; the
test suite runs under both (``make test``).

Which build a process uses:

* the extension module, when it is there and — in a source checkout — not older than its ``.py``
  (a source edited after the last build runs as Python, with a warning, until ``make deps``
  rebuilds it; an installed wheel's files have install times, so there the rule does not apply);
* the ``.py`` source for every module when ``GALE_PURE_PYTHON=1`` is set (inherited by workers).

:func:`install` (called by ``gale/__init__``) enforces both rules; :func:`status` reports the result.
This module imports nothing of Gale's: ``setup.py`` reads :data:`MODULES` from it before Gale is
installed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings

#: the modules built as extension modules (import names; each has a ``.py`` and may have a ``.pxd``)
MODULES = (
    "gale.topology.tuple",
    "gale.topology.kvstate",
    "gale.worker.runtime.collector",
    "gale.worker.runtime.executor",
    "gale.worker.runtime.spout",
    "gale.worker.runtime.bolt",
    "gale.worker.runtime.delivery",
    "gale.worker.runtime.acker",
    "gale.worker.runtime.rotating",
    "gale.worker.runtime.grouping",
    "gale.worker.state.gate",
    "gale.worker.wire",
    "gale.worker.wire_fast",
    "gale.worker.outbox",
)

#: set to ``1`` to run every module of :data:`MODULES` from its Python source
PURE_ENV = "GALE_PURE_PYTHON"


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Loads a hot module from its ``.py`` when Python is asked for, or when the built extension
    module is older than the source (a stale build must never run instead of edited code)."""

    def __init__(self, pure: bool, modules: tuple[str, ...] = MODULES, check_stale: bool = True):
        self.pure = pure
        self.modules = modules
        self.check_stale = check_stale
        self.stale: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if name not in self.modules or not path:
            return None
        leaf = name.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, leaf + ".py")
            if not os.path.exists(source):
                continue
            if not self.pure:
                if not self.check_stale:
                    return None
                built = _built_next_to(directory, leaf)
                if built is None or os.path.getmtime(built) >= os.path.getmtime(source):
                    return None  # the normal import: the extension module if there, else the source
                self.stale.append(name)
                warnings.warn(f"{built} is older than {source}: running {name} as Python until "
                              "`make deps` rebuilds it", RuntimeWarning, stacklevel=2)
            return importlib.util.spec_from_file_location(name, source)
        return None


def _built_next_to(directory: str, leaf: str) -> str | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = os.path.join(directory, leaf + suffix)
        if os.path.exists(candidate):
            return candidate
    return None


_finder: _SourceFirst | None = None


def in_checkout() -> bool:
    """Whether Gale runs from its repository (this module's folder is ``common/``, with ``setup.py``
    beside it) rather than from an installed wheel (where it is ``gale/``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.basename(here) == "common" and os.path.exists(os.path.join(os.path.dirname(here), "setup.py"))


def checkout_builds(root: str, modules: tuple[str, ...] = MODULES) -> dict[str, str]:
    """In a checkout at ``root``: module → ``"current"``, ``"stale"`` (built before its source last
    changed) or ``"missing"`` (not built), by ``pyproject.toml``'s package folders."""
    import tomllib

    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        folders = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    out = {}
    for module in modules:
        package = max((p for p in folders if module.startswith(p + ".")), key=len)
        rest = module[len(package) + 1:].split(".")
        directory = os.path.join(root, folders[package], *rest[:-1])
        built = _built_next_to(directory, rest[-1])
        source = os.path.join(directory, rest[-1] + ".py")
        out[module] = ("missing" if built is None else
                       "stale" if os.path.getmtime(built) < os.path.getmtime(source) else "current")
    return out


def mixed_build(builds: dict[str, str]) -> list[str]:
    """The hot modules whose build is stale or missing while others' is current (every hot module
    then runs as Python); empty when the build is whole, or when none is current (each module's
    own rule then runs it from its source already)."""
    off = sorted(m for m, state in builds.items() if state != "current")
    return off if len(off) < len(builds) else []


def install() -> None:
    """Put the source-first rule in front of the import system (once per process).

    In a checkout, a build that is stale or missing for some hot modules but not all runs every hot
    module as Python, with a warning naming them: the compiled modules import each other's C types
    (``cimport``), so an extension module next to a Python one fails at its import."""
    global _finder
    if _finder is None:
        pure, checkout = pure_requested(), in_checkout()
        if checkout and not pure:
            off = mixed_build(checkout_builds(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
            if off:
                warnings.warn(f"the compiled hot path is stale or missing for {', '.join(off)}: running every hot "
                              "module as Python until `make deps` rebuilds it", RuntimeWarning, stacklevel=2)
                pure = True
        _finder = _SourceFirst(pure, check_stale=checkout)
        sys.meta_path.insert(0, _finder)


def is_compiled(module: str) -> bool:
    """Whether ``module`` (one of :data:`MODULES`) runs as an extension module in this process."""
    mod = sys.modules.get(module) or importlib.import_module(module)
    return isinstance(getattr(mod, "__loader__", None), importlib.machinery.ExtensionFileLoader)


def status() -> dict[str, bool]:
    """Module → compiled? for every hot module (importing them)."""
    return {m: is_compiled(m) for m in MODULES}


def hot_path() -> str:
    """``"compiled"`` when every hot module is an extension module, ``"python"`` when none is,
    ``"mixed"`` otherwise (a failed or stale build of some)."""
    got = set(status().values())
    return "compiled" if got == {True} else "python" if got == {False} else "mixed"
