"""TopologyBuilder: wire spouts and bolts with groupings into a :class:`Topology`.

::

    builder = TopologyBuilder()
    builder.set_spout("sentences", RandomSentenceSpout, 1)
    builder.set_bolt("split", SplitSentence, 10).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount, 20).fields_grouping("split", ["word"])
    topology = builder.create_topology(conf={"topology.workers": 2})

Components are given as a class (or an import path ``"package.module:Class"``) plus constructor
arguments, which must be JSON-serializable: the definition travels to nimbus as JSON and every task
builds its own instance. The builder instantiates each component once, here, to read its
``declare_output_fields``; everything is validated in :meth:`TopologyBuilder.create_topology`,
with errors naming the component, stream and field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gale.config_keys import Config
from gale.errors import ConfigError, TopologyError
from gale.topology.checkpointing import add_checkpointing
from gale.topology.composition import persistent, validate_composition
from gale.topology.components import Bolt, Component, OutputFieldsDeclarer, Spout, can_rewind
from gale.topology.definition import (
    ComponentDef,
    GroupingDef,
    InputDef,
    StreamDef,
    Topology,
    TopologyDef,
    _check_id,
    resolve_class,
    validate,
)
from gale.topology.sink import sink_guarantee
from gale.topology.state import StatefulBolt
from gale.topology.tuple import DEFAULT_STREAM


def class_path(cls: type) -> str:
    """``module:QualName`` for a class; refuses classes that cannot be imported by path."""
    qual = cls.__qualname__
    if "<locals>" in qual:
        raise TopologyError(
            f"class {qual} is defined inside a function; define components at module level so workers can import them"
        )
    return f"{cls.__module__}:{qual}"


class _ComponentSpec:
    def __init__(self, cid: str, kind: str, cls: type, cls_path: str, parallelism: int, args: Sequence[Any],
                 kwargs: Mapping[str, Any], tasks: int | None):
        self.cid = cid
        self.kind = kind
        self.cls = cls
        self.cls_path = cls_path
        self.parallelism = parallelism
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.tasks = tasks
        self.conf: dict[str, Any] = {}
        self.inputs: list[InputDef] = []


class ComponentDeclarer:
    """Returned by ``set_spout``/``set_bolt``: per-component config, task count and groupings."""

    def __init__(self, spec: _ComponentSpec):
        self._spec = spec

    def set_num_tasks(self, tasks: int) -> ComponentDeclarer:
        self._spec.tasks = tasks
        return self

    def add_configuration(self, key: str, value: Any) -> ComponentDeclarer:
        self._spec.conf[key] = value
        return self

    def add_configurations(self, conf: Mapping[str, Any]) -> ComponentDeclarer:
        self._spec.conf.update(conf)
        return self

    def _input(self, component: str, stream: str, gtype: str, fields: Iterable[str] = ()) -> ComponentDeclarer:
        if self._spec.kind != "bolt":
            raise TopologyError(f"spout {self._spec.cid!r} cannot subscribe to inputs")
        if isinstance(fields, str):
            fields = [fields]
        self._spec.inputs.append(
            InputDef(component=component, stream=stream, grouping=GroupingDef(type=gtype, fields=list(fields)))
        )
        return self

    def shuffle_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        """Tuples are spread evenly over the bolt's tasks."""
        return self._input(component, stream, "shuffle")

    def local_or_shuffle_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        """Prefer tasks in the same worker; shuffle among them (or among all when none is local)."""
        return self._input(component, stream, "local_or_shuffle")

    def fields_grouping(self, component: str, fields: Iterable[str], stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        """Tuples with equal values of ``fields`` go to the same task."""
        return self._input(component, stream, "fields", fields)

    def all_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        """Every task gets a copy of every tuple."""
        return self._input(component, stream, "all")

    def global_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        """All tuples go to the bolt's task with the lowest id."""
        return self._input(component, stream, "global")

    def none_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        """No preference (currently the same as shuffle, as in Storm)."""
        return self._input(component, stream, "none")

    def direct_grouping(self, component: str, stream: str = DEFAULT_STREAM) -> ComponentDeclarer:
        """The emitter picks the task with ``emit_direct``; the stream must be declared direct."""
        return self._input(component, stream, "direct")


class TopologyBuilder:
    def __init__(self) -> None:
        self._specs: dict[str, _ComponentSpec] = {}

    def _add(self, kind: str, cid: str, component: type | str, parallelism: int, args: Sequence[Any] | None,
             kwargs: Mapping[str, Any] | None, tasks: int | None) -> ComponentDeclarer:
        _check_id("component", cid)
        if cid in self._specs:
            raise TopologyError(f"duplicate component id {cid!r}: spout and bolt ids must be unique")
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise TopologyError(f"component {cid!r}: parallelism must be an integer >= 1, got {parallelism!r}")
        if tasks is not None and (isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1):
            raise TopologyError(f"component {cid!r}: task count must be an integer >= 1, got {tasks!r}")
        if isinstance(component, str):
            cls = resolve_class(component)
            path = component
        elif isinstance(component, type):
            cls = component
            path = class_path(component)
        else:
            raise TopologyError(
                f"component {cid!r}: give a class (or 'module:Class'), not an instance of {type(component).__name__}"
            )
        base = Spout if kind == "spout" else Bolt
        if not issubclass(cls, base):
            raise TopologyError(f"component {cid!r}: {path} is not a {base.__name__} subclass")
        spec = _ComponentSpec(cid, kind, cls, path, parallelism, args or (), kwargs or {}, tasks)
        self._specs[cid] = spec
        return ComponentDeclarer(spec)

    def set_spout(self, component_id: str, spout: type[Spout] | str, parallelism: int = 1, *,
                  args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None,
                  tasks: int | None = None) -> ComponentDeclarer:
        return self._add("spout", component_id, spout, parallelism, args, kwargs, tasks)

    def set_bolt(self, component_id: str, bolt: type[Bolt] | str, parallelism: int = 1, *,
                 args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None,
                 tasks: int | None = None) -> ComponentDeclarer:
        return self._add("bolt", component_id, bolt, parallelism, args, kwargs, tasks)

    def create_topology(self, name: str | None = None, conf: Mapping[str, Any] | None = None) -> Topology:
        """Validate everything and build the :class:`Topology`."""
        conf = dict(conf or {})
        try:
            config = Config.resolve(conf, where="topology configuration", allow_user_keys=True)
        except ConfigError as exc:
            raise TopologyError(str(exc)) from None
        components: dict[str, ComponentDef] = {}
        for cid, spec in self._specs.items():
            streams = self._declared_streams(spec)
            comp_conf = dict(spec.conf)
            instance_conf = self._instance_conf(spec)
            for k, v in instance_conf.items():
                comp_conf.setdefault(k, v)
            tasks = spec.tasks or config.topology_tasks or spec.parallelism
            components[cid] = ComponentDef(
                kind=spec.kind,
                class_path=spec.cls_path,
                args=spec.args,
                kwargs=spec.kwargs,
                parallelism=spec.parallelism,
                tasks=tasks,
                conf=comp_conf,
                streams={sid: StreamDef(fields=s.fields, direct=s.direct) for sid, s in streams.items()},
                inputs=spec.inputs,
                spark=bool(getattr(spec.cls, "uses_spark", False)),
                stateful=issubclass(spec.cls, StatefulBolt),
                body=getattr(spec.cls, "body_kind", "python"),
                rewindable=can_rewind(spec.cls) if spec.kind == "spout" else None,
                sink=sink_guarantee(spec.cls, getattr(spec, "_instance", None)),
            )
        if any(issubclass(spec.cls, StatefulBolt) for spec in self._specs.values()) or any(
                persistent(comp, config) or comp.sink for comp in components.values()):
            add_checkpointing(components)
        defn = TopologyDef(name=name, conf=conf, components=components)
        validate(defn)
        validate_composition(defn, config)
        return Topology(defn, {cid: spec.cls for cid, spec in self._specs.items()})

    @staticmethod
    def _instantiate(spec: _ComponentSpec) -> Component:
        try:
            return spec.cls(*spec.args, **spec.kwargs)
        except Exception as exc:  # noqa: BLE001
            raise TopologyError(f"component {spec.cid!r}: {spec.cls_path}(...) raised {type(exc).__name__}: {exc}") from exc

    def _declared_streams(self, spec: _ComponentSpec):
        declarer = OutputFieldsDeclarer()
        instance = self._instantiate(spec)
        try:
            instance.declare_output_fields(declarer)
        except Exception as exc:  # noqa: BLE001
            raise TopologyError(
                f"component {spec.cid!r}: declare_output_fields raised {type(exc).__name__}: {exc}"
            ) from exc
        spec._instance = instance  # reused by _instance_conf
        return declarer.streams

    @staticmethod
    def _instance_conf(spec: _ComponentSpec) -> dict[str, Any]:
        instance = getattr(spec, "_instance", None)
        if instance is None:
            return {}
        try:
            conf = instance.component_configuration() or {}
        except Exception as exc:  # noqa: BLE001
            raise TopologyError(f"component {spec.cid!r}: component_configuration raised {exc}") from exc
        if not isinstance(conf, Mapping):
            raise TopologyError(f"component {spec.cid!r}: component_configuration must return a dict")
        return dict(conf)
