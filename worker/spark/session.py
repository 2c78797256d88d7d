"""The worker's Spark application: started in the background, shared by the worker's Spark
components, stopped with the worker leaving no process behind.

``WorkerRuntime.attach_resources`` calls :func:`start_spark_for` when the worker hosts a Spark
component. It returns a :class:`SparkHandle` at once; the application starts on a ``spark-start``
thread (15–20 s for ``local[N]``) while executors keep queueing tuples and the worker keeps
heartbeating. Readiness and failure are on ``handle.future``; ``handle.close()`` (called by
``WorkerRuntime.stop``) stops the application.

Settings come from the topology config:

* ``topology.spark.master`` — ``local[N]`` (default ``local[2]``), any Spark master URL, or
  ``sc://host:port`` for a Spark Connect server.
* ``topology.spark.conf`` — Spark settings passed through as they are; they override Gale's
  defaults (UI off, console progress off, Arrow on, WARN log level, Python workers on this
  interpreter, shuffle partitions = local cores).

The topology's code reaches Spark's executors through Spark's own mechanism: in a cluster worker
the topology's code directory (the bundle the supervisor unpacked) is zipped and added with
``SparkContext.addPyFile``, so Python functions from the topology's modules — UDFs, and whatever
they import from the bundle — run on executors of any master (``spark://``, YARN, Kubernetes)
whose Python workers never saw the worker's ``sys.path``.

No orphans: the driver JVM is a child of the worker reading its stdin; it exits when the pipe
closes, which the kernel does when the worker dies, even by SIGKILL. The JVM's Python workers
(``pyspark.daemon``) exit when the JVM closes their stdin. :meth:`SparkApplication.stop` does all
of that explicitly, then kills whatever of that process tree is still alive. Every process of
the application carries a marker: ``-Dgale.spark.marker=<id>`` on the JVM's command line and
``GALE_SPARK_MARKER=<id>`` in its Python workers' environment.

PySpark allows one SparkContext per process, so the application is per process too: handles
with the same settings share it (reference counted, as when several local-mode topologies run in
one process); a handle asking for different settings fails with a clear error.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
import uuid
import zipfile
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from gale.config_keys import Config
from gale.deadline import Deadline, within
from gale.log import get_logger

log = get_logger("spark")

CONNECT_PREFIX = "sc://"
#: the longest wait between two start attempts after failures (topology.spark.start.retry.secs doubles up to it)
MAX_RETRY_SECS = 300.0
MARKER_PROPERTY = "gale.spark.marker"
MARKER_ENV = "GALE_SPARK_MARKER"
DEFAULT_STOP_WAIT_SECS = 60.0
#: a stop (cancel jobs, stop the session, end the JVM and its Python workers) ends within this; past
#: it what is still alive is killed
DEFAULT_STOP_SECS = 60.0


class SparkStartError(Exception):
    """The Spark application could not start; the message says why."""


def local_cores(master: str) -> int | None:
    """Cores of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master; None otherwise."""
    if master == "local":
        return 1
    m = re.fullmatch(r"local\[(\*|\d+)(?:,\s*\d+)?\]", master)
    if not m:
        return None
    return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))


def _conf_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class SparkSettings:
    """Everything that decides which Spark application a worker needs."""

    master: str
    conf: tuple[tuple[str, str], ...]
    app_name: str = "gale"
    #: zips or .py files added with SparkContext.addPyFile (the topology's code in a cluster worker)
    py_files: tuple[str, ...] = ()

    @property
    def connect(self) -> bool:
        return self.master.startswith(CONNECT_PREFIX)

    @property
    def identity(self) -> tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]:
        """Two handles may share an application when their identities are equal."""
        return (self.master, self.conf, self.py_files)

    def conf_dict(self) -> dict[str, str]:
        return dict(self.conf)


def spark_settings(config: Config, app_name: str = "gale", local_dir: str = "",
                   py_files: tuple[str, ...] = ()) -> SparkSettings:
    """The settings for a topology config (pure: no Spark, no environment)."""
    master = config.topology_spark_master.strip()
    user = {str(k): _conf_text(v) for k, v in config.topology_spark_conf.items()}
    base: dict[str, str] = {}
    if not master.startswith(CONNECT_PREFIX):
        base = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            "spark.log.level": "WARN",
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
        }
        cores = local_cores(master)
        if cores:
            # micro-batches are small: Spark's 200 shuffle partitions would be 200 tasks per batch
            base["spark.sql.shuffle.partitions"] = str(max(1, cores))
        if local_dir:
            base["spark.local.dir"] = os.path.join(local_dir, "spark")
    merged = {**base, **user}
    return SparkSettings(master, tuple(sorted(merged.items())), app_name,
                         tuple(py_files) if not master.startswith(CONNECT_PREFIX) else ())


#: what a code archive leaves out (as bundles do)
_SKIP_DIRS = {"__pycache__", ".git", ".venv", "venv", ".mypy_cache", ".pytest_cache", ".hypothesis"}


def code_archive(code_dir: str | os.PathLike[str], out: str | os.PathLike[str]) -> str:
    """Zip ``code_dir`` (the topology's modules and data files, at the zip's root) into ``out``
    for ``SparkContext.addPyFile``; returns its path. Written to a temporary name and renamed, so
    a reader never sees half a zip."""
    root, target = Path(code_dir), Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")) or name.startswith("."):
                    continue
                path = Path(dirpath) / name
                # a fixed date: bundles are unpacked with mtime 0, which zip cannot store
                entry = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
                entry.compress_type = zipfile.ZIP_DEFLATED
                entry.external_attr = 0o644 << 16
                zf.writestr(entry, path.read_bytes())
    os.replace(tmp, target)
    return str(target)


def topology_code_dir(config: Config, topology_id: str) -> Path:
    """Where a cluster worker's topology code is: ``<storm.local.dir>/supervisor/stormdist/<id>/code``
    (the supervisor's localizer unpacks the bundle there; the worker imports from it)."""
    return Path(config.storm_local_dir) / "supervisor" / "stormdist" / topology_id / "code"


# ------------------------------------------------------------------------------ the application


class SparkApplication:
    """One Spark application (driver in this process), started on a background thread."""

    def __init__(self, settings: SparkSettings, stop_wait_secs: float = DEFAULT_STOP_WAIT_SECS):
        self.settings = settings
        self.marker = uuid.uuid4().hex
        self.future: Future = Future()
        self.session: Any = None
        self.jvm_pid: int | None = None
        self.start_secs: float | None = None
        self.stop_wait_secs = stop_wait_secs
        self._stopping = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._started_at = 0.0
        self.attempts = 0  # start attempts so far
        self.failed_at: float | None = None  # time.monotonic() of the last failed start

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        self._started_at = time.monotonic()
        self.attempts += 1
        self._thread = threading.Thread(target=self._start, name="spark-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        log.info("spark-starting", master=self.settings.master, marker=self.marker)
        try:
            session = self._launch()
        except BaseException as exc:  # noqa: BLE001 - any failure is the start's result
            self.start_secs = time.monotonic() - self._started_at
            try:  # py4j renders a Java exception by asking the JVM: do it before the JVM is gone
                text = f"{type(exc).__name__}: {exc}"
            except Exception:  # noqa: BLE001
                text = type(exc).__name__
            with self._lock:
                stopping = self._stopping
            if stopping:
                log.info("spark-start-abandoned", master=self.settings.master)
                error = SparkStartError("the worker stopped while Spark was starting")
            else:
                log.error("spark-start-failed", master=self.settings.master, error=text)
                error = SparkStartError(f"Spark failed to start (master {self.settings.master!r}): {_first_lines(text)}")
            try:
                self._teardown(None, Deadline(DEFAULT_STOP_SECS))
            finally:
                self.failed_at = time.monotonic()
                self.future.set_exception(error)
            return
        self.start_secs = time.monotonic() - self._started_at
        with self._lock:
            self.session = session
            stopping = self._stopping
        if stopping:
            self.future.set_exception(SparkStartError("the worker stopped while Spark was starting"))
            return
        log.info("spark-ready", master=self.settings.master, start_secs=round(self.start_secs, 2), jvm_pid=self.jvm_pid)
        self.future.set_result(session)

    def _launch(self) -> Any:
        settings = self.settings
        if settings.connect:
            try:
                import grpc  # noqa: F401 - Spark Connect's client transport
            except ImportError as exc:
                raise SparkStartError(
                    f"master {settings.master!r} is a Spark Connect endpoint, which needs the Spark Connect "
                    "client: pip install 'pyspark[connect]' (grpcio, grpcio-status, googleapis-common-protos)"
                ) from exc
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.remote(settings.master).appName(settings.app_name)
            for key, value in settings.conf:
                builder = builder.config(key, value)
            return builder.getOrCreate()

        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        conf = settings.conf_dict()
        # Python workers run PYSPARK_PYTHON (read by PySpark from the environment). This process
        # has one interpreter, so every Spark application it starts uses the same value.
        os.environ["PYSPARK_PYTHON"] = conf.get("spark.pyspark.python", sys.executable)
        java_opts = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = f"{java_opts} -D{MARKER_PROPERTY}={self.marker}".strip()
        conf[f"spark.executorEnv.{MARKER_ENV}"] = self.marker
        builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
        for key, value in conf.items():
            builder = builder.config(key, value)
        try:
            session = builder.getOrCreate()
        finally:
            gateway = SparkContext._gateway
            proc = getattr(gateway, "proc", None)
            if proc is not None:
                self.jvm_pid = proc.pid
        for path in settings.py_files:
            # the topology's code for the executors' Python workers (Spark ships it to every executor)
            session.sparkContext.addPyFile(path)
        return session

    def retry_delay(self, base_secs: float) -> float:
        """Backoff before the next start attempt: ``base_secs`` doubling per failure, at most
        ``MAX_RETRY_SECS`` (never less than the base)."""
        return max(base_secs, min(MAX_RETRY_SECS, base_secs * 2 ** max(0, self.attempts - 1)))

    def restart_if_due(self, base_secs: float) -> bool:
        """Start again after a failed start once the backoff has passed. True if a new attempt
        began (``future`` is then a new, pending Future); False otherwise (not failed, stopping,
        a start in progress, or the backoff not over)."""
        with self._lock:
            if self._stopping or not self.future.done() or self.future.exception() is None:
                return False
            if self.failed_at is None or time.monotonic() - self.failed_at < self.retry_delay(base_secs):
                return False
            self.future = Future()
            self.session = None
            self.jvm_pid = None
            self.start_secs = None
        log.warning("spark-start-retry", master=self.settings.master, attempt=self.attempts + 1)
        self.start()
        return True

    # ------------------------------------------------------------------ state
    def ready(self) -> bool:
        return self.future.done() and self.future.exception() is None

    def failed(self) -> bool:
        return self.future.done() and self.future.exception() is not None

    # ------------------------------------------------------------------ stop
    def stop(self, timeout: float = DEFAULT_STOP_SECS) -> None:
        """Stop the application and every process it started, within ``timeout`` seconds
        (whatever hangs: a start in progress, a JVM that stopped answering py4j). A start in
        progress is cut short (its processes killed; the start thread is given up to
        ``stop_wait_secs`` to notice). Past the deadline the JVM and the marked processes are
        killed without waiting for a graceful stop."""
        deadline = Deadline(timeout)
        with self._lock:
            self._stopping = True
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            # still starting: end the processes it launched (as they appear), which makes the
            # start fail fast
            wait_until = time.monotonic() + min(self.stop_wait_secs, deadline.remaining())
            while thread.is_alive() and time.monotonic() < wait_until:
                for proc in find_marked(self.marker, psutil.Process(os.getpid()).children(recursive=True)):
                    try:
                        proc.kill()
                    except psutil.Error:
                        pass
                thread.join(0.25)
        with self._lock:
            session, self.session = self.session, None
        self._teardown(session, deadline)

    def _teardown(self, session: Any, deadline: Deadline) -> None:
        if session is not None:
            def stop_session() -> None:
                try:
                    if self.settings.connect:
                        session.interruptAll()
                    else:
                        session.sparkContext.cancelAllJobs()
                except Exception:  # noqa: BLE001 - best effort before stop
                    pass
                session.stop()

            # leave time to end the processes below even if the session's stop hangs
            within(deadline.earlier(min(5.0, deadline.remaining() / 2)), "spark-session-stop", stop_session)
        if self.settings.connect:
            return
        self._stop_gateway(deadline)

    def _stop_gateway(self, deadline: Deadline) -> None:
        """Close the py4j gateway, end the driver JVM and its Python workers (killing what is
        still alive at ``deadline``)."""
        from pyspark import SparkContext

        with SparkContext._lock:
            gateway = SparkContext._gateway
            SparkContext._gateway = None
            SparkContext._jvm = None
            SparkContext._active_spark_context = None
        proc = getattr(gateway, "proc", None)
        # Snapshot the application's processes before the JVM goes (its Python workers are then
        # re-parented away from us). Only processes carrying this application's marker count.
        candidates: list[psutil.Process] = []
        for root in ([proc.pid] if proc is not None else []) + [os.getpid()]:
            try:
                candidates += psutil.Process(root).children(recursive=True)
            except psutil.Error:
                pass
        tree = find_marked(self.marker, list({p.pid: p for p in candidates}.values()))
        if gateway is not None:
            within(deadline, "spark-gateway-shutdown", gateway.shutdown)
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()  # the JVM exits on EOF of its stdin
            except OSError:
                pass
            try:
                proc.wait(min(15.0, deadline.remaining()))
            except Exception:  # noqa: BLE001 - still alive at the deadline
                log.warning("spark-jvm-kill", pid=proc.pid)
                proc.kill()
                try:
                    proc.wait(min(10.0, max(1.0, deadline.remaining())))
                except Exception:  # noqa: BLE001 - SIGKILLed: the kernel reaps it
                    pass
        _, alive = psutil.wait_procs(tree, timeout=min(5.0, deadline.remaining()))
        for p in alive:
            try:
                log.warning("spark-process-kill", pid=p.pid)
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=min(5.0, max(1.0, deadline.remaining())))


def _first_lines(text: str, n: int = 3) -> str:
    """The head of an error text (a Java stack trace is long; its first lines say what happened)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("at ")]
    return "\n".join(lines[:n])


def process_marker(proc: psutil.Process) -> str | None:
    """The Gale Spark marker a process carries (JVM command line or Python worker environment)."""
    try:
        prefix = f"-D{MARKER_PROPERTY}="
        for arg in proc.cmdline():  # the JVM, and the spark-submit scripts that launch it
            at = arg.find(prefix)
            if at >= 0:
                return arg[at + len(prefix):].split()[0]
        return proc.environ().get(MARKER_ENV)
    except psutil.Error:
        return None


def find_marked(marker: str, procs: list[psutil.Process] | None = None) -> list[psutil.Process]:
    """The processes (all of the machine's by default) that carry ``marker``."""
    out = []
    for p in procs if procs is not None else psutil.process_iter():
        if p.pid != os.getpid() and process_marker(p) == marker:
            out.append(p)
    return out


# ------------------------------------------------------------------------------ handles


class _ProcessSpark:
    """The one Spark application of this process and how many handles hold it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.app: SparkApplication | None = None
        self.refs = 0

    def acquire(self, settings: SparkSettings) -> SparkApplication:
        with self.lock:
            if self.app is None:
                self.app = SparkApplication(settings)
                self.refs = 0
                self.app.start()
            elif self.app.settings.identity != settings.identity:
                raise SparkStartError(
                    f"this process already runs a Spark application with other settings (master "
                    f"{self.app.settings.master!r}); one worker process runs one Spark application, so all "
                    "its topologies' Spark components must use the same topology.spark.master and topology.spark.conf"
                )
            self.refs += 1
            return self.app

    def release(self, app: SparkApplication) -> None:
        with self.lock:
            if app is not self.app:
                return
            self.refs -= 1
            if self.refs > 0:
                return
            self.app = None
        app.stop()


_PROCESS_SPARK = _ProcessSpark()


class SparkHandle:
    """A worker's reference to the Spark application (``context.resources["spark"]``)."""

    def __init__(self, app: SparkApplication | None, error: BaseException | None = None):
        self._app = app
        self._closed = False
        self._error_future: Future = Future()
        if app is None:
            self._error_future.set_exception(error or SparkStartError("Spark is not available"))

    @property
    def future(self) -> Future:
        """The current start attempt's Future (a new one after :meth:`restart_if_due`)."""
        return self._app.future if self._app is not None else self._error_future

    @property
    def attempts(self) -> int:
        return self._app.attempts if self._app is not None else 0

    def restart_if_due(self, base_secs: float) -> bool:
        """Retry a failed start once its backoff has passed (see SparkApplication.restart_if_due).
        A handle refused for conflicting settings never retries (retrying cannot fix that)."""
        if self._closed or self._app is None or base_secs <= 0:
            return False
        return self._app.restart_if_due(base_secs)

    @property
    def settings(self) -> SparkSettings | None:
        return self._app.settings if self._app is not None else None

    @property
    def marker(self) -> str | None:
        return self._app.marker if self._app is not None else None

    @property
    def jvm_pid(self) -> int | None:
        return self._app.jvm_pid if self._app is not None else None

    @property
    def start_secs(self) -> float | None:
        return self._app.start_secs if self._app is not None else None

    def ready(self) -> bool:
        return not self._closed and self.future.done() and self.future.exception() is None

    def failed(self) -> bool:
        return self.future.done() and self.future.exception() is not None

    @property
    def error(self) -> BaseException | None:
        return self.future.exception() if self.future.done() else None

    def status(self) -> str:
        if self._closed:
            return "closed"
        if not self.future.done():
            return "starting"
        return "failed" if self.failed() else "ready"

    @property
    def session(self) -> Any:
        """The SparkSession; raises :class:`SparkStartError` unless ready."""
        if self._closed:
            raise SparkStartError("the Spark application was closed")
        if not self.future.done():
            raise SparkStartError("Spark is still starting")
        return self.future.result()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until Spark is ready (tests, benchmarks, tools; never an executor thread)."""
        return self.future.result(timeout)

    def close(self) -> None:
        """Release this worker's reference; the last one stops Spark and its processes (within
        ``DEFAULT_STOP_SECS``; a worker process also bounds its whole stop, see
        :mod:`gale.worker.daemon`)."""
        if self._closed:
            return
        self._closed = True
        if self._app is not None:
            _PROCESS_SPARK.release(self._app)


def acquire_spark(settings: SparkSettings) -> SparkHandle:
    """A handle on this process's Spark application, starting it (in the background) if needed.
    Never raises: a failure is on the handle's future."""
    try:
        return SparkHandle(_PROCESS_SPARK.acquire(settings))
    except SparkStartError as exc:
        log.error("spark-unavailable", error=str(exc))
        return SparkHandle(None, exc)


def start_spark_for(runtime: Any) -> SparkHandle:
    """The worker runtime's hook: Spark for the topology's Spark components (background start)."""
    name = f"gale-{runtime.topology_id}"
    if getattr(runtime, "worker_port", 0):
        name += f"-{runtime.worker_port}"
    local_dir = getattr(runtime, "local_dir", "")
    py_files: tuple[str, ...] = ()
    config = runtime.config
    code = topology_code_dir(config, runtime.topology_id)
    master = config.topology_spark_master
    if code.is_dir() and not master.startswith(CONNECT_PREFIX):
        # a cluster worker (local mode has no unpacked bundle: its code is on the driver's path)
        out = Path(local_dir or code.parent) / "spark" / "topology-code.zip"
        try:
            py_files = (code_archive(code, out),)
        except (OSError, ValueError) as exc:  # Spark still starts; UDFs from the bundle would fail on executors
            log.error("spark-code-archive-failed", code_dir=str(code), error=str(exc))
    return acquire_spark(spark_settings(config, app_name=name, local_dir=local_dir, py_files=py_files))
