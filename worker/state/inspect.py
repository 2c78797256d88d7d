"""Read a component's committed state from a provider (tests, checkers, operators' tools)."""

from __future__ import annotations

from typing import Any

from gale.topology.state import unpack_key, unpack_value
from gale.worker.state.task_state import WRITER_KEY


def namespaces(prefix: str, component: str, *, key_groups: int | None = None, tasks: int | None = None) -> list[str]:
    """Every namespace of a keyed (``key_groups``) or unkeyed (``tasks``) stateful component."""
    if (key_groups is None) == (tasks is None):
        raise ValueError("give key_groups (keyed state) or tasks (per-task state)")
    base = f"{prefix}/{component}"
    if key_groups is not None:
        return [f"{base}/kg{kg}" for kg in range(key_groups)]
    return [f"{base}/task{i}" for i in range(tasks or 0)]


def read_committed(provider: Any, prefix: str, component: str, *, key_groups: int | None = None,
                   tasks: int | None = None) -> dict[Any, Any]:
    """The committed key → value content of every namespace of the component, merged."""
    out: dict[Any, Any] = {}
    for content in provider.load(namespaces(prefix, component, key_groups=key_groups, tasks=tasks)).values():
        for k, v in content.items():
            if k != WRITER_KEY:  # the namespace's writer record, not a key
                out[unpack_key(k)] = unpack_value(v)
    return out
