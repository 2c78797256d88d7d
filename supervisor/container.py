"""Worker processes: launch, observe, kill, clean up — and find them again after a restart.

Layout under ``storm.local.dir`` (as Storm's)::

    workers/<worker-id>/heartbeats/      LocalState with the worker's heartbeat
    workers/<worker-id>/pids/<pid>       one empty file per process of the worker
    logs/workers-artifacts/<topology-id>/<port>/worker.log   (+ worker.out for stdout/stderr)

Workers run in their own session (process group) so a supervisor restart does not take them down;
the restarted supervisor finds them through ``approved-workers`` in its LocalState and the pid files.
A pid is trusted only if the process's command line names the worker id (no pid-reuse accidents).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import psutil

from gale.config_keys import Config
from gale.daemon_util import WORKER_ARTIFACTS, log_dir
from gale.local_state import LocalState
from gale.log import get_logger
from gale.supervisor.fork_server import ForkServer, python_prefix
from gale.supervisor.slot import LocalAssignment

log = get_logger("supervisor.container")

HEARTBEAT_KEY = "worker-heartbeat"


class Containers:
    def __init__(self, config: Config, supervisor_id: str, config_path: str | Path):
        self.config = config
        self.local = Path(config.storm_local_dir)
        self.workers_root = self.local / "workers"
        self.workers_root.mkdir(parents=True, exist_ok=True)
        self.logs_root = log_dir(config) / WORKER_ARTIFACTS
        self.supervisor_id = supervisor_id
        self.config_path = str(config_path)
        self._procs: dict[str, subprocess.Popen] = {}
        #: forks workers from an interpreter that imported the worker once (None: every worker is exec'd)
        self.fork_server: ForkServer | None = None
        self._fork_server_log = None

    def start(self) -> None:
        """Start the worker fork server (``supervisor.worker.fork.server``), once: when the
        supervisor is first given work (its code downloads meanwhile), else at the first launch. A
        supervisor that never runs a worker never starts one. Its exits and failures are logged to
        ``fork-server.log`` in the supervisor's log directory."""
        if not self.config.supervisor_worker_fork_server or self.fork_server is not None:
            return
        logs = log_dir(self.config)
        logs.mkdir(parents=True, exist_ok=True)
        self._fork_server_log = open(logs / "fork-server.log", "ab")  # noqa: SIM115 - kept for the process
        self.fork_server = ForkServer(python_prefix(self.config.worker_childopts), self._worker_env(),
                                      stderr=self._fork_server_log)
        self.fork_server.start()

    def close(self) -> None:
        """Stop the fork server (workers run on)."""
        if self.fork_server is not None:
            self.fork_server.close()
            self.fork_server = None
        if self._fork_server_log is not None:
            self._fork_server_log.close()
            self._fork_server_log = None

    # -------------------------------------------------------------- paths

    def worker_dir(self, worker_id: str) -> Path:
        return self.workers_root / worker_id

    def heartbeat_dir(self, worker_id: str) -> Path:
        return self.worker_dir(worker_id) / "heartbeats"

    def pids_dir(self, worker_id: str) -> Path:
        return self.worker_dir(worker_id) / "pids"

    def log_dir(self, topology_id: str, port: int) -> Path:
        return self.logs_root / topology_id / str(port)

    # -------------------------------------------------------------- launch

    def worker_args(self, assignment: LocalAssignment, port: int, worker_id: str) -> list[str]:
        """The ``worker`` command's arguments."""
        return ["run", assignment.topology_id, self.supervisor_id, str(port), worker_id, "--config", self.config_path]

    def command(self, assignment: LocalAssignment, port: int, worker_id: str) -> list[str]:
        return [*python_prefix(self.config.worker_childopts), "-m", "gale.worker.cli",
                *self.worker_args(assignment, port, worker_id)]

    def _worker_env(self, logs: Path | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        # every worker hashes strings alike, so fields groupings route equal keys to one task
        env["PYTHONHASHSEED"] = "0"
        if logs is not None:
            env["GALE_WORKER_LOG_DIR"] = str(logs)
        # numpy (the acker's tables) starts OpenBLAS's thread pool, whose threads busy-wait on the
        # cores the executor threads need (about 0.1 s of CPU at start, measured, and after each
        # BLAS call); a worker's parallelism is its executors. The supervisor's own environment
        # (its systemd unit) can set another value.
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        env.pop("NOTIFY_SOCKET", None)  # the worker is not the systemd service
        return env

    def launch(self, assignment: LocalAssignment, port: int, worker_id: str) -> int:
        wdir = self.worker_dir(worker_id)
        for d in (wdir, self.heartbeat_dir(worker_id), self.pids_dir(worker_id)):
            d.mkdir(parents=True, exist_ok=True)
        logs = self.log_dir(assignment.topology_id, port)
        logs.mkdir(parents=True, exist_ok=True)
        env = self._worker_env(logs)
        command = self.command(assignment, port, worker_id)
        self.start()
        pid = None if self.fork_server is None else self.fork_server.launch(
            self.worker_args(assignment, port, worker_id), wdir, env, logs / "worker.out", " ".join(map(str, command)))
        forked = pid is not None
        if not forked:
            with open(logs / "worker.out", "ab") as out:
                proc = subprocess.Popen(
                    command, cwd=wdir, env=env, stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                )
            pid = proc.pid
            self._procs[worker_id] = proc
        else:
            self._procs.pop(worker_id, None)  # the fork server's child (it reaps it)
        (self.pids_dir(worker_id) / str(pid)).touch()
        log.info("worker-launched", topology=assignment.topology_id, port=port, worker=worker_id, pid=pid,
                 executors=len(assignment.executors), forked=forked)
        return pid

    # -------------------------------------------------------------- observe

    def pids(self, worker_id: str) -> list[int]:
        try:
            return sorted(int(p.name) for p in self.pids_dir(worker_id).iterdir() if p.name.isdigit())
        except FileNotFoundError:
            return []

    def _process(self, pid: int, worker_id: str) -> psutil.Process | None:
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            if worker_id not in " ".join(proc.cmdline()):
                return None  # the pid was reused by something else
            return proc
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def alive(self, worker_id: str | None) -> bool:
        if worker_id is None:
            return False
        popen = self._procs.get(worker_id)
        if popen is not None and popen.poll() is not None:
            # our own child has exited (reaped now); its pid file no longer means anything
            return any(self._process(p, worker_id) for p in self.pids(worker_id) if p != popen.pid)
        return any(self._process(p, worker_id) is not None for p in self.pids(worker_id))

    def live_pid(self, worker_id: str | None) -> int | None:
        """The worker's first live process (the one its supervisor launched), or None."""
        if worker_id is None:
            return None
        return next((p for p in self.pids(worker_id) if self._process(p, worker_id) is not None), None)

    def exit_code(self, worker_id: str) -> int | None:
        popen = self._procs.get(worker_id)
        return None if popen is None else popen.poll()

    def heartbeat(self, worker_id: str | None) -> dict[str, Any] | None:
        if worker_id is None or not self.heartbeat_dir(worker_id).is_dir():
            return None
        hb = LocalState(self.heartbeat_dir(worker_id), keep=60, fsync=False).get(HEARTBEAT_KEY)
        return hb if isinstance(hb, dict) else None

    # -------------------------------------------------------------- kill

    def kill(self, worker_id: str, force: bool) -> None:
        sig = signal.SIGKILL if force else signal.SIGTERM
        for pid in self.pids(worker_id):
            proc = self._process(pid, worker_id)
            if proc is None:
                continue
            try:
                # the worker leads its own process group: signal the group (Spark JVMs, Python workers)
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                try:
                    proc.send_signal(sig)
                except psutil.Error:
                    pass
        log.info("worker-kill", worker=worker_id, force=force)

    def cleanup(self, worker_id: str) -> None:
        popen = self._procs.pop(worker_id, None)
        if popen is not None:
            popen.poll()
        # make sure every process in the worker's group is gone (Spark children, stray helpers)
        for pid in self.pids(worker_id):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(self.worker_dir(worker_id), ignore_errors=True)
        log.info("worker-cleaned-up", worker=worker_id)

    def worker_ids_on_disk(self) -> list[str]:
        return sorted(p.name for p in self.workers_root.iterdir() if p.is_dir())
