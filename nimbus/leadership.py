"""Nimbus leader election with a fencing epoch, as a kazoo-style recipe.

Every nimbus contends in a kazoo :class:`~kazoo.recipe.election.Election` (a lock) at
``<root>/leader-lock`` with its ``host:port`` as identifier::

    election = LeaderElection(client, layout, "host:6627", ready=replication.sync,
                              on_elected=take_office, on_deposed=leave_office)
    election.start()        # contend on a thread of its own until stop()
    election.is_leader()    # True only while leading on a CONNECTED session
    election.step_down()    # a fenced write failed: someone newer leads; contend again
    election.stop()

On winning the lock the recipe takes office:

1. ``ready()`` must return True (nimbus: it holds every topology's code). Otherwise it releases
   the lock at once, so another nimbus can lead, and contends again after ``retry_secs``.
2. It increments the leader epoch (``<root>/leader-epoch``, like Kafka's ``/controller_epoch``)
   with a version-checked set and hands the :class:`Term` — the epoch and the fence
   ``(epoch path, version)`` — to ``on_elected`` *before* :meth:`~LeaderElection.is_leader`
   turns True, so every write made as leader can be fenced on it: a deposed leader that has not
   noticed yet cannot overwrite its successor, whose election changed the version.
3. It leads until :meth:`~LeaderElection.stop`, :meth:`~LeaderElection.step_down` or the loss of
   the session that holds the lock; then ``is_leader()`` turns False, ``on_deposed(term)`` is
   called, and it contends again.

Connection states (kazoo's contract, :class:`~kazoo.protocol.states.KazooState`):

- SUSPENDED: the lock may already be gone. ``is_leader()`` is False until the connection is back,
  so nothing is done as leader meanwhile; leadership resumes if the same session reconnects.
- LOST: the session, and the lock node with it, is gone: leadership has ended. The recipe calls
  ``on_deposed`` and contends again with the new session.

The connection listener only sets an event; the election thread acts on it. The callbacks run on
the election thread (never on kazoo's), must not block for long, and may do ZooKeeper I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException
from kazoo.protocol.states import KazooState

from gale.clock import REAL_CLOCK
from gale.layout import Layout
from gale.log import get_logger

log = get_logger("nimbus.leadership")


@dataclass(frozen=True)
class Term:
    """One period of leadership."""

    epoch: int
    fence: tuple[str, int]  # (epoch znode, its version after this term's bump): ClusterState.fence
    elected_at: float  # the injected clock's wall-clock time


class LeaderElection:
    """Contend for leadership; lead while ready, with a fencing epoch per term.

    :param client: a started kazoo client (its session holds the lock).
    :param layout: where ``leader-lock`` and ``leader-epoch`` are.
    :param identifier: this contender's name (nimbus: ``host:port``), shown by :meth:`contenders`.
    :param ready: called after winning the lock; False steps aside for ``retry_secs``.
    :param on_elected: called with the new :class:`Term` before :meth:`is_leader` turns True.
    :param on_deposed: called with the ended :class:`Term` after :meth:`is_leader` turned False.
    :param retry_secs: pause before contending again after stepping aside while not ready.
    :param clock: the time of :attr:`Term.elected_at`.
    """

    #: pause before contending again after a term ended or the election failed
    RECONTEND_SECS = 1.0

    def __init__(
        self,
        client: KazooClient,
        layout: Layout,
        identifier: str,
        *,
        ready: Callable[[], bool] = lambda: True,
        on_elected: Callable[[Term], None] = lambda _term: None,
        on_deposed: Callable[[Term], None] = lambda _term: None,
        retry_secs: float = 30.0,
        clock: Any = REAL_CLOCK,
    ):
        self.client = client
        self.identifier = identifier
        self._epoch_path = layout.leader_epoch
        self._election = client.Election(layout.leader_lock, identifier=identifier)
        self._ready = ready
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self.retry_secs = retry_secs
        self.clock = clock
        self.term: Term | None = None  # the current or last term
        self._leading = False
        self._lost = threading.Event()  # the session ended, or step_down()/stop() was called
        self._stop = threading.Event()
        self._pause = self.RECONTEND_SECS  # before contending again; longer after stepping aside
        self._thread = threading.Thread(target=self._contend, name="nimbus-election", daemon=True)
        client.add_listener(self._session_watcher)

    # ---------------------------------------------------------------- paired verbs

    def start(self) -> None:
        """Contend for leadership on the election thread until :meth:`stop`."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Leave the election: end the term (if leading) and stop contending."""
        self._stop.set()
        self._lost.set()
        try:
            self._election.cancel()
        except KazooException:
            pass
        self._thread.join(timeout)

    def step_down(self) -> None:
        """End the current term at once and contend again (a fenced write found a newer epoch:
        another nimbus leads, or will). The election decides who leads next."""
        if self._leading:
            log.warning("nimbus-deposed", identifier=self.identifier, epoch=self.epoch)
        self._leading = False
        self._lost.set()

    # ---------------------------------------------------------------- queries

    def is_leader(self) -> bool:
        """Leading, and the session is CONNECTED (not while SUSPENDED)."""
        return self._leading and self.client.state == KazooState.CONNECTED

    @property
    def epoch(self) -> int | None:
        """The epoch of the current (or last) term."""
        return self.term.epoch if self.term is not None else None

    def contenders(self) -> list[str]:
        """Identifiers of the contenders, the lock holder first."""
        return self._election.contenders()

    def current_leader(self) -> str | None:
        """The lock holder's identifier, or None (no contender, or ZooKeeper unreachable)."""
        if self.client.state != KazooState.CONNECTED:
            return None  # a read would wait for the connection (callers are API requests)
        try:
            contenders = self.contenders()
        except KazooException:
            return None
        return contenders[0] if contenders else None

    # ---------------------------------------------------------------- the election thread

    def _session_watcher(self, state: KazooState) -> None:
        # kazoo's thread: only hand the news over
        if state == KazooState.LOST:
            self._lost.set()

    def _contend(self) -> None:
        while not self._stop.is_set():
            self._lost.clear()
            self._pause = self.RECONTEND_SECS
            try:
                self._election.run(self._hold_office)
            except Exception as exc:  # noqa: BLE001 - connection trouble: contend again
                log.warning("election-failed", error=f"{type(exc).__name__}: {exc}")
            self._stop.wait(self._pause)

    def _hold_office(self) -> None:
        if self._stop.is_set():
            return
        session = self.client.client_id
        if not self._ready():
            log.warning("leadership-declined-not-ready", identifier=self.identifier, retry_secs=self.retry_secs)
            self._pause = self.retry_secs
            return
        term = self._inner_bump_epoch()
        self.term = term
        try:
            self._on_elected(term)
            self._leading = True
            log.info("nimbus-elected", identifier=self.identifier, epoch=term.epoch)
            while not self._stop.is_set() and not self._lost.is_set() and self.client.client_id == session:
                self._lost.wait(1.0)
        finally:
            self._leading = False
            log.info("nimbus-leadership-ended", identifier=self.identifier, epoch=term.epoch,
                     lost=self._lost.is_set() and not self._stop.is_set())
            self._on_deposed(term)

    def _inner_bump_epoch(self) -> Term:
        path = self._epoch_path
        self.client.ensure_path(path)
        while True:
            data, stat = self.client.get(path)
            try:
                current = int(data.decode() or 0)
            except ValueError:
                current = 0
            try:
                new_stat = self.client.set(path, str(current + 1).encode(), version=stat.version)
            except BadVersionError:
                continue  # someone else bumped it between our read and write: read again
            return Term(epoch=current + 1, fence=(path, new_stat.version), elected_at=self.clock.time())
