"""The serializable topology definition and the pure computations nimbus runs on it.

A :class:`TopologyDef` is JSON: components referenced by import path (``module:Class``) and
constructor arguments, their declared streams, their inputs with groupings, parallelism and task
counts, plus the topology's own config. Nimbus validates it, stores it with the code bundle,
computes tasks and executors and schedules — all without importing user code.

Tasks and executors follow Storm exactly (``docs/storm-model.md`` §1):
components (including the system component ``__acker``) sorted by id, task ids numbered from 1,
each component getting its task count; each component's tasks split into its executor count of
contiguous ranges, bigger ranges first (10 tasks over 3 executors → 4, 3, 3).

A :class:`Topology` is the compiled form the runtime runs: a definition plus the component classes
(given by the builder, or imported from their paths on first use). It lives here, beside the
definition, so the runtime never imports the user-facing builder.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gale import config as gconfig
from gale.config import as_config
from gale.config_keys import Config
from gale.errors import ConfigError, TopologyError
from gale.records import ExecutorId
from gale.topology.windowing import sets_window
from gale.topology.windowing import validate_component as validate_window

ACKER_COMPONENT = "__acker"
ACKER_INIT_STREAM = "__ack_init"
ACKER_ACK_STREAM = "__ack_ack"
ACKER_FAIL_STREAM = "__ack_fail"
ACKER_RESET_STREAM = "__ack_reset_timeout"

GroupingType = Literal["shuffle", "fields", "all", "global", "none", "direct", "local_or_shuffle"]
GROUPING_TYPES: tuple[str, ...] = ("shuffle", "fields", "all", "global", "none", "direct", "local_or_shuffle")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class GroupingDef(_Model):
    type: GroupingType
    fields: list[str] = []


class InputDef(_Model):
    component: str
    stream: str = "default"
    grouping: GroupingDef


class StreamDef(_Model):
    fields: list[str]
    direct: bool = False


class ComponentDef(_Model):
    kind: Literal["spout", "bolt"]
    class_path: str = Field(alias="class", pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    parallelism: int = Field(ge=1)
    tasks: int = Field(ge=1)
    conf: dict[str, Any] = {}
    streams: dict[str, StreamDef] = {}
    inputs: list[InputDef] = []
    spark: bool = False
    #: a ``StatefulBolt`` (set by the builder): nimbus decides without importing user code whether
    #: a rebalance may change the component's task count (``gale.nimbus.rescale``)
    stateful: bool = False
    #: what runs its tasks (set by the builder from the class): ``python`` (the spout or bolt itself),
    #: ``window`` (a windowed bolt), ``shell`` (a multi-lang subprocess), ``spark`` (Spark
    #: micro-batches); None in definitions from before it was recorded (the worker asks the class)
    body: Literal["python", "window", "shell", "spark"] | None = None
    #: a spout that can go back to a position (``position()``/``rewind()``, set by the builder):
    #: exactly-once topologies refuse one that cannot at submit; None: not recorded
    rewindable: bool | None = None
    #: a ``TransactionalSink`` (set by the builder): the guarantee it requires (``at-least-once``: the
    #: topology's, whichever it is; ``exactly-once``: refused at submit unless the topology gives it)
    sink: Literal["at-least-once", "exactly-once"] | None = None

    @property
    def executors(self) -> int:
        return min(self.parallelism, self.tasks)

    @property
    def windowed(self) -> bool:
        """A windowed bolt (recorded, or — definitions from before — its own configuration sets a window)."""
        if self.body is not None:
            return self.body == "window"
        return self.kind == "bolt" and sets_window(Config.resolve(self.conf, where="component configuration",
                                                                  allow_user_keys=True))


class TopologyDef(_Model):
    version: int = 1
    name: str | None = None
    conf: dict[str, Any] = {}
    components: dict[str, ComponentDef]

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "topology definition") -> TopologyDef:
        try:
            defn = cls.model_validate_json(text)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise TopologyError(f"invalid {where}: {loc}: {err['msg']}") from None
        validate(defn)
        return defn

    def spouts(self) -> list[str]:
        return sorted(c for c, d in self.components.items() if d.kind == "spout")

    def bolts(self) -> list[str]:
        return sorted(c for c, d in self.components.items() if d.kind == "bolt")

    def uses_spark(self, components: set[str] | None = None) -> bool:
        return any(d.spark for c, d in self.components.items() if components is None or c in components)


def resolve_class(path: str) -> type:
    """Import ``module:QualName``; errors name the path and the problem."""
    module_name, _, qual = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        raise TopologyError(f"cannot import module {module_name!r} for component class {path!r}: {exc}") from exc
    for part in qual.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TopologyError(f"module {module_name!r} has no class {qual!r} (component class {path!r})") from None
    if not isinstance(obj, type):
        raise TopologyError(f"{path!r} is not a class")
    return obj


class Topology:
    """A built topology: the JSON definition plus, when built in this process, the live classes."""

    def __init__(self, definition: TopologyDef, classes: Mapping[str, type] | None = None):
        self.definition = definition
        self.classes: dict[str, type] = dict(classes or {})
        #: the directory shipped as the code bundle (set by the topology-file loader: the file's
        #: directory, or a streamparse project's root); shell components run from it in local mode
        self.code_dir: str | None = None

    @property
    def name(self) -> str | None:
        return self.definition.name

    @property
    def conf(self) -> dict[str, Any]:
        return self.definition.conf

    def component_class(self, component_id: str) -> type:
        cls = self.classes.get(component_id)
        if cls is None:
            cls = resolve_class(self.definition.components[component_id].class_path)
            self.classes[component_id] = cls
        return cls

    def to_json(self) -> str:
        return self.definition.to_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> Topology:
        return cls(TopologyDef.from_json(text))


def _check_id(kind: str, cid: Any) -> None:
    if not isinstance(cid, str) or not cid.strip():
        raise TopologyError(f"{kind} id must be a non-empty string, got {cid!r}")
    if cid.startswith("__"):
        raise TopologyError(f"{kind} id {cid!r} is reserved: ids starting with '__' belong to system components such as '__acker'")
    if "/" in cid or any(ch.isspace() for ch in cid):
        raise TopologyError(f"{kind} id {cid!r} must not contain '/' or whitespace")


def validate(defn: TopologyDef) -> None:
    """Raise :class:`TopologyError` naming the component/stream/field of the first problem."""
    if not defn.spouts():
        raise TopologyError("topology has no spout: at least one component must be a spout")
    try:
        gconfig.validate(defn.conf, where="topology configuration", allow_user_keys=True)
    except ConfigError as exc:
        raise TopologyError(str(exc)) from None
    for cid, comp in defn.components.items():
        _check_id("component", cid)
        try:
            gconfig.validate(comp.conf, where=f"configuration of component {cid!r}", allow_user_keys=True)
        except ConfigError as exc:
            raise TopologyError(str(exc)) from None
        try:
            json.dumps([comp.args, comp.kwargs])
        except (TypeError, ValueError) as exc:
            raise TopologyError(f"constructor arguments of component {cid!r} are not JSON-serializable: {exc}") from None
        for sid, stream in comp.streams.items():
            if sid.startswith("__"):
                raise TopologyError(f"component {cid!r} declares reserved stream id {sid!r}")
            if len(set(stream.fields)) != len(stream.fields):
                raise TopologyError(f"component {cid!r} stream {sid!r} declares duplicate fields {stream.fields}")
        try:
            validate_window(cid, comp.conf, defn.conf)
        except ConfigError as exc:
            raise TopologyError(str(exc)) from None
        if comp.kind == "spout" and comp.inputs:
            raise TopologyError(f"spout {cid!r} cannot subscribe to inputs")
        if comp.kind == "bolt" and not comp.inputs:
            raise TopologyError(f"bolt {cid!r} has no inputs: subscribe it with a grouping such as shuffle_grouping(...)")
        seen: set[tuple[str, str]] = set()
        for inp in comp.inputs:
            src = defn.components.get(inp.component)
            if src is None:
                raise TopologyError(
                    f"bolt {cid!r} subscribes to unknown component {inp.component!r}; "
                    f"known components: {sorted(defn.components)}"
                )
            stream = src.streams.get(inp.stream)
            if stream is None:
                raise TopologyError(
                    f"bolt {cid!r} subscribes to stream {inp.stream!r} of {inp.component!r}, which does not "
                    f"declare it; declared streams: {sorted(src.streams) or 'none'}"
                )
            if (inp.component, inp.stream) in seen:
                raise TopologyError(f"bolt {cid!r} subscribes to {inp.component!r} stream {inp.stream!r} twice")
            seen.add((inp.component, inp.stream))
            g = inp.grouping
            if g.type == "fields":
                if not g.fields:
                    raise TopologyError(f"bolt {cid!r}: fields grouping on {inp.component!r} needs at least one field")
                for f in g.fields:
                    if f not in stream.fields:
                        raise TopologyError(
                            f"bolt {cid!r}: fields grouping on field {f!r}, which stream {inp.stream!r} of "
                            f"{inp.component!r} does not declare; its fields are {stream.fields}"
                        )
            if g.type == "direct" and not stream.direct:
                raise TopologyError(
                    f"bolt {cid!r}: direct grouping on stream {inp.stream!r} of {inp.component!r}, which is not "
                    "declared direct (declare(fields, direct=True))"
                )
            if g.type != "direct" and stream.direct:
                raise TopologyError(
                    f"bolt {cid!r}: stream {inp.stream!r} of {inp.component!r} is direct and must be "
                    f"subscribed with direct_grouping, not {g.type}"
                )


# ------------------------------------------------------------------------------ tasks & executors


def num_ackers(conf: Config | Mapping[str, Any], num_workers: int) -> int:
    """``topology.acker.executors``, or one per worker when unset (Storm's default)."""
    value = as_config(conf, "topology configuration").topology_acker_executors
    return num_workers if value is None else int(value)


def component_parallelism(
    defn: TopologyDef, conf: Mapping[str, Any], num_workers: int, overrides: Mapping[str, int] | None = None,
    tasks: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Executors per component including ``__acker`` (StormBase.component_executors); ``tasks``:
    task counts a rebalance changed (StormBase.component_tasks)."""
    tasks = tasks or {}
    out = {cid: min(comp.parallelism, tasks.get(cid, comp.tasks)) for cid, comp in defn.components.items()}
    for cid, n in (overrides or {}).items():
        if cid in out:
            out[cid] = max(1, min(int(n), tasks.get(cid, defn.components[cid].tasks)))
    out[ACKER_COMPONENT] = num_ackers(conf, num_workers) if ACKER_COMPONENT not in (overrides or {}) else int(overrides[ACKER_COMPONENT])
    return out


def component_task_counts(defn: TopologyDef, acker_executors: int,
                          tasks: Mapping[str, int] | None = None) -> dict[str, int]:
    """Tasks per component: the definition's, or the count a rebalance set (``tasks``, Gale:
    StormBase.component_tasks), and ``__acker``'s (its executor count)."""
    tasks = tasks or {}
    counts = {cid: int(tasks.get(cid, comp.tasks)) for cid, comp in defn.components.items()}
    counts[ACKER_COMPONENT] = acker_executors
    return counts


def task_to_component(task_counts: Mapping[str, int]) -> dict[int, str]:
    """Task ids from 1 in sorted component order, each component getting its task count."""
    out: dict[int, str] = {}
    next_task = 1
    for cid in sorted(task_counts):
        for _ in range(task_counts[cid]):
            out[next_task] = cid
            next_task += 1
    return out


def partition_fixed(n_parts: int, items: list[int]) -> list[list[int]]:
    """Split ``items`` into ``n_parts`` contiguous chunks differing by at most one, bigger first."""
    if n_parts <= 0:
        return []
    n_parts = min(n_parts, len(items)) or 0
    if n_parts == 0:
        return []
    base, extra = divmod(len(items), n_parts)
    chunks, i = [], 0
    for k in range(n_parts):
        size = base + (1 if k < extra else 0)
        chunks.append(items[i : i + size])
        i += size
    return chunks


def round_order(defn: TopologyDef) -> dict[str, int]:
    """Component → its place in an executor thread's round: spouts first, then bolts after the
    components they subscribe to (a topological order, ties by name; the bolts of a cycle, which
    Storm allows, follow in name order), and components the definition does not hold (``__acker``)
    after all of them. A tuple emitted in a round is then executed later in the same round, and a
    tuple tree done within one round leaves one ack value for its acker instead of one per round."""
    comps = defn.components
    needs = {cid: {i.component for i in c.inputs if i.component in comps and i.component != cid}
             for cid, c in comps.items()}
    order: list[str] = []
    placed: set[str] = set()
    while len(order) < len(comps):
        left = [cid for cid in sorted(comps) if cid not in placed]
        cid = next((c for c in left if needs[c] <= placed), left[0])  # left[0]: the lowest name of a cycle
        order.append(cid)
        placed.add(cid)
    # spouts first whatever the names (a spout needs nothing, but a bolt may sort before it)
    order.sort(key=lambda cid: comps[cid].kind != "spout")
    return {cid: i for i, cid in enumerate(order)}


def compute_executors(task_map: Mapping[int, str], parallelism: Mapping[str, int]) -> dict[str, list[ExecutorId]]:
    """component → executors ``(first_task, last_task)``."""
    by_comp: dict[str, list[int]] = {}
    for task, cid in sorted(task_map.items()):
        by_comp.setdefault(cid, []).append(task)
    out: dict[str, list[ExecutorId]] = {}
    for cid, tasks in by_comp.items():
        out[cid] = [(c[0], c[-1]) for c in partition_fixed(parallelism.get(cid, len(tasks)), tasks)]
    return out


class TopologyTasks:
    """Tasks and executors of one topology for a given worker count and executor overrides, and
    the task counts a rebalance changed (``tasks``: StormBase.component_tasks; Gale — Storm's task
    counts are fixed at submit). Build it from a StormBase with :meth:`of`."""

    def __init__(
        self,
        defn: TopologyDef,
        conf: Mapping[str, Any],
        num_workers: int,
        parallelism: Mapping[str, int] | None = None,
        tasks: Mapping[str, int] | None = None,
    ):
        self.defn = defn
        self.num_workers = num_workers
        self.parallelism = dict(parallelism) if parallelism else component_parallelism(defn, conf, num_workers,
                                                                                       tasks=tasks)
        acker_tasks = self.parallelism.get(ACKER_COMPONENT, num_ackers(conf, num_workers))
        self.task_counts = component_task_counts(defn, acker_tasks, tasks)
        self.task_to_component = task_to_component(self.task_counts)
        self.component_executors = compute_executors(self.task_to_component, self.parallelism)
        self.executor_to_component: dict[ExecutorId, str] = {
            ex: cid for cid, exs in self.component_executors.items() for ex in exs
        }

    @classmethod
    def of(cls, defn: TopologyDef, conf: Mapping[str, Any], base: Any) -> TopologyTasks:
        """The layout a StormBase gives: its workers, executors and task counts."""
        return cls(defn, conf, base.num_workers, base.component_executors, base.component_tasks)

    @property
    def executors(self) -> list[ExecutorId]:
        return sorted(self.executor_to_component)

    def component_tasks(self, cid: str) -> list[int]:
        return sorted(t for t, c in self.task_to_component.items() if c == cid)
