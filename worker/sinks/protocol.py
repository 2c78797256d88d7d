"""The sink protocol, pure: what a transactional sink task does with its store at each checkpoint
action, and at its start. No I/O; :mod:`gale.worker.sinks.participant` performs the steps.

A sink task writes the records of checkpoint ``m`` in one transaction of its store, named by the
topology, the component, the task index and ``m`` (:class:`SinkName`): *prepared* (durable, not
visible) at PREPARE(``m``), *committed* (visible) at COMMIT(``m``), *aborted* when the checkpoint is
abandoned. The store is told which transactions of the task are prepared and neither committed nor
aborted (``prepared``); everything below decides from those txids and the checkpoint action alone.

What each action means for a prepared transaction ``p`` of the task (docs/sinks.md):

=================== =============================================== ==============================
action              the coordinator's record then says               so
=================== =============================================== ==============================
PREPARE(m)          ``m - 1`` committed, ``m`` being prepared         commit ``p < m``; abort
                                                                     ``p >= m`` (an abandoned
                                                                     attempt of a reused txid);
                                                                     prepare ``m``
COMMIT(m)           ``m`` will commit (past the commit point)         commit ``p <= m``
ROLLBACK(t)         ``t`` abandoned, ``c = t - 1`` committed (both    commit ``p <= c``, abort
                    guarantees: Storm's ROLLBACK(n); the exactly-once ``p > c`` (an abandoned
                    record says ROLLING_BACK(``c``))                  attempt); drop the records
                                                                     not yet prepared
INITSTATE(n)        ``n`` committed (at-least-once recovery)          commit ``p <= n``, abort
                                                                     ``p > n``
the task starts     the record read from the state provider           commit ``p <= committed``;
                                                                     abort the others, except the
                                                                     checkpoint in flight (it may
                                                                     still commit: its COMMIT or
                                                                     ROLLBACK will come)
=================== =============================================== ==============================

A txid is reused after a rollback (the next checkpoint after ROLLBACK to ``c`` is ``c + 1`` again),
which is why PREPARE aborts what it finds at or above its own txid before preparing: every bolt
task acts on a ROLLBACK before the coordinator moves on, so such a leftover is always an abandoned
attempt. Steps come out in txid order, commits before aborts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gale.worker.state.coordinator import COMMIT, INITSTATE, PREPARE, ROLLBACK

#: phases of the coordinator's record in which its txid is in flight and may still commit
IN_FLIGHT = ("PAUSING", "PREPARING")


@dataclass(frozen=True)
class Step:
    """``op``: ``commit`` / ``abort`` (a prepared transaction), ``prepare`` (the task's records of
    ``txid``), ``discard`` (drop the records not yet prepared)."""

    op: str
    txid: int


def _resolve(prepared: Iterable[int], committed: int, keep: int | None = None) -> list[Step]:
    done = sorted(set(prepared))
    return ([Step("commit", p) for p in done if p <= committed]
            + [Step("abort", p) for p in done if p > committed and p != keep])


def on_action(action: str, txid: int, prepared: Iterable[int]) -> list[Step]:
    """The steps for checkpoint ``action`` of ``txid``, given the task's prepared txids."""
    prepared = sorted(set(prepared))
    if action == PREPARE:
        return ([Step("commit", p) for p in prepared if p < txid]
                + [Step("abort", p) for p in prepared if p >= txid] + [Step("prepare", txid)])
    if action == COMMIT:
        return [Step("commit", p) for p in prepared if p <= txid]
    if action == ROLLBACK:
        # both coordinators send ROLLBACK(c + 1) when they go back to c (gale.worker.state.epochs,
        # .coordinator): c + 1 is the abandoned attempt, whatever a task prepared for it
        return _resolve(prepared, txid - 1) + [Step("discard", txid)]
    if action == INITSTATE:
        return _resolve(prepared, txid)
    raise ValueError(f"unknown checkpoint action {action!r}")


def on_start(prepared: Iterable[int], record: dict | None) -> list[Step]:
    """The steps of a task that (re)starts, from the coordinator's record (``<prefix>/__state``,
    either guarantee's; None: no checkpoint yet)."""
    committed, in_flight = committed_of(record)
    return _resolve(prepared, committed, keep=in_flight)


def committed_of(record: dict | None) -> tuple[int, int | None]:
    """(the last committed txid, the txid in flight that may still commit or None) of a record."""
    if not record:
        return 0, None
    txid, phase = record.get("txid"), record.get("state")
    if not isinstance(txid, int) or not isinstance(phase, str):
        raise ValueError(f"checkpoint state record is malformed: {record!r}")
    if phase in IN_FLIGHT:
        return txid - 1, txid
    return txid, None  # COMMITTED, COMMITTING (will commit), ROLLING_BACK (the restored one)


# ------------------------------------------------------------------------------ names


_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


@dataclass(frozen=True)
class SinkName:
    """Who a sink task is, in every store: the topology's name (not its id: a topology submitted
    again under the same name finds what it left), the component, the task's index and the
    component's task count. Transactions are named ``gale:<topology>:<component>:<index>:<txid>``."""

    topology: str
    component: str
    index: int
    tasks: int

    @property
    def task_prefix(self) -> str:
        return f"{self.component_prefix}{self.index}:"

    @property
    def component_prefix(self) -> str:
        return f"gale:{_SAFE.sub('_', self.topology)}:{_SAFE.sub('_', self.component)}:"

    def txn(self, txid: int) -> str:
        return f"{self.task_prefix}{txid}"

    def parse(self, name: str) -> tuple[int, int] | None:
        """(task index, txid) of a transaction name of this component, else None."""
        if not name.startswith(self.component_prefix):
            return None
        index, _, txid = name[len(self.component_prefix):].partition(":")
        if not (index.isdigit() and txid.isdigit()):
            return None
        return int(index), int(txid)

    def owns(self, index: int) -> bool:
        """This task resolves the transactions of ``index``: its own, and — task 0 — those of task
        indexes the component no longer has (its task count went down in a rebalance)."""
        return index == self.index or (self.index == 0 and index >= self.tasks)

    def mine(self, names: Iterable[str]) -> dict[int, list[str]]:
        """txid → the names of this task's transactions among ``names``."""
        out: dict[int, list[str]] = {}
        for name in names:
            parsed = self.parse(name)
            if parsed is not None and self.owns(parsed[0]):
                out.setdefault(parsed[1], []).append(name)
        return out
