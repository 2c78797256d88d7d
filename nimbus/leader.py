"""Nimbus leadership: election, the leader epoch (fencing) and code replication between nimbuses.

Every nimbus contends in a kazoo :class:`~kazoo.recipe.election.Election` at ``<root>/leader-lock``
with its ``host:port`` as identifier. On winning it:

1. makes sure it holds the code of every topology (copying missing bundles from the nimbuses that
   hold them, listed under ``<root>/blobstore/<id>``); if it cannot, it steps down and retries later;
2. increments the leader epoch (``<root>/leader-epoch``, like Kafka's ``/controller_epoch``) and
   fences its writes to ``storms``/``assignments`` on that znode's version, so a deposed leader that
   has not noticed yet cannot overwrite its successor;
3. schedules until it stops or its ZooKeeper session is lost.

While the connection is SUSPENDED the leader does not act (kazoo's contract: do not assume you
still hold the lock); after LOST it contends again with a new session.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import httpx
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KazooState

from gale.bundle import BundleError, checksum
from gale.log import get_logger
from gale.nimbus.client import fetch_stored_conf

if TYPE_CHECKING:  # pragma: no cover
    from gale.nimbus.daemon import Nimbus

log = get_logger("nimbus.leader")


class Leadership:
    def __init__(self, nimbus: Nimbus):
        self.nimbus = nimbus
        self.client = nimbus.client
        self.layout = nimbus.layout
        self.election = self.client.Election(self.layout.leader_lock, identifier=nimbus.address)
        self._leading = False
        self._lost = threading.Event()
        self._stop = threading.Event()
        self.epoch: int | None = None
        self.elected_at: float | None = None
        self._thread = threading.Thread(target=self._contend, name="nimbus-election", daemon=True)
        self.client.add_listener(self._on_state)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._lost.set()
        try:
            self.election.cancel()
        except Exception:  # noqa: BLE001
            pass
        self._thread.join(5)

    def is_leader(self) -> bool:
        return self._leading and self.client.state == KazooState.CONNECTED

    def current_leader(self) -> str | None:
        try:
            contenders = self.election.contenders()
        except KazooException:
            return None
        return contenders[0] if contenders else None

    def _on_state(self, state: KazooState) -> None:
        if state == KazooState.LOST:
            self._lost.set()

    def deposed(self) -> None:
        """A fenced write failed: someone else holds a newer epoch. Stop acting at once and
        contend again (the election decides who leads)."""
        if self._leading:
            log.warning("nimbus-deposed", address=self.nimbus.address, epoch=self.epoch)
        self._leading = False
        self._lost.set()

    # ---------------------------------------------------------------- election

    def _contend(self) -> None:
        while not self._stop.is_set():
            self._lost.clear()
            try:
                self.election.run(self._lead)
            except Exception as exc:  # noqa: BLE001 - connection trouble: contend again
                log.warning("election-failed", error=f"{type(exc).__name__}: {exc}")
            self._leading = False
            if not self._stop.is_set():
                time.sleep(1.0)

    def _lead(self) -> None:
        if self._stop.is_set():
            return
        if not self.sync_code(for_leadership=True):
            log.warning("leadership-declined-missing-code", address=self.nimbus.address)
            self._stop.wait(float(self.nimbus.conf["nimbus.code.sync.freq.secs"]) / 4)
            return
        self.epoch = self._bump_epoch()
        self.elected_at = time.time()
        self._leading = True
        log.info("nimbus-elected", address=self.nimbus.address, epoch=self.epoch)
        try:
            self.nimbus.register()
        except KazooException:
            pass
        if self.nimbus.metrics is not None:
            self.nimbus.metrics.elections.inc()
        self.nimbus.wakeup.set()
        while not self._stop.is_set() and not self._lost.is_set():
            self._lost.wait(1.0)
        self._leading = False
        self.nimbus.state.fence = None
        log.info("nimbus-leadership-ended", address=self.nimbus.address, lost=self._lost.is_set())

    def _bump_epoch(self) -> int:
        path = self.layout.leader_epoch
        self.client.ensure_path(path)
        while True:
            data, stat = self.client.get(path)
            try:
                current = int(data.decode() or 0)
            except ValueError:
                current = 0
            try:
                new_stat = self.client.set(path, str(current + 1).encode(), version=stat.version)
            except KazooException:
                continue
            self.nimbus.state.fence = (path, new_stat.version)
            return current + 1

    # ---------------------------------------------------------------- code replication

    def holders(self, topology_id: str) -> dict[str, str]:
        return self.nimbus.state.blob_holders(topology_id)

    def replicate(self, topology_id: str, digest: str) -> None:
        """Wait until ``topology.min.replication.count`` nimbuses hold the code (bounded wait)."""
        wanted = int(self.nimbus.conf["topology.min.replication.count"])
        max_wait = float(self.nimbus.conf["topology.max.replication.wait.time.sec"])
        if wanted <= 1:
            return
        live = len(self.nimbus.state.nimbus_summaries())
        if live < wanted:
            # waiting for nimbuses that do not exist only delays the submit; say so and go on
            log.warning("code-replication-below-minimum", topology=topology_id, live_nimbuses=live, wanted=wanted)
            wanted = max(1, live)
        deadline = time.time() + (max_wait if max_wait >= 0 else 1e9)
        while True:
            have = sum(1 for d in self.holders(topology_id).values() if d == digest)
            have += 0 if self.nimbus.address in self.holders(topology_id) else 1
            if have >= wanted:
                log.info("code-replicated", topology=topology_id, replicas=have)
                return
            if time.time() >= deadline:
                log.warning("code-replication-timeout", topology=topology_id, replicas=have, wanted=wanted)
                return
            time.sleep(0.2)

    def sync_code(self, for_leadership: bool = False) -> bool:
        """Copy every live topology's code this nimbus lacks from a nimbus that holds it.

        Returns False when some code could not be obtained (a candidate leader then steps down).
        """
        ok = True
        state = self.nimbus.state
        try:
            storm_ids = set(state.storm_ids())
            # topologies being submitted are announced under /blobstore before /storms: copy them
            # too (the watch wakes this nimbus's loop as soon as a new one appears)
            announced = set(self.client.get_children(self.layout.dir("blobstore"),
                                                     watch=lambda _e: self.nimbus.wakeup.set()))
        except KazooException:
            return False
        for tid in sorted(storm_ids | announced):
            holders = self.holders(tid)
            digest = next(iter(set(holders.values())), None) if holders else None
            if self.nimbus.blobs.has(tid, digest):
                if self.nimbus.address not in holders and digest is not None:
                    state.set_blob_holder(tid, self.nimbus.address, digest)
                continue
            if not self._download(tid, holders) and tid in storm_ids:
                ok = False
        return ok

    def _download(self, topology_id: str, holders: dict[str, str]) -> bool:
        for address, digest in sorted(holders.items()):
            if address == self.nimbus.address:
                continue
            try:
                resp = httpx.get(f"http://{address}/api/v1/topologies/{topology_id}/code", timeout=30.0,
                                 headers=self.nimbus.internal_headers())
                resp.raise_for_status()
                data = resp.content
                if checksum(data) != digest:
                    log.warning("code-sync-checksum-mismatch", topology=topology_id, source=address)
                    continue
                # the stored configuration carries the topology secret: copy it with the code
                self.nimbus.blobs.put_bundle(topology_id, data,
                                             fetch_stored_conf(address, topology_id, self.nimbus.internal_headers()))
                self.nimbus.state.set_blob_holder(topology_id, self.nimbus.address, digest)
                log.info("code-synced", topology=topology_id, source=address)
                return True
            except (httpx.HTTPError, BundleError, OSError, NoNodeError) as exc:
                log.warning("code-sync-failed", topology=topology_id, source=address, error=str(exc))
        return False
