"""What a keyed state holds per key group — keys and bytes — for the UI's "state at a glance".

:func:`group_sizes` walks a task's working state once: each key's key group, and the packed size of
the key and its value (what the provider stores). The managed-state layer calls it after a
checkpoint's PREPARE, on the executor's thread (the only one that changes the state), at most
every :func:`interval` seconds — longer for bigger states, so walking them costs about 1% of a core
whatever their size — and reports the :data:`TOP` biggest groups of the executor as labelled gauges
(``state_keygroup_keys``, ``state_keygroup_bytes``; nimbus keeps the component's ten biggest).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gale.topology.keygroups import key_group
from gale.topology.state import pack

EVERY_SECS = 30.0
#: keys walked per EVERY_SECS at most: a bigger state is walked less often
KEYS_PER_WALK = 200_000
TOP = 10


def interval(keys: int) -> float:
    return EVERY_SECS * max(1.0, keys / KEYS_PER_WALK)


def group_sizes(items: Iterable[tuple[Any, Any]], key_groups: int,
                pack_value: Callable[[Any], bytes]) -> tuple[dict[int, int], dict[int, int]]:
    """(key group → keys, key group → bytes of packed keys and values)."""
    keys: dict[int, int] = {}
    size: dict[int, int] = {}
    for key, value in items:
        kg = key_group(key, key_groups)
        keys[kg] = keys.get(kg, 0) + 1
        size[kg] = size.get(kg, 0) + len(pack(key)) + len(pack_value(value))
    return keys, size


def top_groups(keys: dict[int, int], size: dict[int, int], n: int = TOP) -> dict[str, dict[str, float]]:
    """The ``n`` groups with the most bytes, as the executor's labelled gauges."""
    top = sorted(size, key=lambda g: (-size[g], -keys.get(g, 0), g))[:n]
    return {"state_keygroup_keys": {str(g): float(keys.get(g, 0)) for g in top},
            "state_keygroup_bytes": {str(g): float(size[g]) for g in top}}
