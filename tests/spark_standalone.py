"""A Spark standalone cluster on loopback, from the classes PySpark ships (tests start it as they
start ZooKeeper): one master and N workers, each a JVM of its own, each worker in its own process
group with the executors it launches.

PySpark's pip package has no ``sbin/start-master.sh``; the master and workers are started with
``java -cp "<pyspark>/jars/*" org.apache.spark.deploy.master.Master`` / ``...deploy.worker.Worker``,
with ``SPARK_HOME`` set to the PySpark directory (workers build their executors' command from it).
Readiness comes from the master's JSON status page (``http://host:<ui port>/json/``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import psutil

from gale.zkserver import free_port
from tests.waiting import eventually


def pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def scala_version() -> str:
    """``2.13`` from ``scala-library-2.13.x.jar`` among PySpark's jars."""
    for jar in (pyspark_home() / "jars").glob("scala-library-*.jar"):
        parts = jar.stem.split("-")[-1].split(".")
        return ".".join(parts[:2])
    return "2.13"


class SparkStandalone:
    def __init__(self, base: Path, workers: int = 2, cores: int = 1, memory: str = "1g", host: str = "127.0.0.1"):
        self.base = Path(base)
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.host = host
        self.port = free_port()
        self.ui_port = free_port()
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen | None] = []
        self.java = shutil.which("java") or "java"

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SPARK_HOME"] = str(pyspark_home())
        env["SPARK_LOCAL_IP"] = self.host
        # workers build their executors' command line with Spark's launcher, which needs the Scala
        # version (bin/load-spark-env.sh sets it; the pip package's jars say it)
        env["SPARK_SCALA_VERSION"] = scala_version()
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        return env

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.base / f"{name}.log", "ab")
        classpath = str(pyspark_home() / "jars" / "*")
        try:
            return subprocess.Popen([self.java, "-Xmx256m", "-cp", classpath, *args], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self._env(),
                                    cwd=self.base, start_new_session=True)
        finally:
            log.close()

    def status(self) -> dict[str, Any]:
        return httpx.get(f"http://{self.host}:{self.ui_port}/json/", timeout=5, trust_env=False).json()

    def start(self, timeout: float = 120.0) -> SparkStandalone:
        self.base.mkdir(parents=True, exist_ok=True)
        self.master = self._launch("master", ["org.apache.spark.deploy.master.Master", "--host", self.host,
                                              "--port", str(self.port), "--webui-port", str(self.ui_port)])
        eventually(lambda: self._assert_status(alive_workers=0), timeout, 0.5,
                   retry_on=(AssertionError, httpx.HTTPError, ValueError))
        for i in range(self.n_workers):
            self.workers.append(self._start_worker(i))
        eventually(lambda: self._assert_status(alive_workers=self.n_workers), timeout, 0.5,
                   retry_on=(AssertionError, httpx.HTTPError, ValueError))
        return self

    def _start_worker(self, i: int) -> subprocess.Popen:
        work = self.base / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        return self._launch(f"worker-{i}", [
            "org.apache.spark.deploy.worker.Worker", self.url, "--host", self.host, "--cores", str(self.cores),
            "--memory", self.memory, "--work-dir", str(work), "--webui-port", str(free_port()),
        ])

    def _assert_status(self, alive_workers: int) -> None:
        assert self.master is not None and self.master.poll() is None, f"the master exited: {self.log_tail('master')}"
        st = self.status()
        assert st.get("status") == "ALIVE", st
        assert st.get("aliveworkers", 0) >= alive_workers, st

    def executor_pids(self, i: int) -> list[int]:
        """Processes worker ``i`` started (its executors and their Python workers)."""
        proc = self.workers[i]
        if proc is None or proc.poll() is not None:
            return []
        try:
            return [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def kill_executors(self, i: int) -> list[int]:
        """``kill -9`` of the executors worker ``i`` runs (and their Python workers), not of the
        worker itself: it reports them failed and starts new ones. Returns the pids killed."""
        pids = self.executor_pids(i)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def kill_worker(self, i: int) -> list[int]:
        """``kill -9`` of worker ``i`` with every process it started (its process group); returns
        the pids killed."""
        proc = self.workers[i]
        if proc is None:
            return []
        pids = [proc.pid, *self.executor_pids(i)]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in pids:  # executors in a group of their own, if any
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        return pids

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            return "\n".join((self.base / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            if proc is None or proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
