"""Reading and writing Gale's cluster state in ZooKeeper (typed records, Storm's layout:
``docs/storm-model.md`` §2).

A thin shell over kazoo: every path comes from :class:`gale.layout.Layout`, every payload is a
:mod:`gale.records` record. Single-record readers return ``None`` for a missing node and raise
:class:`~gale.errors.CorruptRecordError` for a malformed one; bulk readers skip malformed nodes
and hand each one to ``on_corrupt`` (default: a structured warning), so one bad znode never stops
a daemon loop.

Reads at scale: a bulk read lists a directory and sends every request at once (kazoo's async
calls, pipelined on the one connection), so reading a hundred assignments costs about one round
trip, not a hundred. Decoded records are cached by the znode's ``mzxid`` (the transaction that last
changed it): an unchanged znode is not decoded again. Records that rarely change and are re-read
often — assignments and storm bases, by every supervisor every 10 s and every worker every
``task.refresh.poll.secs`` — are re-read stat first: only the stat of an unchanged znode crosses
the network. Cached records are shared between callers: never change one in place
(records are changed with ``model_copy``).

Fencing (nimbus HA): when :attr:`ClusterState.fence` is set to ``(path, version)``, writes to
``storms`` and ``assignments`` are ZooKeeper multi-ops that first check that the epoch znode still
has that version, so a deposed leader that has not noticed yet cannot overwrite its successor.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import ZnodeStat

from gale.errors import CorruptRecordError, GaleError
from gale.layout import ERRORS_KEPT, LAST_ERROR_SUFFIX, TOP_LEVEL, Layout, error_sequence
from gale.log import get_logger
from gale.records import (
    Assignment,
    ErrorInfo,
    LogConfig,
    NimbusSummary,
    Record,
    StormBase,
    SupervisorInfo,
    WorkerHeartbeat,
)

R = TypeVar("R", bound=Record)
log = get_logger("cluster_state")

WatchFn = Callable[..., object] | None

#: the largest workerbeat written as is (ZooKeeper's jute.maxbuffer is 1,048,575 bytes)
WORKERBEAT_MAX_BYTES = 900_000


class FencedError(GaleError):
    """A fenced write found that leadership moved on (the epoch znode changed)."""


def _default_on_corrupt(error: CorruptRecordError) -> None:
    log.warning("corrupt-znode", path=error.path, problem=error.problem)


class ClusterState:
    def __init__(
        self,
        client: KazooClient,
        layout: Layout | None = None,
        *,
        on_corrupt: Callable[[CorruptRecordError], None] = _default_on_corrupt,
    ):
        self.client = client
        self.layout = layout or Layout()
        self.on_corrupt = on_corrupt
        self.fence: tuple[str, int] | None = None
        #: path → (mzxid, decoded record): records are decoded once per change of their znode
        self._decoded: dict[str, tuple[int, Record]] = {}

    # ------------------------------------------------------------------ primitives

    def ensure_layout(self) -> None:
        """Create the root and its top-level directories (idempotent)."""
        for name in TOP_LEVEL:
            self.client.ensure_path(self.layout.dir(name))

    def _read(self, cls: type[R], path: str, watch: WatchFn = None, stat_first: bool = False) -> R | None:
        """The record at ``path`` (None if missing). ``stat_first``: when a decoded copy is cached,
        ask for the znode's stat only and fetch the data only if it changed (records that rarely
        change and are read often: assignments, storm bases)."""
        cached = self._decoded.get(path) if stat_first else None
        if cached is not None and type(cached[1]) is cls:
            stat = self.client.exists(path, watch=watch)
            if stat is None:
                self._decoded.pop(path, None)
                return None
            if stat.mzxid == cached[0]:
                return cached[1]  # type: ignore[return-value]
            watch = None  # set by exists already
        try:
            data, stat = self.client.get(path, watch=watch)
        except NoNodeError:
            if watch is not None:
                self.client.exists(path, watch=watch)
            self._decoded.pop(path, None)
            return None
        return self._decode(cls, path, data, stat)

    def _decode(self, cls: type[R], path: str, data: bytes, stat: ZnodeStat) -> R:
        cached = self._decoded.get(path)
        if cached is not None and cached[0] == stat.mzxid and type(cached[1]) is cls:
            return cached[1]  # type: ignore[return-value]
        rec = cls.decode(data, path)
        self._decoded[path] = (stat.mzxid, rec)
        return rec

    def _children(self, path: str, watch: WatchFn = None) -> list[str]:
        try:
            return sorted(self.client.get_children(path, watch=watch))
        except NoNodeError:
            if watch is not None:
                self.client.exists(path, watch=watch)
            return []

    def _read_all(self, cls: type[R], directory: str, watch: WatchFn = None, data_watch: WatchFn = None,
                  stat_first: bool = False) -> dict[str, R]:
        """Every child of ``directory`` as a record (malformed ones skipped and reported).
        ``watch`` is set on the directory's children, ``data_watch`` on each child's data;
        ``stat_first`` as for :meth:`_read_many`."""
        names = self._children(directory, watch)
        prefix = directory.rstrip("/") + "/"
        # forget cached records of children that are gone
        for path in [p for p in self._decoded if p.startswith(prefix) and "/" not in p[len(prefix):]]:
            if path[len(prefix):] not in names:
                del self._decoded[path]
        return self._read_many(cls, {name: posixpath.join(directory, name) for name in names}, data_watch, stat_first)

    def _read_many(self, cls: type[R], paths: dict[str, str], watch: WatchFn = None,
                   stat_first: bool = False) -> dict[str, R]:
        """The records at ``paths`` (key → path), every request in flight at once; missing
        znodes are left out, malformed ones reported to ``on_corrupt`` and left out.

        ``stat_first``: for paths with a cached record, ask only for the znode's stat, then fetch
        the data of those that changed (a second round trip, for them only). Re-reading a hundred
        unchanged assignments then moves a hundred stats, not a hundred records."""
        first = []
        for key, path in paths.items():
            cached = self._decoded.get(path) if stat_first else None
            if cached is not None and type(cached[1]) is cls:
                first.append((key, path, self.client.exists_async(path, watch=watch), True))
            else:
                first.append((key, path, self.client.get_async(path, watch=watch), False))
        out: dict[str, R] = {}
        second = []
        for key, path, result, stat_only in first:
            try:
                got = result.get()
            except NoNodeError:
                got = None
            if got is None:
                self._decoded.pop(path, None)
                continue
            if stat_only:
                cached = self._decoded.get(path)
                if cached is not None and cached[0] == got.mzxid:
                    out[key] = cached[1]  # type: ignore[assignment]
                else:
                    second.append((key, path, self.client.get_async(path)))
                continue
            self._decode_into(out, cls, key, path, *got)
        for key, path, result in second:
            try:
                data, stat = result.get()
            except NoNodeError:
                self._decoded.pop(path, None)
                continue
            self._decode_into(out, cls, key, path, data, stat)
        return out

    def _decode_into(self, out: dict[str, R], cls: type[R], key: str, path: str, data: bytes, stat: ZnodeStat) -> None:
        try:
            out[key] = self._decode(cls, path, data, stat)
        except CorruptRecordError as err:
            self.on_corrupt(err)

    def _set(self, path: str, data: bytes, *, fenced: bool = False) -> None:
        """Set a persistent node, creating it (and parents) when missing."""
        if fenced and self.fence is not None:
            self._fenced_set(path, data)
            return
        try:
            self.client.set(path, data)
        except NoNodeError:
            try:
                self.client.create(path, data, makepath=True)
            except NodeExistsError:
                self.client.set(path, data)

    def _fenced_set(self, path: str, data: bytes) -> None:
        assert self.fence is not None
        epoch_path, epoch_version = self.fence
        exists = self.client.exists(path) is not None
        if not exists:
            self.client.ensure_path(posixpath.dirname(path))
        tx = self.client.transaction()
        tx.check(epoch_path, epoch_version)
        if exists:
            tx.set_data(path, data)
        else:
            tx.create(path, data)
        results = tx.commit()
        for result in results:
            if isinstance(result, BadVersionError):
                raise FencedError(f"write to {path} refused: leadership epoch {epoch_path} changed")
            if isinstance(result, NodeExistsError | NoNodeError):
                # Raced with another writer creating/deleting the node: retry once plainly fenced.
                return self._fenced_set(path, data)
            if isinstance(result, Exception):
                raise result

    def _delete(self, path: str, *, recursive: bool = True, fenced: bool = False) -> None:
        if fenced and self.fence is not None:
            epoch_path, epoch_version = self.fence
            tx = self.client.transaction()
            tx.check(epoch_path, epoch_version)
            tx.delete(path)
            results = tx.commit()
            if any(isinstance(r, BadVersionError) for r in results):
                raise FencedError(f"delete of {path} refused: leadership epoch changed")
            return
        try:
            self.client.delete(path, recursive=recursive)
        except NoNodeError:
            pass
        except NotEmptyError:
            # children appeared during a recursive delete (a late worker heartbeat): try again
            self.client.delete(path, recursive=True)

    def _set_ephemeral(self, path: str, data: bytes) -> None:
        try:
            self.client.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            stat = self.client.exists(path)
            if stat is not None and stat.ephemeralOwner not in (0, self.client.client_id[0]):
                # left by our own previous session (expired but not yet reaped): replace it
                self._delete(path, recursive=False)
                self.client.create(path, data, ephemeral=True, makepath=True)
            else:
                self.client.set(path, data)

    # ------------------------------------------------------------------ storms

    def storm_base(self, topology_id: str, watch: WatchFn = None) -> StormBase | None:
        return self._read(StormBase, self.layout.storm(topology_id), watch, stat_first=True)

    def storm_bases(self) -> dict[str, StormBase]:
        return self._read_all(StormBase, self.layout.storms_dir, stat_first=True)

    def storm_ids(self, watch: WatchFn = None) -> list[str]:
        return self._children(self.layout.storms_dir, watch)

    def set_storm_base(self, topology_id: str, base: StormBase) -> None:
        self._set(self.layout.storm(topology_id), base.encode(), fenced=True)

    def remove_storm_base(self, topology_id: str) -> None:
        self._delete(self.layout.storm(topology_id), recursive=False, fenced=True)

    # ------------------------------------------------------------------ assignments

    def assignment(self, topology_id: str, watch: WatchFn = None) -> Assignment | None:
        return self._read(Assignment, self.layout.assignment(topology_id), watch, stat_first=True)

    def assignments(self, watch: WatchFn = None, data_watch: WatchFn = None) -> dict[str, Assignment]:
        """Every assignment; ``watch`` fires when one is added or removed, ``data_watch`` when one
        read here changes."""
        return self._read_all(Assignment, self.layout.assignments_dir, watch, data_watch, stat_first=True)

    def set_assignment(self, topology_id: str, assignment: Assignment) -> None:
        self._set(self.layout.assignment(topology_id), assignment.encode(), fenced=True)

    def remove_assignment(self, topology_id: str) -> None:
        self._delete(self.layout.assignment(topology_id), recursive=False, fenced=True)

    # ------------------------------------------------------------------ supervisors

    def supervisor_ids(self, watch: WatchFn = None) -> list[str]:
        return self._children(self.layout.supervisors_dir, watch)

    def supervisor_info(self, supervisor_id: str) -> SupervisorInfo | None:
        return self._read(SupervisorInfo, self.layout.supervisor(supervisor_id))

    def supervisor_infos(self) -> dict[str, SupervisorInfo]:
        return self._read_all(SupervisorInfo, self.layout.supervisors_dir)

    def set_supervisor_info(self, supervisor_id: str, info: SupervisorInfo) -> None:
        """Write the supervisor's ephemeral node (re-created after session expiry)."""
        self._set_ephemeral(self.layout.supervisor(supervisor_id), info.encode())

    def remove_supervisor_info(self, supervisor_id: str) -> None:
        self._delete(self.layout.supervisor(supervisor_id), recursive=False)

    # ------------------------------------------------------------------ workerbeats

    def setup_heartbeats(self, topology_id: str) -> None:
        """Nimbus creates ``/workerbeats/<id>`` with no data at submit; workers create children."""
        self.client.ensure_path(self.layout.workerbeats_dir(topology_id))

    def teardown_heartbeats(self, topology_id: str) -> None:
        self._delete(self.layout.workerbeats_dir(topology_id))

    def heartbeat_topologies(self) -> list[str]:
        return self._children(self.layout.workerbeats_root)

    def worker_heartbeat(self, topology_id: str, node: str, port: int) -> WorkerHeartbeat | None:
        return self._read(WorkerHeartbeat, self.layout.workerbeat(topology_id, node, port))

    def worker_heartbeats(self, topology_id: str) -> dict[tuple[str, int], WorkerHeartbeat]:
        out: dict[tuple[str, int], WorkerHeartbeat] = {}
        directory = self.layout.workerbeats_dir(topology_id)
        for name, hb in self._read_all(WorkerHeartbeat, directory).items():
            try:
                out[self.layout.parse_workerbeat_name(name)] = hb
            except ValueError as exc:
                self.on_corrupt(CorruptRecordError(posixpath.join(directory, name), str(exc)))
        return out

    def worker_heartbeats_of(self, topology_id: str, slots: list[tuple[str, int]]) -> dict[tuple[str, int], WorkerHeartbeat]:
        """The workerbeats of some slots of a topology (missing ones left out), read at once."""
        paths = {slot: self.layout.workerbeat(topology_id, slot[0], slot[1]) for slot in slots}
        by_key = self._read_many(WorkerHeartbeat, {f"{n}-{p}": path for (n, p), path in paths.items()})
        return {slot: by_key[f"{slot[0]}-{slot[1]}"] for slot in slots if f"{slot[0]}-{slot[1]}" in by_key}

    def set_worker_heartbeat(self, topology_id: str, node: str, port: int, hb: WorkerHeartbeat,
                             max_bytes: int = WORKERBEAT_MAX_BYTES) -> None:
        """Write a worker's stats. A beat larger than ``max_bytes`` (a worker with thousands of
        executors) keeps only all-time figures, then only which executors run: ZooKeeper drops
        the connection of a request over its ``jute.maxbuffer``."""
        path = self.layout.workerbeat(topology_id, node, port)
        data = hb.encode()
        if len(data) > max_bytes:
            data = trimmed_heartbeat(hb, max_bytes)
            log.warning("workerbeat-trimmed", path=path, bytes=len(hb.encode()), max_bytes=max_bytes,
                        now_bytes=len(data), executors=len(hb.executor_stats))
        try:
            self.client.set(path, data)
        except NoNodeError:
            # Only nimbus creates the topology directory; a worker whose topology was removed
            # must not resurrect it, so makepath is off here.
            try:
                self.client.create(path, data)
            except NodeExistsError:
                self.client.set(path, data)

    def remove_worker_heartbeat(self, topology_id: str, node: str, port: int) -> None:
        self._delete(self.layout.workerbeat(topology_id, node, port), recursive=False)

    # ------------------------------------------------------------------ errors

    def report_error(self, topology_id: str, component: str, info: ErrorInfo) -> str:
        """Add an error as a sequential ``e<seq>`` child and keep only the 10 newest.

        Safe with concurrent reporters: each trims only children that are not among the 10
        highest sequence numbers it sees, and sequence numbers only grow, so a child outside the
        10 newest in one listing is outside them forever; a NoNode during the trim is another
        reporter having deleted it first.
        """
        data = info.encode()
        created = self.client.create(
            self.layout.error_prefix(topology_id, component), data, sequence=True, makepath=True
        )
        self._set(self.layout.last_error(topology_id, component), data)
        directory = self.layout.component_errors_dir(topology_id, component)
        children = [(error_sequence(c), c) for c in self._children(directory)]
        numbered = sorted((seq, c) for seq, c in children if seq is not None)
        for _, name in numbered[:-ERRORS_KEPT]:
            try:
                self.client.delete(posixpath.join(directory, name))
            except NoNodeError:
                pass
        return created

    def errors(self, topology_id: str, component: str) -> list[ErrorInfo]:
        """The kept errors of a component, newest first."""
        directory = self.layout.component_errors_dir(topology_id, component)
        recs = self._read_all(ErrorInfo, directory)
        ordered = sorted(
            ((error_sequence(name) or -1, rec) for name, rec in recs.items() if error_sequence(name) is not None),
            key=lambda x: x[0],
            reverse=True,
        )
        return [rec for _, rec in ordered]

    def last_error(self, topology_id: str, component: str) -> ErrorInfo | None:
        try:
            return self._read(ErrorInfo, self.layout.last_error(topology_id, component))
        except CorruptRecordError as err:
            self.on_corrupt(err)
            return None

    def error_components(self, topology_id: str) -> list[str]:
        names = self._children(self.layout.errors_dir(topology_id))
        return sorted(
            self.layout.component_from_errors_name(n) for n in names if not n.endswith(LAST_ERROR_SUFFIX)
        )

    def error_topologies(self) -> list[str]:
        return self._children(self.layout.errors_root)

    def teardown_errors(self, topology_id: str) -> None:
        self._delete(self.layout.errors_dir(topology_id))

    # ------------------------------------------------------------------ nimbuses

    def set_nimbus_summary(self, host_port: str, summary: NimbusSummary) -> None:
        self._set_ephemeral(self.layout.nimbus(host_port), summary.encode())

    def nimbus_summaries(self) -> dict[str, NimbusSummary]:
        return self._read_all(NimbusSummary, self.layout.nimbuses_dir)

    def remove_nimbus_summary(self, host_port: str) -> None:
        self._delete(self.layout.nimbus(host_port), recursive=False)

    # ------------------------------------------------------------------ code replicas

    def set_blob_holder(self, topology_id: str, host_port: str, checksum: str) -> None:
        self._set_ephemeral(self.layout.blob_holder(topology_id, host_port), checksum.encode())

    def blob_holders(self, topology_id: str, watch: WatchFn = None) -> dict[str, str]:
        directory = self.layout.blobstore_dir(topology_id)
        out = {}
        for name in self._children(directory, watch):
            try:
                data, _ = self.client.get(posixpath.join(directory, name))
            except NoNodeError:
                continue
            out[name] = data.decode(errors="replace")
        return out

    def blob_topologies(self) -> list[str]:
        return self._children(self.layout.dir("blobstore"))

    def teardown_blobs(self, topology_id: str) -> None:
        self._delete(self.layout.blobstore_dir(topology_id))

    # ------------------------------------------------------------------ log levels

    def log_config(self, topology_id: str, watch: WatchFn = None) -> LogConfig | None:
        return self._read(LogConfig, self.layout.logconfig(topology_id), watch)

    def set_log_config(self, topology_id: str, config: LogConfig) -> None:
        self._set(self.layout.logconfig(topology_id), config.encode(), fenced=True)

    def log_config_topologies(self) -> list[str]:
        return self._children(self.layout.logconfigs_dir)

    def teardown_log_config(self, topology_id: str) -> None:
        self._delete(self.layout.logconfig(topology_id), recursive=False)


_WINDOWED = ("emitted", "transferred", "acked", "failed", "complete_ms_avg", "executed", "process_ms_avg",
             "execute_ms_avg")


def trimmed_heartbeat(hb: WorkerHeartbeat, max_bytes: int) -> bytes:
    """``hb`` encoded within ``max_bytes`` if it can be: all-time figures only, else executors only."""
    all_time = {key: st.model_copy(update={m: {w: v for w, v in getattr(st, m).items() if w == ":all-time"}
                                            for m in _WINDOWED})
                for key, st in hb.executor_stats.items()}
    data = hb.model_copy(update={"executor_stats": all_time}).encode()
    if len(data) <= max_bytes:
        return data
    bare = {key: st.model_copy(update={**{m: {} for m in _WINDOWED}, "extra": {}, "details": {}})
            for key, st in hb.executor_stats.items()}
    return hb.model_copy(update={"executor_stats": bare}).encode()
