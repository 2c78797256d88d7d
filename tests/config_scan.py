"""Where Gale's own code reads configuration by a key's name instead of an attribute of a resolved
:class:`gale.config_keys.Config` — an AST scan of the source, for ``tests/test_typed_config.py``.

A *read* of a known key (one of :data:`gale.config.KEYS`) by its name is any of::

    x["topology.workers"]                       # a subscript in a load context
    x.get("topology.workers", ...)              # also .pop(...) and .setdefault(...)
    "topology.workers" in x                     # also not in

where the name is a string literal, a module-level constant bound to one (``LENGTH_COUNT =
"topology.bolts.window.length.count"``, also when imported from another module, or reached as
``module.CONSTANT``), or the variable of a ``for`` loop or comprehension over a module-level tuple of
such constants (``for k in WINDOW_KEYS: conf.get(k)``). Writing configuration — a dict literal, a
subscript assignment, ``update`` — produces configuration for another process or component and is
not a read.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from gale.config import KEYS

ROOT = Path(__file__).resolve().parent.parent
#: the source folders and the import package each one is
PACKAGES = {"common": "gale", "nimbus": "gale.nimbus", "supervisor": "gale.supervisor", "worker": "gale.worker"}
#: the configuration modules themselves: they are where keys are read by name
CONFIGURATION_MODULES = ("common/config.py", "common/config_keys.py", "common/config_types.py")
READ_METHODS = ("get", "pop", "setdefault")


@dataclass(frozen=True)
class Read:
    path: str  # relative to the repository, e.g. "nimbus/daemon.py"
    line: int
    key: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.key}"


def source_files() -> list[Path]:
    return sorted(p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py"))


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [PACKAGES[rel.parts[0]], *rel.parts[1:-1]]
    if rel.stem != "__init__":
        parts.append(rel.stem)
    return ".".join(parts)


def _key_of(node: ast.AST, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in KEYS:
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def module_constants(tree: ast.Module) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """A module's top-level names bound to a key (``NAME = "topology.workers"``) and to a tuple of
    keys (``WINDOW_KEYS = (LENGTH_COUNT, ...)``)."""
    keys: dict[str, str] = {}
    tuples: dict[str, tuple[str, ...]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
        else:
            continue
        key = _key_of(value, keys)
        if key is not None:
            keys[target] = key
        elif isinstance(value, (ast.Tuple, ast.List)) and value.elts:
            elements = [_key_of(e, keys) for e in value.elts]
            if all(elements):
                tuples[target] = tuple(elements)  # type: ignore[arg-type]
    return keys, tuples


class _Scanner(ast.NodeVisitor):
    def __init__(self, path: str, keys: dict[str, str], tuples: dict[str, tuple[str, ...]],
                 modules: dict[str, tuple[dict[str, str], dict[str, tuple[str, ...]]]]):
        self.path = path
        self.keys = dict(keys)
        self.tuples = dict(tuples)
        self.modules = modules  # import name → its constants
        self.aliases: dict[str, str] = {}  # a name bound to one of the scanned modules
        self.loop_vars: list[dict[str, tuple[str, ...]]] = []
        self.reads: list[Read] = []

    # ------------------------------------------------------------------ names

    def bind_imports(self, tree: ast.Module) -> None:
        """Every import anywhere in the module, as if at the top (a function's local import too)."""
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    bound = alias.asname or alias.name
                    if node.module in self.modules:
                        keys, tuples = self.modules[node.module]
                        if alias.name in keys:
                            self.keys[bound] = keys[alias.name]
                        elif alias.name in tuples:
                            self.tuples[bound] = tuples[alias.name]
                    if f"{node.module}.{alias.name}" in self.modules:
                        self.aliases[bound] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in self.modules and alias.asname:
                        self.aliases[alias.asname] = alias.name

    def keys_of(self, node: ast.AST) -> tuple[str, ...]:
        """The keys ``node`` may name (empty when it names none)."""
        if isinstance(node, ast.Constant):
            key = _key_of(node, {})
            return (key,) if key else ()
        if isinstance(node, ast.Name):
            for frame in reversed(self.loop_vars):
                if node.id in frame:
                    return frame[node.id]
            if node.id in self.keys:
                return (self.keys[node.id],)
            return ()
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.aliases:
            keys, _tuples = self.modules[self.aliases[node.value.id]]
            return (keys[node.attr],) if node.attr in keys else ()
        return ()

    def tuple_of(self, node: ast.AST) -> tuple[str, ...]:
        if isinstance(node, ast.Name) and node.id in self.tuples:
            return self.tuples[node.id]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in self.aliases:
            _keys, tuples = self.modules[self.aliases[node.value.id]]
            return tuples.get(node.attr, ())
        return ()

    def _record(self, node: ast.AST, keys: tuple[str, ...]) -> None:
        for key in keys:
            self.reads.append(Read(self.path, node.lineno, key))

    # ------------------------------------------------------------------ loops over tuples of keys

    def _loop(self, target: ast.AST, iterable: ast.AST) -> dict[str, tuple[str, ...]]:
        keys = self.tuple_of(iterable)
        return {target.id: keys} if keys and isinstance(target, ast.Name) else {}

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self.loop_vars.append(self._loop(node.target, node.iter))
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt)
        self.loop_vars.pop()

    def _comprehension(self, node: ast.AST, results: list[ast.AST]) -> None:
        frame: dict[str, tuple[str, ...]] = {}
        self.loop_vars.append(frame)
        for gen in node.generators:  # type: ignore[attr-defined]
            self.visit(gen.iter)
            frame.update(self._loop(gen.target, gen.iter))
            for cond in gen.ifs:
                self.visit(cond)
        for result in results:
            self.visit(result)
        self.loop_vars.pop()

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_ListComp
    visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])

    # ------------------------------------------------------------------ the reads

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load):
            self._record(node, self.keys_of(node.slice))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in READ_METHODS and node.args:
            self._record(node, self.keys_of(node.args[0]))
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            self._record(node, self.keys_of(node.left))
        self.generic_visit(node)


def scan_source(source: str, path: str = "<source>",
                modules: dict[str, tuple[dict[str, str], dict[str, tuple[str, ...]]]] | None = None) -> list[Read]:
    """The reads in one module's ``source`` (``modules``: the constants of modules it may import)."""
    tree = ast.parse(source, path)
    keys, tuples = module_constants(tree)
    scanner = _Scanner(path, keys, tuples, modules or {})
    scanner.bind_imports(tree)
    scanner.visit(tree)
    return scanner.reads


def scan() -> list[Read]:
    """Every read of a known key by its name in common/, nimbus/, supervisor/ and worker/, except
    in the configuration modules."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in source_files()}
    modules = {module_name(path): module_constants(tree) for path, tree in trees.items()}
    reads: list[Read] = []
    for path, tree in trees.items():
        rel = path.relative_to(ROOT).as_posix()
        if rel in CONFIGURATION_MODULES:
            continue
        reads.extend(scan_source(path.read_text(), rel, modules))
    return sorted(set(reads), key=lambda r: (r.path, r.line, r.key))


if __name__ == "__main__":  # python -m tests.config_scan: list them
    for read in scan():
        print(read)
