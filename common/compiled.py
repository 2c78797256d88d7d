"""The compiled hot path: which modules Cython builds, and which build a process runs.

The per-tuple path — :class:`~gale.topology.tuple.Tuple`, the output collectors and stream routes,
the executors, the acker table, the spout's pending map — is plain Python that Cython can also
compile (its ``.pxd`` files give ``Tuple``, ``Fields``, ``StreamRoute`` and the collectors typed C
slots). ``pip install`` (``make deps``) builds each of :data:`MODULES` as an extension module next
to its source when a C compiler and Cython are at hand (``setup.py``); a module that fails to build
is skipped and runs as Python. Both builds run the same source, so they give identical results; the
test suite runs under both (``make test``).

Which build a process uses:

* the extension modules, when they are there and — in a source checkout — every one of them is
  built and not older than its ``.py``: a source edited after the last build (or a module that
  failed to build) runs *every* hot module as Python, with a warning naming them, until ``make
  deps`` rebuilds them — the compiled modules import each other's C types (``cimport``), so an
  extension module next to a Python one would fail at its import. An installed wheel's files have
  install times, so there the rule does not apply;
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
    "gale.worker.runtime.route",
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
    "gale.worker.sender",
)

#: set to ``1`` to run every module of :data:`MODULES` from its Python source
PURE_ENV = "GALE_PURE_PYTHON"


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Loads every hot module from its ``.py`` when ``pure``; otherwise leaves them to the normal
    import (the extension module where there is one)."""

    def __init__(self, pure: bool, modules: tuple[str, ...] = MODULES):
        self.pure = pure
        self.modules = modules

    def find_spec(self, name, path=None, target=None):
        if not self.pure or name not in self.modules or not path:
            return None
        leaf = name.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, leaf + ".py")
            if os.path.exists(source):
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


def package_folders(root: str) -> dict[str, str]:
    """``pyproject.toml``'s package folders in the checkout at ``root``: package → folder."""
    import tomllib

    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-dir"]


def source_of(module: str, folders: dict[str, str]) -> str:
    """A module's source file in a checkout, relative to its root and without ``.py``, by its package
    folders (:func:`package_folders`): ``gale.worker.outbox`` → ``worker/outbox``."""
    package = max((p for p in folders if module.startswith(p + ".")), key=len)
    return "/".join([folders[package], *module[len(package) + 1:].split(".")])


def checkout_builds(root: str, modules: tuple[str, ...] = MODULES) -> dict[str, str]:
    """In a checkout at ``root``: module → ``"current"``, ``"stale"`` (built before its source last
    changed) or ``"missing"`` (not built)."""
    folders = package_folders(root)
    out = {}
    for module in modules:
        directory, name = os.path.split(os.path.join(root, source_of(module, folders)))
        built = _built_next_to(directory, name)
        source = os.path.join(directory, name + ".py")
        out[module] = ("missing" if built is None else
                       "stale" if os.path.getmtime(built) < os.path.getmtime(source) else "current")
    return out


def checkout_verdict(builds: dict[str, str]) -> tuple[bool, str | None]:
    """Whether a checkout whose hot modules' builds are ``builds`` (:func:`checkout_builds`) runs
    them as Python, and the warning to give: every one runs as Python when any is stale or missing
    (the compiled modules import each other's C types, so an extension module next to a Python one
    fails at its import; a stale build must never run instead of edited code); no warning when none
    was built at all (no C compiler: the Python build is then the intended one)."""
    off = sorted(m for m, state in builds.items() if state != "current")
    if not off:
        return False, None
    if all(state == "missing" for state in builds.values()):
        return True, None
    return True, (f"the compiled hot path is stale or missing for {', '.join(off)}: running every hot module "
                  "as Python until `make deps` rebuilds it")


def install() -> None:
    """Put the source-first rule in front of the import system (once per process): every hot module
    from its source when ``GALE_PURE_PYTHON`` asks for it, or — in a checkout — when
    :func:`checkout_verdict` says so."""
    global _finder
    if _finder is None:
        pure = pure_requested()
        if not pure and in_checkout():
            pure, warning = checkout_verdict(checkout_builds(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
            if warning:
                warnings.warn(warning, RuntimeWarning, stacklevel=2)
        _finder = _SourceFirst(pure)
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
