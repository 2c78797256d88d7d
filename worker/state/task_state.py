"""A stateful task's state: its :class:`KeyValueState` bound to the provider and its namespaces.

Keyed (every data input of the bolt is a fields grouping): the state is stored per key group
(namespace ``<topology>/<component>/kg<N>``); the task loads the key groups it owns
(``gale.topology.keygroups``) and refuses to ``put`` a key of a group it does not own. Unkeyed
(any other grouping): one namespace per task index, Storm's per-task state.

Key types across topology versions: every namespace a task writes carries, in the same atomic
checkpoint, the id of the topology submission that wrote it (the reserved entry
:data:`WRITER_KEY`, which no packed key can equal), and the key types the namespace held when that
submission first wrote it. A task loading namespaces another submission wrote (a topology submitted
again under the same name, a state from before this record) takes the types of their keys as the
state's key types, and a ``put`` of a new key of another type fails with a :class:`StateError`
naming both types (reported on the component) instead of mixing ``42`` and ``"42"`` silently; the
types carried in the record keep the check after the new submission's first commit. Key types the
submission itself introduces are not checked (restarts, rescaling): a bolt may mix them on purpose.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gale.topology.keygroups import key_group, owned_groups, owner_index
from gale.topology.state import KeyValueState, StateError, pack, unpack_key, unpack_value

#: the reserved entry of a namespace naming the topology submission that last wrote it; 0xc1 is
#: the one byte msgpack never writes, so no packed key starts with it
WRITER_KEY = b"\xc1writer"


def _writer_entry(raw: bytes | None) -> dict:
    """The writer record of a namespace: ``{"writer": topology id, "key_types": [...], "from": id}``
    (``key_types``: the types of the keys the namespace held when that submission first wrote it,
    written by ``from``); {} when absent or unreadable."""
    if raw is None:
        return {}
    try:
        entry = json.loads(raw)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


def key_type(key: Any) -> str:
    """``str``, ``int``, ``tuple[str, int]`` ...: the type of a state key as the check names it."""
    t = type(key)
    if t is tuple:
        return "tuple[" + ", ".join(key_type(k) for k in key) + "]"
    return t.__name__


def _describe_layout(layout: dict) -> str:
    if layout.get("key_groups") is not None:
        return f"keyed state in {layout['key_groups']} key groups (topology.state.key.groups)"
    return f"per-task state over {layout.get('tasks')} tasks (an input that is not a fields grouping)"


class TaskState:
    def __init__(self, provider: Any, prefix: str, component: str, index: int, tasks: int,
                 key_groups: int | None, grouping_fields: Sequence[Sequence[str]] = (), writer: str | None = None):
        self.provider = provider
        #: the topology submission writing (its id); None: no writer record and no key type check
        self.writer = writer
        self.mine: set[str] = set()  # namespaces whose committed content this submission wrote
        #: key types of the loaded namespaces other submissions wrote, and those submissions
        self.foreign_types: frozenset[str] = frozenset()
        self.foreign_writers: list[str] = []
        #: per namespace: the key types it had when loaded from another submission, and that submission
        self.inherited: dict[str, dict] = {}
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
        else:
            self.namespaces = [f"{base}/task{index}"]
            only = self.namespaces[0]
            self._namespace_of = lambda key: only
            owns = None

        def check(key: Any) -> str | None:
            why = owns(key) if owns is not None else None
            if why is None and self.foreign_types:
                why = self.check_key_type(key)
            return why

        self.kv = KeyValueState(check if (owns is not None or writer is not None) else None)
        self.bytes_written = 0

    def check_key_type(self, key: Any) -> str | None:
        kt = key_type(key)
        if kt in self.foreign_types:
            return None
        types = ", ".join(sorted(self.foreign_types))
        return (
            f"state key {key!r} has type {kt}, but the state of component {self.component!r} was written by another "
            f"submission of the topology ({', '.join(self.foreign_writers)}) with keys of type {types}: the keys would "
            f"be mixed silently (a key {kt} never equals a key {types}). Put keys of the stored type, or clear the "
            "component's state to start afresh (docs/state.md, \"Bad input\")"
        )

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
                "topology's state settings and groupings (per-task state keeps its task count), or clear the component's "
                "state to start afresh (docs/state.md)"
            )

    def load(self) -> None:
        """The committed content of every namespace of this task becomes the working state."""
        self.check_layout()
        data: dict[Any, Any] = {}
        mine: set[str] = set()
        foreign: set[str] = set()
        writers: set[str] = set()
        inherited: dict[str, dict] = {}
        for ns, content in self.provider.load(self.namespaces).items():
            entry = _writer_entry(content.get(WRITER_KEY))
            ours = self.writer is not None and entry.get("writer") == self.writer
            types: set[str] = set()
            for k, v in content.items():
                if k != WRITER_KEY:
                    key = unpack_key(k)
                    data[key] = unpack_value(v)
                    if not ours and self.writer is not None:
                        types.add(key_type(key))
            if ours:
                # written by this submission: the key types it took over with the namespace still hold
                mine.add(ns)
                ref, source = set(entry.get("key_types") or ()), entry.get("from")
            else:
                ref, source = types, entry.get("writer")
            inherited[ns] = {"key_types": sorted(ref), "from": source}
            if ref:
                writers.add(f"topology id {source}" if source else "a Gale that did not record the writer")
                foreign |= ref
        self.inherited = inherited
        self.mine = mine
        self.foreign_types = frozenset(foreign)
        self.foreign_writers = sorted(writers)
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
        claimed = []
        if self.writer is not None:
            for ns, (puts, _) in changes.items():
                if ns not in self.mine:  # the first write of this submission: record it, atomically
                    entry = {"writer": self.writer, **self.inherited.get(ns, {"key_types": [], "from": None})}
                    puts[WRITER_KEY] = json.dumps(entry, sort_keys=True).encode()
                    claimed.append(ns)
        try:
            written = self.provider.prepare(txid, changes)
        except BaseException:
            # keep tracking them: the rollback that follows a failed prepare reloads anyway, but a
            # retried prepare of the same txid must still see them
            self.kv._dirty = {**dirty, **self.kv._dirty}
            self.kv._deleted = (deleted - set(self.kv._dirty)) | self.kv._deleted
            raise
        self.bytes_written += written
        # staged, not committed: a rollback reloads (and recomputes ``mine``); a task that dies
        # before the commit leaves the old writer in place, and the staged entry commits with the data
        self.mine.update(claimed)
        return written

    def commit(self, txid: int) -> None:
        self.provider.commit(txid, self.namespaces)

    def rollback(self, reload: bool) -> None:
        """Forget staged checkpoints; with ``reload`` the working state goes back to the committed one."""
        self.provider.rollback(self.namespaces)
        if reload:
            self.load()
