"""A stateful task's state: its :class:`KeyValueState` bound to the provider and its namespaces.

Keyed (every data input of the bolt is a fields grouping): the state is stored per key group
(namespace ``<topology>/<component>/kg<N>``); the task loads the key groups it owns
(``gale.topology.keygroups``) and refuses to ``put`` a key of a group it does not own. Unkeyed
(any other grouping): one namespace per task index, Storm's per-task state.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gale.topology.keygroups import key_group, owned_groups, owner_index
from gale.topology.state import KeyValueState, StateError, pack, unpack_key, unpack_value


def _describe_layout(layout: dict) -> str:
    if layout.get("key_groups") is not None:
        return f"keyed state in {layout['key_groups']} key groups (topology.state.key.groups)"
    return f"per-task state over {layout.get('tasks')} tasks (an input that is not a fields grouping)"


class TaskState:
    def __init__(self, provider: Any, prefix: str, component: str, index: int, tasks: int,
                 key_groups: int | None, grouping_fields: Sequence[Sequence[str]] = ()):
        self.provider = provider
        self.key_groups = key_groups
        base = f"{prefix}/{component}"
        self.component = component
        self.layout_name = f"{base}/__layout"
        self.layout = {"version": 1, "key_groups": key_groups, "tasks": None if key_groups is not None else tasks}
        if key_groups is not None:
            self.owned = owned_groups(index, key_groups, tasks)
            owned = set(self.owned)
            self.namespaces = [f"{base}/kg{kg}" for kg in self.owned]
            by_group = {kg: ns for kg, ns in zip(self.owned, self.namespaces)}
            grouping = " or ".join(str(list(f)) for f in grouping_fields) or "its fields grouping"

            def owns(key: Any) -> str | None:
                kg = key_group(key, key_groups)
                if kg in owned:
                    return None
                return (
                    f"state key {key!r} belongs to key group {kg}, owned by task index "
                    f"{owner_index(kg, key_groups, tasks)} of {component!r}, not this task (index {index}); the "
                    f"state key of a fields-grouped stateful bolt must be the value of its grouping fields {grouping} "
                    "(a tuple of them for several fields)"
                )

            self._namespace_of = lambda key: by_group[key_group(key, key_groups)]
            self.kv = KeyValueState(owns)
        else:
            self.namespaces = [f"{base}/task{index}"]
            only = self.namespaces[0]
            self._namespace_of = lambda key: only
            self.kv = KeyValueState()
        self.bytes_written = 0

    def check_layout(self) -> None:
        """The state's partitioning must be the one it was written with: a different
        ``topology.state.key.groups``, keyed state become per-task (or back), or per-task state with
        another task count would read other keys than were written — refused, naming both."""
        raw = self.provider.get_meta(self.layout_name)
        if raw is None:
            self.provider.put_meta(self.layout_name, json.dumps(self.layout, sort_keys=True).encode())
            return
        try:
            stored = json.loads(raw)
        except ValueError:
            raise StateError(f"the state layout record {self.layout_name} is not JSON: {raw[:80]!r}") from None
        if stored != self.layout:
            raise StateError(
                f"the state of component {self.component!r} was written with {_describe_layout(stored)}, but this "
                f"topology has {_describe_layout(self.layout)}: its keys would be read from the wrong places. Keep the "
                "topology's state settings and groupings (rescale within the task count), or clear the component's "
                "state to start afresh (docs/state.md)"
            )

    def load(self) -> None:
        """The committed content of every namespace of this task becomes the working state."""
        self.check_layout()
        data: dict[Any, Any] = {}
        for content in self.provider.load(self.namespaces).values():
            for k, v in content.items():
                data[unpack_key(k)] = unpack_value(v)
        self.kv.reset(data)

    def prepare(self, txid: int) -> int:
        """Stage the changes since the last prepare as checkpoint ``txid``; returns bytes written."""
        dirty, deleted = self.kv.take_changes()
        changes: dict[str, tuple[dict[bytes, bytes], set[bytes]]] = {}
        ns_of = self._namespace_of
        for key, value in dirty.items():
            changes.setdefault(ns_of(key), ({}, set()))[0][pack(key)] = value
        for key in deleted:
            changes.setdefault(ns_of(key), ({}, set()))[1].add(pack(key))
        try:
            written = self.provider.prepare(txid, changes)
        except BaseException:
            # keep tracking them: the rollback that follows a failed prepare reloads anyway, but a
            # retried prepare of the same txid must still see them
            self.kv._dirty = {**dirty, **self.kv._dirty}
            self.kv._deleted = (deleted - set(self.kv._dirty)) | self.kv._deleted
            raise
        self.bytes_written += written
        return written

    def commit(self, txid: int) -> None:
        self.provider.commit(txid, self.namespaces)

    def rollback(self, reload: bool) -> None:
        """Forget staged checkpoints; with ``reload`` the working state goes back to the committed one."""
        self.provider.rollback(self.namespaces)
        if reload:
            self.load()
