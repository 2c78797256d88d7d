"""A Bytewax dataflow read as Gale sees it: its core steps and the streams between them (pure).

A ``bytewax.dataflow.Dataflow`` is a tree of steps: every operator a user calls (``op.map``,
``op.fold_window``, ...) is a step whose ``substeps`` are the operators its Python builds on,
down to the eight *core* operators Bytewax's engine executes — ``input``, ``output``,
``flat_map_batch``, ``branch``, ``merge``, ``redistribute``, ``stateful_batch`` and
``inspect_debug``. :func:`plan_flow` walks that tree and returns the core steps in the order the
dataflow declared them, each with the streams it reads and the ports it writes, and the ancestors it
was built by (``op.stateful_map`` → ``stateful_flat_map`` → ``stateful`` → ``stateful_batch``: the
worker runs a faster equivalent of some library operators, ``gale.worker.bytewax.fast``).

Everything Gale cannot run is refused here, naming the step and the feature: a Bytewax version other
than :data:`SUPPORTED_VERSIONS`, a core operator this Gale does not know, a source or sink that is
neither partitioned nor dynamic, a step id a component cannot be named by.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gale.errors import TopologyError

#: the versions of the ``bytewax`` package whose dataflows Gale runs
SUPPORTED_VERSIONS = ("0.21.1",)

#: the core operators, by the name of their operator class (``bytewax.operators.<name>``)
CORE_KINDS = ("input", "output", "flat_map_batch", "branch", "merge", "redistribute", "stateful_batch",
              "inspect_debug")

#: the kinds that read a keyed stream and exchange items by key between tasks
KEYED_KINDS = ("stateful_batch",)


@dataclass(frozen=True)
class CoreStep:
    """One core step of a dataflow: a Gale component."""

    step_id: str
    kind: str
    #: the stream ids it reads, in port order (a merge reads several)
    inputs: tuple[str, ...]
    #: its output ports (``down``; a branch's ``trues``/``falses``) → the stream id each writes
    outputs: dict[str, str]
    #: for ``input``: ``fixed`` (a FixedPartitionedSource) or ``dynamic``; for ``output``: the sink's
    source: str | None = None
    sink: str | None = None
    #: the names of the operators it was built by, outermost first (``("stateful_map",
    #: "stateful_flat_map", "stateful")``), and their step ids
    ancestors: tuple[str, ...] = ()
    ancestor_ids: tuple[str, ...] = ()
    #: the operator object itself (a ``bytewax.dataflow.Operator``): only in the process that
    #: planned it; never serialized
    op: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class FlowPlan:
    flow_id: str
    steps: tuple[CoreStep, ...]

    def step(self, step_id: str) -> CoreStep:
        for s in self.steps:
            if s.step_id == step_id:
                return s
        raise KeyError(step_id)

    def consumers(self, stream_id: str) -> list[CoreStep]:
        """The steps reading ``stream_id`` (a stream may be read by several: each gets every item)."""
        return [s for s in self.steps if stream_id in s.inputs]

    def producer(self, stream_id: str) -> tuple[CoreStep, str]:
        """The step writing ``stream_id`` and the port it writes it on."""
        for s in self.steps:
            for port, sid in s.outputs.items():
                if sid == stream_id:
                    return s, port
        raise KeyError(stream_id)


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("bytewax")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_version(version: str | None = None) -> None:
    """Refuse a ``bytewax`` package of another version, naming the supported ones."""
    version = installed_version() if version is None else version
    if version is None:
        raise TopologyError("running a Bytewax dataflow needs the bytewax package: pip install "
                            f"bytewax=={SUPPORTED_VERSIONS[-1]} (or gale[bytewax])")
    if version not in SUPPORTED_VERSIONS:
        raise TopologyError(f"bytewax {version} is installed, but Gale runs dataflows of bytewax "
                            f"{', '.join(SUPPORTED_VERSIONS)} only: pip install bytewax=={SUPPORTED_VERSIONS[-1]}")


def is_dataflow(obj: Any) -> bool:
    """Whether ``obj`` is a ``bytewax.dataflow.Dataflow`` (without importing bytewax when it is not
    even loaded: then nothing can be one)."""
    import sys

    module = sys.modules.get("bytewax.dataflow")
    return module is not None and isinstance(obj, module.Dataflow)


def _walk(steps: Sequence[Any], ancestors: tuple[Any, ...] = ()) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """Every core step under ``steps`` (depth first, in declaration order) with the steps it was
    built by, outermost first."""
    for step in steps:
        if getattr(type(step), "core", False):
            yield step, ancestors
        else:
            yield from _walk(step.substeps, ancestors + (step,))


def _ports(step: Any, names: Sequence[str]) -> list[tuple[str, str]]:
    """(port name, stream id) of a step's ports (``up``; a merge's ``ups`` with one per stream)."""
    out = []
    for name in names:
        port = getattr(step, name)
        stream_ids = port.stream_ids
        if hasattr(port, "stream_id"):  # a SinglePort
            out.append((name, port.stream_id))
        else:  # a MultiPort: its streams in argument order
            out.extend((f"{name}{key}", sid) for key, sid in stream_ids.items())
    return out


def _check_step_id(step_id: str) -> None:
    if not step_id or any(ch.isspace() for ch in step_id) or "/" in step_id or step_id.startswith("__"):
        raise TopologyError(
            f"step {step_id!r}: Gale names a component by its step id, which must not contain whitespace or '/' "
            "nor start with '__'; rename the step (or the dataflow)")


def plan_flow(flow: Any) -> FlowPlan:
    """The core steps of ``flow`` (a ``bytewax.dataflow.Dataflow``) and their streams, checked."""
    check_version()
    from bytewax.inputs import DynamicSource, FixedPartitionedSource
    from bytewax.outputs import DynamicSink, FixedPartitionedSink

    if not is_dataflow(flow):
        raise TopologyError(f"expected a bytewax.dataflow.Dataflow, got {type(flow).__name__}")
    steps: list[CoreStep] = []
    for op, ancestors in _walk(flow.substeps):
        kind = type(op).__name__
        if kind not in CORE_KINDS:
            raise TopologyError(f"step {op.step_id!r} is a core operator {kind!r} that Gale does not run "
                                f"(Gale runs {', '.join(CORE_KINDS)})")
        _check_step_id(op.step_id)
        inputs = tuple(sid for _, sid in _ports(op, type(op).ups_names))
        outputs = dict(_ports(op, type(op).dwn_names))
        source = sink = None
        if kind == "input":
            if isinstance(op.source, FixedPartitionedSource):
                source = "fixed"
            elif isinstance(op.source, DynamicSource):
                source = "dynamic"
            else:
                raise TopologyError(
                    f"step {op.step_id!r}: source {type(op.source).__name__} is neither a FixedPartitionedSource nor "
                    "a DynamicSource (subclass one of them; bytewax.inputs)")
        elif kind == "output":
            if isinstance(op.sink, FixedPartitionedSink):
                sink = "fixed"
            elif isinstance(op.sink, DynamicSink):
                sink = "dynamic"
            else:
                raise TopologyError(
                    f"step {op.step_id!r}: sink {type(op.sink).__name__} is neither a FixedPartitionedSink nor a "
                    "DynamicSink (subclass one of them; bytewax.outputs)")
        steps.append(CoreStep(op.step_id, kind, inputs, outputs, source, sink,
                              tuple(type(a).__name__ for a in ancestors), tuple(a.step_id for a in ancestors), op))
    if not any(s.kind == "input" for s in steps):
        raise TopologyError(f"dataflow {flow.flow_id!r} must have at least one input step "
                            "(bytewax.operators.input)")
    if not any(s.kind in ("output", "inspect_debug") for s in steps):
        raise TopologyError(f"dataflow {flow.flow_id!r} must have at least one output step "
                            "(bytewax.operators.output, or an inspect), as Bytewax requires")
    produced = {sid for s in steps for sid in s.outputs.values()}
    for s in steps:
        for sid in s.inputs:
            if sid not in produced:
                raise TopologyError(f"step {s.step_id!r} reads stream {sid!r}, which no step of the dataflow writes")
    return FlowPlan(flow.flow_id, tuple(steps))


def find_core_step(flow: Any, step_id: str) -> tuple[Any, tuple[Any, ...]]:
    """The core step ``step_id`` of ``flow`` and the steps it was built by, outermost first."""
    for op, ancestors in _walk(flow.substeps):
        if op.step_id == step_id:
            return op, ancestors
    raise TopologyError(f"dataflow {flow.flow_id!r} has no core step {step_id!r}: the dataflow changed since the "
                        "topology was built from it (it must be built the same way in every process)")
