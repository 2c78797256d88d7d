"""The checkpoint participant of a transactional sink's executor: it performs the steps of
:mod:`gale.worker.sinks.protocol` on each task's store (``TransactionalSink.open_store``).

The checkpoint layer (``gale.worker.state.gate``) calls :meth:`SinkParticipant.act` when an action
has arrived from every input task; a step that raises fails the checkpoint tuple (the error, with
the store's address, is reported on the component) and the coordinator rolls back and retries —
until the store answers again. Before its first action a task reads its store's prepared
transactions and the coordinator's record (``<prefix>/__state``) and resolves what an earlier run
of the task left (:func:`~gale.worker.sinks.protocol.on_start`); after that it knows its prepared
transactions itself (it is their only writer), and reads them again after any failure.

Under at-least-once the executor also has :class:`~gale.worker.state.managed.AckHolding` after this
participant: the sink's acks are sent when the checkpoint holding its records commits, and a
rollback fails them (they replay). Refused records (``dead_letters=True``) are emitted on the
``error`` stream anchored to the PREPARE tuple, so the checkpoint commits only once they were
processed downstream.
"""

from __future__ import annotations

import json
from typing import Any

from gale.log import get_logger
from gale.topology.sink import DEAD_LETTER_STREAM
from gale.worker.sinks.protocol import SinkName, Step, on_action, on_start
from gale.worker.state.coordinator import PREPARE
from gale.worker.state.exactly_once import state_name

log = get_logger("sinks")

STATS = ("sink_records_prepared", "sink_transactions_committed", "sink_transactions_aborted",
         "sink_dead_letters", "state_checkpoint_failures")


class SinkParticipant:
    name = "sink"

    def __init__(self, executor: Any):
        self.executor = executor
        self.names: dict[int, SinkName] = {}
        self.stores: dict[int, Any] = {}
        #: task → {txid: [transaction names]} prepared and not resolved; None: to be read from the store
        self.prepared: dict[int, dict[int, list[str]] | None] = {}

    def attach(self) -> None:
        ex = self.executor
        ex.preparers.append(self.prepare)
        ex.closers.append(self.close)
        ex.layers[self.name] = self
        for key in STATS:
            ex.stats.extra.setdefault(key, 0)

    def prepare(self) -> None:
        """After the body prepared each task's sink: its store (which connects on first use)."""
        ex = self.executor
        runtime = ex.runtime
        topology = runtime.resources.get("state_prefix") or runtime.defn.name or runtime.topology_id
        all_tasks = runtime.layout.component_tasks(ex.component)
        for task in ex.tasks:
            sink = ex.bolts[task]
            self.names[task] = name = SinkName(topology, ex.component, all_tasks.index(task), len(all_tasks))
            sink.sink_name = name
            sink.sink_state = runtime.resources["state"]  # where a store may keep a small record (Kafka's)
            store = sink.open_store()
            sink._store = store
            self.stores[task] = store
            self.prepared[task] = None

    # ------------------------------------------------------------------ checkpoint actions

    def act(self, task: int, txid: int, action: str, tup: Any) -> None:
        try:
            known = self._known(task)
            for step in on_action(action, txid, known):
                self._perform(task, step, tup)
        except Exception:
            self.prepared[task] = None  # read the store again at the next action
            raise

    def _known(self, task: int) -> dict[int, list[str]]:
        known = self.prepared[task]
        if known is None:
            store, name = self.stores[task], self.names[task]
            known = name.mine(store.prepared())
            self.prepared[task] = known
            if known:
                record = self._record()
                log.info("sink-found-prepared", component=self.executor.component, task=task,
                         txids=sorted(known), record=record)
                for step in on_start(known, record):
                    self._perform(task, step, None)
        return known

    def _record(self) -> dict | None:
        runtime = self.executor.runtime
        raw = runtime.resources["state"].get_meta(state_name(runtime.resources["state_prefix"]))
        return json.loads(raw) if raw else None

    def _perform(self, task: int, step: Step, tup: Any) -> None:
        store = self.stores[task]
        known = self.prepared[task]
        extra = self.executor.stats.extra
        sink = self.executor.bolts[task]
        if step.op == "prepare":
            batch = sink.take_batch()
            if batch is None or not len(batch):
                return
            name = self.names[task].txn(step.txid)
            refused = self._dead_letters(task, tup) if sink.dead_letters else None
            extra["sink_records_prepared"] += store.prepare(name, step.txid, batch, refused)
            known[step.txid] = [name]
        elif step.op == "commit":
            for name in known.get(step.txid, ()):
                store.commit(name)
            known.pop(step.txid, None)
            extra["sink_transactions_committed"] += 1
        elif step.op == "abort":
            for name in known.get(step.txid, ()):
                store.abort(name)
            known.pop(step.txid, None)
            extra["sink_transactions_aborted"] += 1
        elif step.op == "discard":
            sink.discard_batch()

    def _dead_letters(self, task: int, checkpoint: Any):
        collector = self.executor.collectors[task]
        component = self.executor.component
        extra = self.executor.stats.extra

        def refused(record: Any, key: Any, reason: str) -> None:
            anchors = checkpoint if checkpoint is not None and checkpoint.values[1] == PREPARE else None
            collector.emit([record, key, reason, component], anchors=anchors, stream=DEAD_LETTER_STREAM)
            extra["sink_dead_letters"] += 1
            log.warning("sink-dead-letter", component=component, key=repr(key), reason=reason)

        return refused

    def close(self) -> None:
        for store in self.stores.values():
            try:
                store.close()
            except Exception:  # noqa: BLE001 - closing at shutdown
                pass
