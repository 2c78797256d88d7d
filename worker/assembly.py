"""The one place that composes executors: the core, a body, and the layers the topology needs.

``WorkerRuntime`` (the core, ``gale.worker.runtime``) imports no capability; it asks its factory for
each executor. :class:`Assembly` is that factory for every topology Gale runs (local mode and
cluster workers): from the component's definition it picks

* the **body** — what a task does with its input: a Python spout or bolt (the core's own), a window
  (``gale.worker.windows``), a subprocess (``gale.worker.multilang``), Spark micro-batches
  (``gale.worker.spark``);
* the **layers** around it, the same whatever the body: tick tuples; in a topology with checkpoints
  the checkpoint barrier on every bolt (``gale.worker.state.gate``), and on a stateful task (a
  ``StatefulBolt``, a persistent window) its managed state, its held acks (at-least-once) or the
  generation filter (exactly-once), and a persistent window's held outputs; on a transactional
  sink its store's transactions (``gale.worker.sinks``) and, at-least-once, its held acks; on every data spout of
  an exactly-once topology its source layer (``gale.worker.state.sources``), whose epochs arrive in
  band from the checkpoint spout; and on every bolt of such a topology its hello to the checkpoint
  spout (``gale.worker.state.liveness``), so a restarted task is recovered from at once. In any
  acked topology that is not exactly-once, every bolt and acker executor also says hello to the data
  spouts, whose executors fail their pending trees when one restarted (``topology.replay.on.restart``).

Which combinations make sense is decided at submit (``gale.topology.composition``), so none is
refused here; the layers are composed in one order — body first, then state, held acks and held
outputs, then the checkpoint barrier around them — which is the order their set-up steps run in.
"""

from __future__ import annotations

from typing import Any

from gale.topology.checkpointing import EXACTLY_ONCE, has_checkpointing
from gale.topology.definition import ACKER_COMPONENT, GroupingDef
from gale.topology.state import CHECKPOINT_COMPONENT, StatefulBolt
from gale.topology.tuple import Fields
from gale.worker.runtime.bolt import BoltExecutor, attach_ticks
from gale.worker.runtime.executor import AckerExecutor, Executor
from gale.worker.runtime.spout import SpoutExecutor
from gale.worker.runtime.grouping import Grouper
from gale.worker.state.liveness import Incarnation, RestartReplay, replays_on_restart


def body_of(runtime: Any, component: str) -> str:
    """The body kind of a component: recorded in its definition, or (older definitions) its class's."""
    comp = runtime.defn.components[component]
    if comp.body is not None:
        return comp.body
    if comp.spark:
        return "spark"
    return getattr(runtime.topology.component_class(component), "body_kind", "python")


