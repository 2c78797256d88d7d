"""Finding a Bytewax dataflow and its steps in a worker.

A topology built from a dataflow names it ``module:attribute`` (``wordcount:flow``): the worker
imports the module from the topology's code (as it imports component classes) and takes the
attribute — a ``Dataflow``, or a function returning one (``python -m bytewax.run``'s
``module:get_flow()`` form: called once per process). In the process that built the topology the
component classes may be bound to the dataflow object instead (``run_main``: a dataflow made inside
a function), then nothing is imported.
"""

from __future__ import annotations

import ast
import functools
import importlib
from typing import Any

from gale.bytewax.plan import is_dataflow
from gale.errors import TopologyError


@functools.lru_cache(maxsize=32)
def resolve_flow(ref: str) -> Any:
    """The dataflow ``ref`` (``module:attribute`` or ``module:factory(args)``) names."""
    module_name, _, expr = ref.partition(":")
    expr = expr or "flow"
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import
        raise TopologyError(f"cannot import module {module_name!r} of dataflow {ref!r}: {exc}") from exc
    try:
        node = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        raise TopologyError(f"dataflow {ref!r}: {expr!r} is neither an attribute name nor a call") from None
    args: list = []
    kwargs: dict = {}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        try:
            args = [ast.literal_eval(a) for a in node.args]
            kwargs = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
        except ValueError:
            raise TopologyError(f"dataflow {ref!r}: the arguments must be literals") from None
        call = True
    elif isinstance(node, ast.Name):
        name, call = node.id, False
    else:
        raise TopologyError(f"dataflow {ref!r}: {expr!r} is neither an attribute name nor a call")
    obj = getattr(module, name, None)
    if obj is None:
        raise TopologyError(f"module {module_name!r} has no attribute {name!r} (dataflow {ref!r})")
    if call or (callable(obj) and not is_dataflow(obj)):
        obj = obj(*args, **kwargs)
    if not is_dataflow(obj):
        raise TopologyError(f"{ref!r} is a {type(obj).__name__}, not a bytewax.dataflow.Dataflow")
    return obj
