"""Code replication between nimbuses: every nimbus holds every topology's code.

A standby can only take over if it holds the code of every topology, so nimbuses copy it from
each other (Storm's blobstore replication, ``docs/storm-model.md`` §4):

- **announce**: a nimbus that holds a topology's code says so with an ephemeral
  ``<root>/blobstore/<id>/<host:port>`` whose data is the bundle's checksum. The leader announces
  a new topology's code before writing ``/storms/<id>``, so standbys copy it during the submit.
- **sync**: a nimbus copies the code it lacks (of every topology under ``/storms`` and every one
  announced) from a nimbus that announced it, checks the checksum and announces its own copy.
  A standby syncs on every round of its loop and at once when a topology is announced: one
  kazoo ``ChildrenWatch`` on ``<root>/blobstore``, registered by :meth:`CodeReplication.start`,
  hands the news to the owner's loop (``on_announced``) and never downloads on kazoo's thread.
  A candidate leader syncs before it leads and steps aside while some code is missing.
- **wait_for_replicas**: at submit the leader waits until ``topology.min.replication.count``
  nimbuses hold the code, or ``topology.max.replication.wait.time.sec`` passed (-1: no limit;
  both keys read from the topology's merged configuration, as Storm does). When fewer nimbuses
  are alive than the count asks, it waits for the live ones only and says so in the log. The
  deadline is decided by the injected clock.

What is copied is listed in :data:`PARTS`: each part is served by every nimbus at
``/api/v1/topologies/<id>/<part>`` and stored by :meth:`CodeReplication._store`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from kazoo.exceptions import KazooException, NoNodeError

from gale.bundle import BundleError, checksum
from gale.clock import REAL_CLOCK
from gale.config_keys import Config
from gale.cluster_state import ClusterState
from gale.log import get_logger
from gale.nimbus.blobstore import BlobStore

log = get_logger("nimbus.replication")

#: The parts of a topology a nimbus copies from another, each served at
#: ``/api/v1/topologies/<id>/<part>``. ``code`` (the bundle) must match the announced checksum;
#: ``stormconf`` is the configuration the leader stored at submit, with the topology's transport
#: secret (that route needs the API token), so workers can run wherever the next leader places them.
#: To replicate another file, add its part here and store it in :meth:`CodeReplication._store`.
PARTS: tuple[str, ...] = ("code", "stormconf")

#: How often the submit path re-reads the replica count while it waits.
POLL_SECS = 0.2

#: ``fetch(address, topology_id, part) -> bytes``: one part from the nimbus at ``address``.
Fetch = Callable[[str, str, str], bytes]


def count_replicas(holders: Mapping[str, str], digest: str, address: str) -> int:
    """Nimbuses holding code with checksum ``digest``; this nimbus (``address``, which holds it)
    counts even before its own announcement is visible."""
    have = sum(1 for d in holders.values() if d == digest)
    return have + (0 if address in holders else 1)


class CodeReplication:
    """Copies of topology code on every nimbus.

    ::

        replication = CodeReplication(state, blobs, "host:6627", on_announced=loop.wake)
        replication.start()                         # the one /blobstore watch
        replication.announce(topology_id, digest)   # this nimbus holds the code
        replication.wait_for_replicas(topology_id, digest, config)   # leader, at submit
        replication.sync()                          # standby: copy what is missing
        replication.stop()

    :param state: the nimbus's cluster state (its kazoo client).
    :param blobs: this nimbus's code store.
    :param address: this nimbus's ``host:port`` (its identity under ``/blobstore/<id>``).
    :param headers: headers for nimbus-to-nimbus requests (the API token), called per download.
    :param fetch: downloads one part (default: HTTP from the other nimbus's API).
    :param on_announced: called on kazoo's thread when the announced topologies change; it must
        only hand the event to the owner's loop.
    :param clock: decides the replication wait's deadline (tests pass a simulated clock).
    """

    def __init__(
        self,
        state: ClusterState,
        blobs: BlobStore,
        address: str,
        *,
        headers: Callable[[], Mapping[str, str]] = dict,
        fetch: Fetch | None = None,
        on_announced: Callable[[], None] = lambda: None,
        clock: Any = REAL_CLOCK,
    ):
        self.state = state
        self.blobs = blobs
        self.address = address
        self._headers = headers
        self._fetch = fetch or self._http_fetch
        self._on_announced = on_announced
        self.clock = clock
        self._sync_lock = threading.Lock()  # the loop and a candidate leader may both sync
        self._watch = None
        self._stopped = False

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Register the ``/blobstore`` watch (once; it re-arms itself, also after a new session)."""
        if self._watch is None:
            self._watch = self.state.client.ChildrenWatch(self.state.layout.dir("blobstore"), self._watch_blobstore)

    def stop(self) -> None:
        """Stop handing events to the owner (the watch unregisters at its next event)."""
        self._stopped = True

    def _watch_blobstore(self, _children: list[str]) -> bool:
        if self._stopped:
            return False
        self._on_announced()
        return True

    # ---------------------------------------------------------------- announce

    def announce(self, topology_id: str, digest: str) -> None:
        """Say that this nimbus holds ``topology_id``'s code with checksum ``digest``."""
        self.state.set_blob_holder(topology_id, self.address, digest)

    def announce_all(self) -> None:
        """Announce every topology's code this nimbus holds (after a new ZooKeeper session)."""
        for tid in self.blobs.ids():
            digest = self.blobs.checksum(tid)
            if digest:
                self.announce(tid, digest)

    def holders(self, topology_id: str) -> dict[str, str]:
        """``host:port`` → checksum of every nimbus that announced the code."""
        return self.state.blob_holders(topology_id)

    # ---------------------------------------------------------------- wait (leader, submit)

    def wait_for_replicas(self, topology_id: str, digest: str, config: Config) -> int:
        """Wait until enough nimbuses hold the code or the wait's deadline passes (the injected
        clock decides); returns how many hold it. Never raises for too few copies: the topology
        runs from the leader's copy, as in Storm."""
        wanted = config.topology_min_replication_count
        max_wait = float(config.topology_max_replication_wait_time_sec)
        if wanted <= 1:
            return 1
        live = len(self.state.nimbus_summaries())
        if live < wanted:
            # waiting for nimbuses that do not exist only delays the submit; say so and go on
            log.warning("code-replication-below-minimum", topology=topology_id, live_nimbuses=live, wanted=wanted)
            wanted = max(1, live)
        deadline = self.clock.monotonic() + (max_wait if max_wait >= 0 else float("inf"))
        while True:
            have = count_replicas(self.holders(topology_id), digest, self.address)
            if have >= wanted:
                log.info("code-replicated", topology=topology_id, replicas=have)
                return have
            if self.clock.monotonic() >= deadline:
                log.warning("code-replication-timeout", topology=topology_id, replicas=have, wanted=wanted)
                return have
            self.clock.sleep(POLL_SECS)

    # ---------------------------------------------------------------- sync (standby, candidate)

    def sync(self) -> bool:
        """Copy every live or announced topology's code this nimbus lacks from a nimbus that
        holds it, and announce the copies. Returns False when the code of some topology under
        ``/storms`` could not be obtained (a candidate leader then steps aside)."""
        with self._sync_lock:
            try:
                storm_ids = set(self.state.storm_ids())
                # topologies being submitted are announced before /storms/<id> exists: copy them too
                announced = set(self.state.blob_topologies())
            except KazooException:
                return False
            ok = True
            for tid in sorted(storm_ids | announced):
                holders = self.holders(tid)
                digest = next(iter(set(holders.values())), None) if holders else None
                if self.blobs.has(tid, digest):
                    if self.address not in holders and digest is not None:
                        self.announce(tid, digest)
                    continue
                if not self._copy(tid, holders) and tid in storm_ids:
                    ok = False
            return ok

    def _copy(self, topology_id: str, holders: Mapping[str, str]) -> bool:
        for address, digest in sorted(holders.items()):
            if address == self.address:
                continue
            try:
                parts = {part: self._fetch(address, topology_id, part) for part in PARTS}
                if checksum(parts["code"]) != digest:
                    log.warning("code-sync-checksum-mismatch", topology=topology_id, source=address)
                    continue
                self._store(topology_id, parts)
                self.announce(topology_id, digest)
                log.info("code-synced", topology=topology_id, source=address)
                return True
            except (httpx.HTTPError, BundleError, OSError, NoNodeError) as exc:
                log.warning("code-sync-failed", topology=topology_id, source=address, error=str(exc))
        return False

    def _store(self, topology_id: str, parts: Mapping[str, bytes]) -> None:
        try:
            stored_conf = json.loads(parts["stormconf"])
        except ValueError:
            raise BundleError(f"the stored configuration of {topology_id} is not JSON") from None
        self.blobs.put_bundle(topology_id, parts["code"], stored_conf)

    def _http_fetch(self, address: str, topology_id: str, part: str) -> bytes:
        resp = httpx.get(f"http://{address}/api/v1/topologies/{topology_id}/{part}", timeout=30.0, trust_env=False,
                         headers=dict(self._headers()))
        resp.raise_for_status()
        return resp.content