class Assembly:
    """The executor factory of ``WorkerRuntime`` (``gale.worker.runtime.runtime.ExecutorFactory``)."""

    def attach(self, runtime: Any) -> None:
        """The per-worker resources: the state provider of a topology with checkpoints (unless one was
        handed in: a provider kept open across runs), and a Spark application started in the
        background for Spark components (``context.resources["spark"]``)."""
        defn = runtime.defn
        if has_checkpointing(defn):
            runtime.resources.setdefault("clock", runtime.clock.monotonic)  # the coordinator's
            if "state" not in runtime.resources:
                from gale.worker.state.provider import open_provider

                runtime.resources["state"] = open_provider(runtime.config)
            runtime.resources.setdefault("state_prefix", state_prefix(runtime))
            runtime.resources["source_components"] = sorted(
                c for c, comp in defn.components.items() if comp.kind == "spout" and c != CHECKPOINT_COMPONENT)
            runtime.resources["bolt_components"] = sorted(
                c for c, comp in defn.components.items() if comp.kind != "spout" and c != ACKER_COMPONENT)
        if "spark" not in runtime.resources and defn.uses_spark(runtime.local_components()):
            from gale.worker.spark.session import start_spark_for

            runtime.resources["spark"] = start_spark_for(runtime)

    def grouper(self, runtime: Any, target: str, grouping: GroupingDef, fields: Fields) -> Grouper | None:
        """A fields grouping into a stateful bolt routes by key group (its state moves with them)."""
        if grouping.type != "fields" or not has_checkpointing(runtime.defn):
            return None
        comp = runtime.defn.components[target]
        if not (comp.stateful or issubclass(runtime.topology.component_class(target), StatefulBolt)):
            return None
        from gale.worker.state.routing import KeyGroupGrouper

        groups = int(runtime.component_config(target).topology_state_key_groups)
        return KeyGroupGrouper(runtime.layout.component_tasks(target), fields, grouping.fields, groups)

    def make(self, runtime: Any, executor_id: tuple[int, int], component: str) -> Executor:
        if component == ACKER_COMPONENT:
            ex = AckerExecutor(runtime, executor_id, component)
            if replays_on_restart(runtime):  # its pending acks die with it, too
                Incarnation(ex, coordinator=False, spouts=True).attach()
            return ex
        if runtime.defn.components[component].kind == "spout":
            return self._spout(runtime, executor_id, component)
        return self._bolt(runtime, executor_id, component)

    # ------------------------------------------------------------------ spouts

    def _spout(self, runtime: Any, executor_id: tuple[int, int], component: str) -> SpoutExecutor:
        ex = SpoutExecutor(runtime, executor_id, component)
        body = body_of(runtime, component)
        if body == "shell":
            from gale.worker.multilang.body import ShellSpoutBody

            ShellSpoutBody(ex).attach()
        else:
            ex.python_body()
        if component == CHECKPOINT_COMPONENT:
            # the coordinator sends epochs to the sources (exactly-once) as control messages
            def attach_control() -> None:
                for spout in ex.spouts.values():
                    spout.attach_control(runtime.send_control)

            ex.preparers.append(attach_control)
        elif has_checkpointing(runtime.defn) and ex.config.topology_state_guarantee == EXACTLY_ONCE:
            from gale.worker.state.sources import ExactlyOnceSource

            ExactlyOnceSource(ex).attach()
        elif replays_on_restart(runtime):
            RestartReplay(ex).attach()  # a restarted bolt or acker executor: its pending trees fail now
        return ex

    # ------------------------------------------------------------------ bolts

    def _bolt(self, runtime: Any, executor_id: tuple[int, int], component: str) -> BoltExecutor:
        ex = BoltExecutor(runtime, executor_id, component)
        comp = runtime.defn.components[component]
        body = body_of(runtime, component)
        checkpointing = has_checkpointing(runtime.defn)
        exactly_once = checkpointing and ex.config.topology_state_guarantee == EXACTLY_ONCE
        stateful = comp.stateful or (body == "python" and issubclass(runtime.topology.component_class(component),
                                                                    StatefulBolt))
        persistent = body == "window" and ex.config.topology_bolts_window_persistent
        participants: list[Any] = []
        gate = None
        if checkpointing:
            from gale.worker.state.gate import Checkpointing

            gate = Checkpointing(ex, participants, hold=stateful or persistent, exactly_once=exactly_once,
                                 filter_data=exactly_once)
        if body == "window":
            self._window(ex, gate, participants, persistent, exactly_once)
        elif body == "shell":
            from gale.worker.multilang.body import ShellBoltBody

            ShellBoltBody(ex).attach()
        elif body == "spark":
            from gale.worker.spark.stage import SparkStage

            SparkStage(ex).attach()
        else:
            ex.python_body()
        if stateful:
            from gale.worker.state.managed import ManagedState

            state = ManagedState(ex, gate, exactly_once)
            state.attach()
            participants.insert(0, state)
            if not exactly_once:
                self._hold_acks(ex, participants)
        elif comp.sink and checkpointing:
            from gale.worker.sinks.participant import SinkParticipant

            sink = SinkParticipant(ex)
            sink.attach()
            participants.append(sink)  # before its held acks: a failed prepare fails them
            if not exactly_once:
                self._hold_acks(ex, participants)
        attach_ticks(ex)
        replay = replays_on_restart(runtime)
        if gate is not None or replay:
            # its restart makes the coordinator recover and the spouts replay at once
            Incarnation(ex, coordinator=gate is not None, spouts=replay).attach()
        if gate is not None:
            gate.attach()  # last: it wraps whatever intake the body set up
        return ex

    def _window(self, ex: BoltExecutor, gate: Any, participants: list, persistent: bool, exactly_once: bool) -> None:
        from gale.worker.windows.runner import WindowBody

        if not persistent:
            WindowBody(ex).attach()
            return
        from gale.worker.state.managed import ManagedState
        from gale.worker.state.windows import OutputHolding, PersistentWindow

        holding = OutputHolding(ex)
        body = WindowBody(ex, holder_for=holding.holder_for, ready=lambda task: gate.ready[task])
        body.attach()

        def fields_of(component: str, stream: str) -> Fields:
            return ex.runtime.stream_fields(component, stream)

        state = ManagedState(ex, gate, exactly_once, keyed=False, typed_keys=False,
                             target_of=lambda task: PersistentWindow(ex.bolts[task], fields_of))
        state.attach()
        holding.attach()
        participants.extend([state, holding])
        if not exactly_once:
            self._hold_acks(ex, participants)

    @staticmethod
    def _hold_acks(ex: BoltExecutor, participants: list) -> None:
        from gale.worker.state.managed import AckHolding

        holding = AckHolding(ex)
        holding.attach()
        participants.append(holding)


def state_prefix(runtime: Any) -> str:
    """Where the topology's state lives in the provider: its name (the state outlives a submission)."""
    return runtime.config.topology_name or runtime.defn.name or runtime.topology_id
