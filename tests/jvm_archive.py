"""A class-data-sharing archive of Spark's JVM for the tests: a cache, like the build's.

Each Spark test starts a JVM (a topology's Spark application, in the test process or a worker) that
loads and verifies thousands of classes from Spark's jars before its first job: 8.5 s of CPU for a
session and a first job here, with the tests' JVM options. The JDK can map the classes an earlier JVM
loaded from an archive instead (application class-data sharing: ``-XX:SharedArchiveFile``); with one,
the same start takes 4.4 s of CPU and 4.3 s instead of 7.9 s of wall time.

``python -m tests.jvm_archive`` makes the archive when it is missing: one Spark session with Gale's
settings and a few first jobs, in a JVM that writes the classes it loaded when it exits
(``-XX:ArchiveClassesAtExit``) — about 30 s, once per virtual environment (``make test`` starts it in
the background as the tests start). The archive names the jars it came from by path, size and time,
so it lives in the environment whose Spark it archived (``<venv>/gale-jvm``), named by a key of the
Java runtime and Spark's jars: an upgrade of either makes a new one. :func:`archive_options` gives
the JVM options that use it, which ``tests/conftest.py`` adds to every JVM the tests start
(``JAVA_TOOL_OPTIONS``) from the moment the archive is there: a JVM whose class path is not Spark's
(ZooKeeper) cannot use it and runs as without it (``-Xlog:cds*=off`` keeps the JDK's note about that
off its output). The archive changes how fast classes load, not which: same code, same results.
Making it never fails the run: without an archive the tests run as before.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: JVM options for the short-lived JVMs of tests: C2 compiles hot methods for throughput a
#: seconds-long JVM never reaches, and G1 runs concurrent threads on the two cores the tests share
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: what the archiving JVM runs: a session with Gale's settings, a grouped count, an Arrow
#: collection and a Python UDF (the kinds of job Gale's Spark components run); then it waits for the
#: JVM to exit, which is when the archive is written
_WORKLOAD = """
import os
import sys
from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from gale.config_keys import Config
from gale.worker.spark.session import spark_settings

settings = spark_settings(Config())
os.environ["PYSPARK_PYTHON"] = sys.executable  # as gale.worker.spark.session sets it
builder = SparkSession.builder.master(settings.master).appName("gale-jvm-archive")
for key, value in settings.conf:
    builder = builder.config(key, value)
spark = builder.getOrCreate()
df = spark.range(2000).selectExpr("id % 7 AS k", "CAST(id AS STRING) AS w")
df.groupBy("k").count().collect()
df.toPandas()
df.select(udf(lambda s: s.upper())("w")).collect()
spark.createDataFrame([(i, str(i)) for i in range(20)], "i BIGINT, w STRING").toArrow()
spark.stop()
proc = SparkContext._gateway.proc
proc.stdin.close()  # the gateway JVM exits when its stdin closes, and writes the archive as it does
sys.exit(proc.wait(300))
"""


def cache_dir() -> Path:
    """Where this environment's archive lives (``GALE_JVM_ARCHIVE_DIR`` overrides)."""
    return Path(os.environ.get("GALE_JVM_ARCHIVE_DIR") or Path(sys.prefix) / "gale-jvm")


def _spark_jars() -> Path | None:
    spec = importlib.util.find_spec("pyspark")  # found, not imported: every test process asks
    if spec is None or spec.origin is None:
        return None
    jars = Path(spec.origin).parent / "jars"
    return jars if jars.is_dir() else None


def archive_key() -> str | None:
    """A key of what the archive depends on: the Java runtime, Spark's jars and the JVM options
    (None: no ``java`` or no Spark here)."""
    java, jars = shutil.which("java"), _spark_jars()
    if java is None or jars is None:
        return None
    home = Path(os.path.realpath(java)).parent.parent
    parts = [str(home), TEST_JVM_OPTIONS]
    for path in [*sorted(home.glob("lib/server/*.so")), *sorted(jars.glob("*.jar"))]:
        st = path.stat()
        parts.append(f"{path.name}:{st.st_size}:{int(st.st_mtime)}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path(key: str) -> Path:
    return cache_dir() / f"spark-{key}.jsa"


def archive_options(key: str | None = None) -> str:
    """The JVM options that use the archive of ``key`` (by default this environment's), with a
    leading space; "" while there is none."""
    key = key or archive_key()
    if key is None or not archive_path(key).is_file():
        return ""
    return f" -XX:SharedArchiveFile={archive_path(key)} -Xlog:cds*=off"


def use_archive(key: str | None, wait: bool = False) -> None:
    """Let the JVMs this process starts from now on use the archive of ``key`` once it is there,
    unless JAVA_TOOL_OPTIONS came from outside the tests. With ``wait``, first wait until an archive
    being made (``python -m tests.jvm_archive`` in the background, which holds ``.making``) is done:
    the wait takes the lock the maker holds, so it ends exactly when the maker lets go (bounded by
    the maker's own timeout)."""
    if key is None or os.environ.get("JAVA_TOOL_OPTIONS") != TEST_JVM_OPTIONS:
        return
    if wait and cache_dir().is_dir():
        with open(cache_dir() / ".making", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
    os.environ["JAVA_TOOL_OPTIONS"] = TEST_JVM_OPTIONS + archive_options(key)


def make_archive(key: str, timeout: float = 300.0) -> Path:
    """Run the workload in a JVM that archives its classes at exit; returns the archive. Holds
    ``.making`` in the archive's folder meanwhile (:func:`use_archive` waits on it); another process
    making the same archive meanwhile is harmless: each writes its own file and renames it."""
    final = archive_path(key)
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / ".making", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_file():  # made while this process waited
            return final
        return _make(final, timeout)


def _make(final: Path, timeout: float) -> Path:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    tmp.unlink()  # the JVM writes it
    env = dict(os.environ, JAVA_TOOL_OPTIONS=f"{TEST_JVM_OPTIONS} -XX:ArchiveClassesAtExit={tmp}")
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    try:
        res = subprocess.run([sys.executable, "-c", _WORKLOAD], env=env, capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL)
        if res.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            tail = "\n".join((res.stderr or res.stdout).splitlines()[-15:])
            raise RuntimeError(f"the archiving JVM exited {res.returncode} without an archive:\n{tail}")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    for old in final.parent.glob("spark-*.jsa"):
        if old != final:
            old.unlink(missing_ok=True)
    return final


def main() -> int:
    key = archive_key()
    if key is None:
        print("gale: no java or no pyspark here: the tests' JVMs run without a class archive")
        return 0
    path = archive_path(key)
    if path.is_file():
        print(f"gale: the tests' JVMs map Spark's classes from {path}")
        return 0
    t0 = time.monotonic()
    try:
        made = make_archive(key)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"gale: no class archive for the tests' JVMs (they run without one): {exc}")
        return 0
    print(f"gale: archived Spark's classes for the tests' JVMs in {time.monotonic() - t0:.1f} s: "
          f"{made} ({made.stat().st_size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
