"""Key groups: how keyed state is partitioned (Flink's scheme), pure functions.

A state key belongs to one of ``K`` key groups (``topology.state.key.groups``, default 128):
``key_group(key, K) = stable_hash(key) % K``. A component with ``n`` tasks gives task index ``i``
the contiguous range of key groups ``kg`` with ``kg * n // K == i``. A fields grouping into a
stateful bolt routes by the same rule (hash → key group → task), so the task that receives a key's
tuples is the task that owns the key's state, and a state saved per key group can be loaded by
whichever task owns that group after a change of parallelism.

The hash is the grouping's process-independent :func:`stable_hash`: the state key of a bolt
grouped on one field is that field's value; grouped on several, the tuple of their values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gale.stablehash import stable_hash

DEFAULT_KEY_GROUPS = 128


def key_group(key: Any, groups: int) -> int:
    """The key group of a state key (a grouping value, or a tuple of grouping values)."""
    return stable_hash(key) % groups


def owner_index(group: int, groups: int, tasks: int) -> int:
    """The index (0-based, among the component's tasks) of the task owning key group ``group``."""
    return group * tasks // groups


def owned_groups(index: int, groups: int, tasks: int) -> range:
    """The key groups task ``index`` of ``tasks`` owns: a contiguous range (empty when ``tasks > groups``
    leaves this task none)."""
    if not 0 <= index < tasks:
        raise ValueError(f"task index {index} out of range for {tasks} tasks")
    # smallest kg with kg * tasks // groups >= index  ==  ceil(index * groups / tasks)
    start = -(-index * groups // tasks)
    stop = -(-(index + 1) * groups // tasks)
    return range(start, min(stop, groups))


def owner_task(key: Any, groups: int, tasks: Sequence[int]) -> int:
    """The task id (from the component's sorted task ids) that owns ``key``."""
    return tasks[owner_index(key_group(key, groups), groups, len(tasks))]
