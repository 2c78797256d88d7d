"""Import boundaries between Gale's packages, checked on the source (an AST scan of every module).

* ``gale`` (``common/``: the user API and the shared foundation) imports nothing from
  ``gale.nimbus``, ``gale.supervisor`` or ``gale.worker`` — except the three user-surface facades
  (``gale``, ``gale.spark``, ``gale.connectors``), whose re-exports of the worker's classes are loaded
  lazily: inside a function (``__getattr__``) or under ``if TYPE_CHECKING:``.
* ``gale.worker`` and ``gale.supervisor`` import nothing from ``gale.nimbus`` but its HTTP client
  ``gale.nimbus.client``.
* ``gale.worker`` runs compiled topologies (``gale.topology.definition``), never the user-facing
  builder or the topology-file loader.
* Every import of Gale's own code goes through ``gale.``: no module imports the source folders
  (``common``, ``nimbus``, ``supervisor``, ``worker``) by their folder names.

Dynamic imports (``importlib.import_module("...")`` with a literal name) count as imports.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"common": "gale", "nimbus": "gale.nimbus", "supervisor": "gale.supervisor", "worker": "gale.worker"}
FACADES = {"gale", "gale.spark", "gale.connectors", "gale.sinks", "gale.bytewax"}
FOLDER_NAMES = {"common", "nimbus", "supervisor", "worker"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. gale.worker.metrics
    target: str  # the imported module (or module.name for "from module import name")
    line: int
    lazy: bool  # inside a function or an ``if TYPE_CHECKING:`` block

    def __str__(self) -> str:
        return f"{self.module} (line {self.line}) imports {self.target}"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    base = PACKAGES[parts[0]].split(".")
    rest = parts[1:]
    if rest and rest[-1] == "__init__":
        rest = rest[:-1]
    return ".".join(base + rest)


def source_files() -> list[Path]:
    return sorted(p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path) -> list[Import]:
    module = module_name(path)
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            lazy = True
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, lazy)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(module, alias.name, node.lineno, lazy))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                found.append(Import(module, f"{origin}.{alias.name}", node.lineno, lazy))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                found.append(Import(module, str(node.args[0].value), node.lineno, lazy))
        elif isinstance(node, ast.Dict) and module in FACADES:
            # the facades' lazy tables, {"Name": "gale.worker.module"} or {"Name": ("gale.worker.module",
            # "attribute")}, resolved in __getattr__
            for value in node.values:
                if isinstance(value, ast.Tuple) and value.elts:
                    value = value.elts[0]
                if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.startswith("gale."):
                    found.append(Import(module, value.value, node.lineno, True))
        for child in ast.iter_child_nodes(node):
            visit(child, lazy)

    visit(tree, False)
    return found


ALL = [imp for path in source_files() for imp in imports_of(path)]


def within(target: str, package: str) -> bool:
    return target == package or target.startswith(package + ".")


def test_the_scan_sees_every_package_and_their_imports():
    modules = {imp.module for imp in ALL}
    for expected in ["gale", "gale.topology.components", "gale.worker.runtime.collector", "gale.supervisor.daemon",
                     "gale.nimbus.api", "gale.spark", "gale.connectors"]:
        assert expected in modules
    assert Import("gale.supervisor.daemon", "gale.nimbus.client.NimbusClient", 0, False).target in {
        i.target for i in ALL if i.module == "gale.supervisor.daemon"}
    # the facades' lazy re-exports are seen as lazy imports of the worker
    lazy_facade = {i.target for i in ALL if i.module in FACADES and i.lazy and within(i.target, "gale.worker")}
    assert any(t.startswith("gale.worker.local") for t in lazy_facade)
    assert "gale.worker.connectors.kafka_spout" in lazy_facade


def test_the_foundation_and_user_api_import_no_daemon():
    daemons = ("gale.nimbus", "gale.supervisor", "gale.worker")
    bad = [
        str(imp) for imp in ALL
        if not within(imp.module, "gale.nimbus") and not within(imp.module, "gale.supervisor")
        and not within(imp.module, "gale.worker")
        and any(within(imp.target, d) for d in daemons)
        and not (imp.module in FACADES and imp.lazy)
    ]
    assert bad == []


def test_workers_and_supervisors_use_only_nimbus_http_client():
    bad = [
        str(imp) for imp in ALL
        if (within(imp.module, "gale.worker") or within(imp.module, "gale.supervisor"))
        and within(imp.target, "gale.nimbus") and not within(imp.target, "gale.nimbus.client")
    ]
    assert bad == []


def test_the_worker_runs_compiled_topologies_not_the_builder():
    bad = [
        str(imp) for imp in ALL
        if within(imp.module, "gale.worker")
        and (within(imp.target, "gale.topology.builder") or within(imp.target, "gale.topology.loader"))
    ]
    assert bad == []


def test_no_module_imports_a_source_folder_by_its_folder_name():
    bad = [str(imp) for imp in ALL if imp.target.split(".")[0] in FOLDER_NAMES]
    assert bad == []


@pytest.mark.parametrize("facade", sorted(FACADES))
def test_facades_import_lazily(facade):
    """Importing a facade loads none of the daemons' modules (checked in a fresh interpreter)."""
    import subprocess
    import sys

    code = (f"import sys, importlib; importlib.import_module({facade!r}); "
            "print(sorted(m for m in sys.modules if m.startswith(('gale.worker', 'gale.nimbus', 'gale.supervisor'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------- the executor core and its capabilities

CORE = "gale.worker.runtime"
#: the worker's capabilities: each adds a body or layers to the executor core (gale.worker.assembly
#: composes them); the core imports none of them
CAPABILITIES = ("gale.worker.state", "gale.worker.windows", "gale.worker.spark", "gale.worker.multilang",
                "gale.worker.connectors")
ASSEMBLY = "gale.worker.assembly"


def _package(name: str) -> str | None:
    for package in (CORE, *CAPABILITIES, ASSEMBLY):
        if within(name, package):
            return package
    return None


def test_the_executor_core_imports_no_capability():
    """``gale.worker.runtime`` (executors, collectors, groupings, acker, runtime) imports nothing of
    state, windows, Spark, multi-lang, connectors or the assembly — not even lazily."""
    bad = [str(imp) for imp in ALL if within(imp.module, CORE)
           and any(within(imp.target, p) for p in (*CAPABILITIES, ASSEMBLY))]
    assert bad == []


def test_no_import_circle_joins_the_core_and_the_capabilities():
    """The worker's packages (core, capabilities, assembly) import each other without a circle:
    the core at the bottom, the assembly at the top."""
    edges: dict[str, set[str]] = {}
    for imp in ALL:
        src, dst = _package(imp.module), _package(imp.target)
        if src and dst and src != dst:
            edges.setdefault(src, set()).add(dst)
    assert ASSEMBLY not in {d for targets in edges.values() for d in targets}
    # depth-first search for a cycle
    state: dict[str, int] = {}

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path + [node, nxt]
            if state.get(nxt) is None:
                found = cycle_from(nxt, path + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for node in sorted(edges):
        if state.get(node) is None:
            found = cycle_from(node, [])
            assert found is None, " -> ".join(found)
    assert edges.get(CORE, set()) == set()
    assert CORE in edges[ASSEMBLY] and {"gale.worker.state", "gale.worker.windows"} <= edges[ASSEMBLY]
