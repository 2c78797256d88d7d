"""A private PostgreSQL server from the Debian package (``postgresql``), for development and tests.

Like :mod:`gale.redisserver`: a loopback port reserved with :func:`gale.ports.reserve_port`, its own
cluster directory (made with ``initdb``; ``postgres.log`` beside it), and a start that waits until
*this* server answers (a query of ``data_directory`` naming its own directory). It allows prepared
transactions (``max_prepared_transactions``, which the PostgreSQL sink's two-phase commit needs;
``prepared_transactions=0`` gives a server without them), trusts connections from the machine and
from the subnets of its listen address (``samenet``: the chaos suite's network namespaces), and
keeps ``fsync`` on, so a committed checkpoint survives ``kill -9`` of the server.

PostgreSQL refuses to run as root: started by root, the cluster belongs to the ``postgres`` user
(the Debian package makes it) and the server runs as that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from gale.localserver import LocalServer
from gale.ports import PortReservation, reserve_port

#: the superuser and database the server is made with
USER = "gale"
DATABASE = "postgres"


class PostgresServerError(RuntimeError):
    pass


def pg_bin(name: str) -> str:
    """A PostgreSQL server program of the newest installed major version (Debian keeps them in
    ``/usr/lib/postgresql/<major>/bin``, off ``PATH``)."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    if found:
        return found[-1]
    on_path = shutil.which(name)
    if on_path:
        return on_path
    raise PostgresServerError(f"PostgreSQL's {name} not found: install the Debian package (apt-get install postgresql; "
                              "deploy/install-system-deps.sh test does)")


class PostgresServer(LocalServer):
    """One PostgreSQL server (postmaster) process. Use as a context manager or call start()/stop()."""

    name = "PostgreSQL"
    error = PostgresServerError

    def __init__(self, *, port: int | None = None, host: str = "127.0.0.1", data_dir: str | os.PathLike[str] | None = None,
                 prepared_transactions: int = 64, run_as: str | None = None):
        self.host = host
        self._reservation: PortReservation | None = None if port else reserve_port()
        self.port = port or self._reservation.port  # type: ignore[union-attr]
        self._own_dir = data_dir is None
        # a directory the server's user can reach: its own temp directory when Gale makes it
        self.data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="gale-pg-"))
        self.prepared_transactions = prepared_transactions
        self.run_as = run_as if run_as is not None else ("postgres" if os.geteuid() == 0 else "")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def cluster_dir(self) -> Path:
        return self.data_dir / "cluster"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@{self.host}:{self.port}/{DATABASE}"

    def _user_kwargs(self) -> dict:
        if not self.run_as:
            return {}
        entry = pwd.getpwnam(self.run_as)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _chown(self, path: Path) -> None:
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _init_cluster(self) -> None:
        if (self.cluster_dir / "PG_VERSION").exists():
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._chown(self.data_dir)
        out = subprocess.run([pg_bin("initdb"), "-D", str(self.cluster_dir), "-U", USER, "--auth=trust",
                              "-E", "UTF8", "--locale=C", "--no-instructions"],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=self.data_dir,
                             **self._user_kwargs())
        if out.returncode != 0:
            raise PostgresServerError(f"initdb failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
        (self.cluster_dir / "pg_hba.conf").write_text(
            "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"
            "host all all samenet trust\n")
        with open(self.cluster_dir / "postgresql.conf", "a") as conf:
            conf.write("\n# gale.pgserver\n"
                       f"listen_addresses = '{self.host}'\nport = {self.port}\n"
                       f"unix_socket_directories = '{self.data_dir}'\n"
                       f"max_prepared_transactions = {self.prepared_transactions}\n"
                       "max_connections = 200\nshared_buffers = 32MB\nfsync = on\nsynchronous_commit = on\n"
                       "logging_collector = off\n")

    def start(self, timeout: float = 60.0) -> PostgresServer:
        if self.running():
            return self
        self._init_cluster()
        # the port may have changed since initdb (a fixed port given later): the command line wins
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen([pg_bin("postgres"), "-D", str(self.cluster_dir), "-p", str(self.port),
                                          "-h", self.host, "-k", str(self.data_dir)],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.data_dir, **self._user_kwargs())
        finally:
            log.close()

        def exited(code: int) -> Exception:
            self.proc = None
            return PostgresServerError(f"postgres exited with code {code} during start; log:\n{self.log_tail()}")

        self._wait_ready(timeout, exited)
        return self

    def kill(self) -> None:
        """SIGKILL to the postmaster *and* every process it started, as a machine crash would. The
        postmaster's children put themselves in sessions of their own (so a signal to its process
        group misses them): an orphaned backend would go on serving its connection until it
        noticed, and hold the shared memory a restarted server needs."""
        import psutil

        proc = self.proc
        if proc is None or proc.poll() is not None:
            super().kill()
            return
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        super().kill()
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(children, timeout=10)

    def connect(self, **kwargs):
        import psycopg

        return psycopg.connect(self.url, connect_timeout=2, **kwargs)

    def _answers(self) -> bool:
        try:
            with self.connect(autocommit=True) as conn:
                row = conn.execute("SELECT current_setting('data_directory')").fetchone()
            return row is not None and Path(row[0]).resolve() == self.cluster_dir.resolve()
        except Exception:  # noqa: BLE001 - not up yet (refused, starting up, recovering)
            return False

