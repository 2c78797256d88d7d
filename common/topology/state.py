"""Managed state: :class:`StatefulBolt` and :class:`KeyValueState` (Storm's stateful bolts).

::

    class WordCount(gale.StatefulBolt):
        def init_state(self, state):            # a KeyValueState restored from the last checkpoint
            self.counts = state
        def execute(self, tup):
            w = tup["word"]; c = self.counts.get(w, 0) + 1
            self.counts.put(w, c)
            self.collector.emit([w, c], anchors=tup); self.collector.ack(tup)

The working state is a dict in the task's memory: ``get``/``put``/``delete`` never touch the
network. The state records which keys changed since the last checkpoint; a checkpoint writes only
those to the state provider (``topology.state.provider``), staged per checkpoint transaction and
committed atomically. See docs/state.md for the protocol, the guarantees and the providers.

Values (and keys) must be serializable with msgpack (None, bool, int, float, str, bytes, lists,
tuples and dicts of those); ``put`` refuses anything else at once, naming the key and the type.
"""

from __future__ import annotations

from gale.topology.components import Bolt
from gale.topology.kvstate import (  # noqa: F401 - the user's names (and the runtime's) live here
    KeyValueState,
    StateError,
    _describe,
    pack,
    unpack_key,
    unpack_value,
)

#: Storm's ids: the checkpoint spout's component id, the stream every component forwards
#: checkpoints on, and its fields
CHECKPOINT_COMPONENT = "$checkpointspout"
CHECKPOINT_STREAM = "$checkpoint"
CHECKPOINT_FIELDS = ("txid", "action")


class StatefulBolt(Bolt):
    """A bolt with managed state (Storm's ``IStatefulBolt``).

    :meth:`init_state` is called with the task's :class:`KeyValueState` (restored from the last
    committed checkpoint) before the first :meth:`execute`; tuples that arrive earlier are held.
    Acks are held back until the checkpoint covering them commits, so an input is acknowledged
    only once its effect on the state is durable. The hooks run before each checkpoint action.
    """

    def init_state(self, state: KeyValueState) -> None:
        raise NotImplementedError

    def pre_prepare(self, txid: int) -> None:
        """Before the state of checkpoint ``txid`` is prepared (Storm's prePrepare)."""

    def pre_commit(self, txid: int) -> None:
        """Before checkpoint ``txid`` commits (Storm's preCommit)."""

    def pre_rollback(self) -> None:
        """Before the state rolls back to the last committed checkpoint (Storm's preRollback)."""
