"""Loading a topology file (``TOPOLOGY.py``) the way ``nimbus submit`` and ``nimbus local`` do.

The file is imported as a module named after the file (``word_count.py`` → ``word_count``) with its
directory first on ``sys.path``, so classes defined in it get import paths the workers can resolve
from the code bundle. It must define ``topology``: a :class:`Topology`, or a function taking the
config dict (the ``-c key=value`` overrides) and returning one — or, a Bytewax file, ``flow``: a
``bytewax.dataflow.Dataflow`` (``gale.bytewax.topology``; the workers import the file to find it).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gale.errors import GaleError, TopologyError
from gale.topology.definition import Topology


def load_topology_file(path: str | Path, conf: Mapping[str, Any] | None = None) -> Topology:
    path = Path(path)
    if not path.exists():
        raise TopologyError(f"topology file {path} does not exist")
    if path.suffix != ".py" or not path.is_file():
        raise TopologyError(f"topology file {path} must be a Python file (*.py)")
    from gale.topology import streamparse

    if streamparse.is_streamparse_file(path):
        return streamparse.load_streamparse_topology(path, conf or {})
    directory = str(path.resolve().parent)
    module = exec_topology_module(path, [directory])
    obj = getattr(module, "topology", None)
    if obj is None:
        flow = getattr(module, "flow", None)
        from gale.bytewax.plan import is_dataflow

        if is_dataflow(flow):  # a Bytewax file: its dataflow as a topology (docs/bytewax.md)
            from gale.bytewax.topology import flow_topology

            topology = flow_topology(flow, f"{module.__name__}:flow", conf, keep_conf=False)
            topology.code_dir = directory
            return topology
        raise TopologyError(
            f"{path} defines no 'topology': define topology = builder.create_topology(...) "
            "or def topology(conf): ... returning one (or, for a Bytewax file, flow = Dataflow(...))"
        )
    if callable(obj) and not isinstance(obj, Topology):
        try:
            params = inspect.signature(obj).parameters
            result = obj(dict(conf or {})) if params else obj()
        except GaleError:
            raise
        except SystemExit as exc:
            raise TopologyError(f"{path}: topology() called sys.exit({exc.code!r}); nothing to submit") from None
        except Exception as exc:  # noqa: BLE001
            raise TopologyError(f"{path}: topology() raised {type(exc).__name__}: {exc}") from exc
        obj = result
    if not isinstance(obj, Topology):
        raise TopologyError(
            f"{path}: 'topology' must be a Topology (builder.create_topology()), got {type(obj).__name__}"
        )
    obj.code_dir = directory
    return obj


def exec_topology_module(path: Path, paths: list[str]) -> Any:
    """Import ``path`` as a module named after the file, with ``paths`` first on ``sys.path``;
    errors name the file and line."""
    module_name = path.stem
    if not module_name.isidentifier():
        raise TopologyError(f"topology file name {path.name!r} must be a valid Python module name")
    for directory in reversed(paths):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TopologyError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        raise TopologyError(f"syntax error in {path} line {exc.lineno}: {exc.msg}") from None
    except GaleError:
        sys.modules.pop(module_name, None)
        raise
    except (SystemExit, KeyboardInterrupt) as exc:
        # a file that exits while it is imported (a script's ``if`` missing its ``__main__`` guard):
        # nothing was defined, so nothing can be submitted — say so rather than exit with its code
        sys.modules.pop(module_name, None)
        tb = traceback.extract_tb(exc.__traceback__)
        where = next((f"{f.filename}:{f.lineno}" for f in reversed(tb) if f.filename == str(path)), str(path))
        what = f"sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else type(exc).__name__
        raise TopologyError(f"importing {path} stopped at {where}: the file called {what} while it was imported "
                            "(guard script code with if __name__ == '__main__':)") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import
        sys.modules.pop(module_name, None)
        tb = traceback.extract_tb(exc.__traceback__)
        where = next((f"{f.filename}:{f.lineno}" for f in reversed(tb) if f.filename == str(path)), str(path))
        raise TopologyError(f"importing {path} failed at {where}: {type(exc).__name__}: {exc}") from None
    return module
