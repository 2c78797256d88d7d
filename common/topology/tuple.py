"""Tuples and field lists.

A :class:`Tuple` is what a bolt's ``execute`` receives: its values, the declared fields of the
stream it arrived on (so ``tup["word"]`` works), where it came from (component, stream, task) and
its message id (which tuple trees it belongs to, and its id in each, for the acker). Tuples are created on the hot path, so
the class uses ``__slots__`` and shares one :class:`Fields` object per stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import cython

SYSTEM_COMPONENT = "__system"
TICK_STREAM = "__tick"
DEFAULT_STREAM = "default"


class Fields:
    """An ordered list of field names with O(1) name → index lookup.

    When the runtime makes one per stream of one component, ``component``/``stream`` name that
    source and ``source_key`` is ``"component:stream"`` (it keys bolt statistics without building a
    string per tuple).
    """

    __slots__ = ("names", "_index", "source_key", "component", "stream")

    def __init__(self, names: Iterable[str], source_key: str = ""):
        self.source_key = source_key
        self.component, _, self.stream = source_key.partition(":")
        self.names: tuple[str, ...] = tuple(names)
        self._index = {name: i for i, name in enumerate(self.names)}
        if len(self._index) != len(self.names):
            dup = sorted({n for n in self.names if self.names.count(n) > 1})
            raise ValueError(f"duplicate field names {dup}")

    def index(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no field {name!r}; fields are {list(self.names)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self):
        return iter(self.names)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Fields):
            return self.names == other.names
        if isinstance(other, (list, tuple)):
            return self.names == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.names)

    def __repr__(self) -> str:
        return f"Fields({list(self.names)!r})"


EMPTY_FIELDS = Fields(())
TICK_FIELDS = Fields(("rate_secs",), f"{SYSTEM_COMPONENT}:{TICK_STREAM}")


class Tuple:
    """One tuple on a stream.

    Attributes (read-only by convention): ``values``, ``fields``, ``component`` (source component
    id), ``stream``, ``task`` (source task id), ``message_id`` (Storm's MessageId: ``{root id: edge
    id}``, the tuple trees this tuple belongs to and its own id in each; ``None`` when untracked),
    ``lineage`` (a stable identity that a replay of the same spout message reproduces, 0 when
    untracked; see :mod:`gale.worker.runtime.lineage`). A tuple's *anchors* are something else: the
    parent tuples a bolt passes to ``emit(..., anchors=...)``.
    """

    # ``message_id`` is stored in one of two forms: ``_root`` (a root id) and ``_edge`` when the tuple
    # is in one tuple tree (the hot path's case: no dict per tuple), else the dict in ``_mid``
    __slots__ = ("values", "fields", "task", "_mid", "_root", "_edge", "ack_val", "_st", "lineage", "_emits")

    def __init__(
        self,
        values: Sequence[Any],
        fields: Fields,
        component: str,
        stream: str,
        task: int,
        message_id: dict[int, int] | None = None,
        lineage: int = 0,
    ):
        if fields.component != component or fields.stream != stream:
            # the source component and stream live on the (shared, per-stream) Fields object
            fields = Fields(fields.names, f"{component}:{stream}")
        self.values = values
        self.fields = fields
        self.task = task
        self._mid = message_id
        self._root = None
        self._edge = 0
        self.ack_val = 0  # XOR of the edge ids of the tuples anchored to this one
        # 0: not yet acked or failed; > 0: not yet acked, sampled for latency stats at this
        # perf_counter time; -1: acked; -2: failed (a second ack or fail is ignored)
        self._st = 0.0
        self.lineage = lineage
        self._emits = 0  # emits anchored to this tuple so far (their lineage ordinal)

    @property
    def message_id(self) -> dict[int, int] | None:
        """Storm's MessageId: ``{root id: edge id}`` for each tuple tree the tuple belongs to (``None``
        when untracked)."""
        mid = self._mid
        if mid is None and self._root is not None:
            mid = self._mid = {self._root: self._edge}
        return mid

    @message_id.setter
    def message_id(self, value: dict[int, int] | None) -> None:
        self._mid = value
        self._root = None

    @property
    def component(self) -> str:
        """The source component id."""
        return self.fields.component

    @property
    def stream(self) -> str:
        """The stream the tuple arrived on."""
        return self.fields.stream

    # ---- access
    def __getitem__(self, key: int | str) -> Any:
        try:
            return self.values[key]
        except TypeError:
            if isinstance(key, str):
                return self.values[self.fields.index(key)]
            raise

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.fields:
            return self.values[self.fields.index(name)]
        return default

    def select(self, names: Iterable[str]) -> list[Any]:
        return [self.values[self.fields.index(n)] for n in names]

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(self.fields.names, self.values))

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self):
        return iter(self.values)

    # ---- Storm-style accessors
    @property
    def source_component(self) -> str:
        return self.component

    @property
    def source_stream(self) -> str:
        return self.stream

    @property
    def source_task(self) -> int:
        return self.task

    def is_tick(self) -> bool:
        return self.component == SYSTEM_COMPONENT and self.stream == TICK_STREAM

    def __repr__(self) -> str:
        return (
            f"Tuple({list(self.values)!r}, component={self.component!r}, stream={self.stream!r}, "
            f"task={self.task})"
        )


def new_tuple(values: Sequence[Any], fields: Fields, task: int, message_id: dict[int, int] | None,
              lineage: int = 0) -> Tuple:
    """Build a Tuple on the hot path: ``fields`` must be a runtime stream Fields (it names the
    source component and stream). About half the cost of calling the class."""
    return _make(values, fields, task, message_id, None, 0, lineage)


def new_tracked(values: Sequence[Any], fields: Fields, task: int, root: int, edge: int, lineage: int) -> Tuple:
    """:func:`new_tuple` of a tuple in one tuple tree: message id ``{root: edge}``, kept as two slots."""
    return _make(values, fields, task, None, root, edge, lineage)


@cython.cfunc
def _make(values: object, fields: Fields, task: object, mid: object, root: object, edge: cython.ulonglong,
          lineage: object) -> Tuple:
    t: Tuple = Tuple.__new__(Tuple)  # a C allocation when compiled (gale.compiled)
    t.values = values
    t.fields = fields
    t.task = task
    t._mid = mid
    t._root = root
    t._edge = edge
    t.ack_val = 0
    t._st = 0.0
    t.lineage = lineage
    t._emits = 0
    return t
