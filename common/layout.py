"""Storm's ZooKeeper layout (``docs/storm-model.md`` §2), built in one place under a configurable root.

Nothing else in Gale formats a ZooKeeper path. Component ids are URL-encoded in paths as Storm
does, so a component named ``a/b`` cannot escape its directory.

::

    <root>/storms/<topology-id>                       StormBase
    <root>/assignments/<topology-id>                  Assignment
    <root>/supervisors/<supervisor-id>                SupervisorInfo (ephemeral)
    <root>/workerbeats/<topology-id>/<node>-<port>    WorkerHeartbeat
    <root>/errors/<topology-id>/<component>/e<seq>    ErrorInfo (10 newest kept)
    <root>/errors/<topology-id>/<component>-last-error
    <root>/nimbuses/<host:port>                       NimbusSummary (ephemeral)
    <root>/leader-lock                                nimbus leader election
    <root>/leader-epoch                               increases at every election (fencing)
    <root>/blobstore/<topology-id>/<host:port>        which nimbus holds a topology's code
    <root>/logconfigs/<topology-id>                   LogConfig: timed logger levels its workers follow
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from urllib.parse import quote, unquote

TOP_LEVEL = ("storms", "assignments", "supervisors", "workerbeats", "errors", "nimbuses", "blobstore", "logconfigs")
ERROR_PREFIX = "e"
LAST_ERROR_SUFFIX = "-last-error"
ERRORS_KEPT = 10


def _segment(name: str, what: str) -> str:
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"invalid {what} {name!r} for a znode name")
    return name


@dataclass(frozen=True)
class Layout:
    root: str = "/storm"

    def __post_init__(self) -> None:
        if not self.root.startswith("/"):
            raise ValueError(f"ZooKeeper root must be absolute, got {self.root!r}")
        object.__setattr__(self, "root", posixpath.normpath(self.root))

    def _join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    # directories
    def dir(self, name: str) -> str:
        return self._join(name)

    @property
    def storms_dir(self) -> str:
        return self._join("storms")

    @property
    def assignments_dir(self) -> str:
        return self._join("assignments")

    @property
    def supervisors_dir(self) -> str:
        return self._join("supervisors")

    @property
    def workerbeats_root(self) -> str:
        return self._join("workerbeats")

    @property
    def errors_root(self) -> str:
        return self._join("errors")

    @property
    def nimbuses_dir(self) -> str:
        return self._join("nimbuses")

    @property
    def leader_lock(self) -> str:
        return self._join("leader-lock")

    @property
    def leader_epoch(self) -> str:
        return self._join("leader-epoch")

    # nodes
    def storm(self, topology_id: str) -> str:
        return self._join("storms", _segment(topology_id, "topology id"))

    def assignment(self, topology_id: str) -> str:
        return self._join("assignments", _segment(topology_id, "topology id"))

    def supervisor(self, supervisor_id: str) -> str:
        return self._join("supervisors", _segment(supervisor_id, "supervisor id"))

    def workerbeats_dir(self, topology_id: str) -> str:
        return self._join("workerbeats", _segment(topology_id, "topology id"))

    def workerbeat(self, topology_id: str, node: str, port: int) -> str:
        return posixpath.join(self.workerbeats_dir(topology_id), self.workerbeat_name(node, port))

    @staticmethod
    def workerbeat_name(node: str, port: int) -> str:
        return f"{_segment(node, 'node id')}-{int(port)}"

    @staticmethod
    def parse_workerbeat_name(name: str) -> tuple[str, int]:
        node, _, port = name.rpartition("-")
        if not node or not port.isdigit():
            raise ValueError(f"workerbeat node name {name!r} is not <node>-<port>")
        return node, int(port)

    def errors_dir(self, topology_id: str) -> str:
        return self._join("errors", _segment(topology_id, "topology id"))

    def component_errors_dir(self, topology_id: str, component: str) -> str:
        return posixpath.join(self.errors_dir(topology_id), quote(component, safe=""))

    def error_prefix(self, topology_id: str, component: str) -> str:
        """Path prefix for a sequential error child: kazoo appends the 10-digit sequence."""
        return posixpath.join(self.component_errors_dir(topology_id, component), ERROR_PREFIX)

    def last_error(self, topology_id: str, component: str) -> str:
        return self.component_errors_dir(topology_id, component) + LAST_ERROR_SUFFIX

    @staticmethod
    def component_from_errors_name(name: str) -> str:
        return unquote(name)

    def nimbus(self, host_port: str) -> str:
        return self._join("nimbuses", _segment(host_port, "nimbus address"))

    def blobstore_dir(self, topology_id: str) -> str:
        return self._join("blobstore", _segment(topology_id, "topology id"))

    @property
    def logconfigs_dir(self) -> str:
        return self._join("logconfigs")

    def logconfig(self, topology_id: str) -> str:
        return self._join("logconfigs", _segment(topology_id, "topology id"))

    def blob_holder(self, topology_id: str, host_port: str) -> str:
        return posixpath.join(self.blobstore_dir(topology_id), _segment(host_port, "nimbus address"))


def error_sequence(name: str) -> int | None:
    """``e0000000012`` → 12; anything else → None."""
    if name.startswith(ERROR_PREFIX) and name[1:].isdigit():
        return int(name[1:])
    return None
