"""The supervisor's end of the worker fork server (:mod:`gale.worker.zygote` is the other).

:class:`ForkServer` starts the fork server when the supervisor starts, so its import of the worker
overlaps the supervisor's own start, and asks it for a worker per launch. Whatever goes wrong — it
is not ready within :data:`READY_SECS`, it died, it answered with an error or not at all within
:data:`REPLY_SECS` — the launch is not lost: :meth:`ForkServer.launch` returns None, the caller execs
the worker as without a fork server, and the fork server is stopped and started again at the next
launch after :data:`RESTART_SECS`. A worker launched either way is the same to everything else: its
own session, its pid file, its command line.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from gale.log import get_logger
from gale.worker.zygote import PRELOAD_ENV, TITLE_ROOM

log = get_logger("supervisor.fork-server")

#: how long a launch waits for a fork server still importing the worker (a cold start on a busy
#: host; the exec it replaces would take as long)
READY_SECS = 30.0
#: how long a launch waits for the fork's reply (a fork takes milliseconds)
REPLY_SECS = 10.0
#: how long after a failure the next launch starts a new fork server (meanwhile: exec)
RESTART_SECS = 30.0


def interpreter_env(env: dict[str, str]) -> dict[str, str]:
    """What of an environment the interpreter reads when it starts (and a fork cannot change)."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


class ForkServer:
    """A fork server process for one supervisor's workers, started with ``prefix`` (the interpreter
    and its options, as a worker's exec would start it) in environment ``env``."""

    def __init__(self, prefix: list[str], env: dict[str, str], stderr: Any = None, preload: list[str] | None = None):
        self.prefix = list(prefix)
        self.env = dict(env)
        self.stderr = stderr
        #: what the fork server imports before it says ready (None: the worker)
        self.preload = list(preload) if preload else None
        #: exit codes the fork server reported, by pid (launches that asked for them)
        self.exits: dict[int, int] = {}
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None  # the fork server's pid once it said ready
        self._pending = b""
        self._lock = threading.Lock()
        self._retry_at = 0.0
        self.launches = 0

    def start(self) -> None:
        """Start the fork server (it imports the worker meanwhile); a failure to start is logged and
        launches exec their workers."""
        with self._lock:
            self._start()

    def _start(self) -> None:
        self.pid = None
        self._pending = b""
        env = dict(self.env, **({PRELOAD_ENV: ",".join(self.preload)} if self.preload else {}))
        try:
            self.proc = subprocess.Popen(
                [*self.prefix, "-m", "gale.worker.zygote", " " * TITLE_ROOM], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self.stderr, env=env, start_new_session=True, close_fds=True)
        except OSError as exc:
            self._failed(f"could not start: {exc}")

    def launch(self, args: list[str], cwd: Path, env: dict[str, str], out: Path, title: str,
               module: str | None = None, err: Path | None = None, report_exit: bool = False,
               ready_secs: float = READY_SECS) -> int | None:
        """Fork a worker running ``worker <args>`` (or ``python -m <module> <args>``) in ``cwd`` with
        ``env``, its output appended to ``out`` (its standard error to ``err`` when given), its
        command line ``title``; its pid, or None when the caller must exec it. ``report_exit``: the
        fork server says the child's exit code (:meth:`exit_code`). A fork server still importing
        after ``ready_secs`` (less than :data:`READY_SECS`) leaves this launch to an exec and goes on
        importing for the next one."""
        if interpreter_env(env) != interpreter_env(self.env):
            return None  # a fork would not have the interpreter settings asked for
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                if self.proc is not None:
                    self._failed(f"exited with {self.proc.returncode}")
                if time.monotonic() < self._retry_at:
                    return None
                self._start()
                if self.proc is None:
                    return None
            try:
                if not self._ready(ready_secs):
                    if ready_secs >= READY_SECS:
                        raise TimeoutError(f"not ready within {READY_SECS:g} s")
                    return None
                request = {"args": args, "cwd": str(cwd), "env": env, "out": str(out), "title": title}
                if module is not None:
                    request["module"] = module
                if err is not None:
                    request["err"] = str(err)
                if report_exit:
                    request["exit"] = True
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
                reply = self._reply(REPLY_SECS)
                if "pid" not in reply and "error" not in reply:
                    raise RuntimeError(f"unexpected reply {reply!r}")
            except (OSError, ValueError, RuntimeError, TimeoutError) as exc:
                self._failed(str(exc))
                return None
            if "error" in reply:  # this request only (its directory is gone, ...): an exec says it as it would
                log.warning("fork-refused", reason=str(reply["error"]), cwd=str(cwd))
                return None
            self.launches += 1
            return int(reply["pid"])

    def wait_ready(self, timeout: float) -> bool:
        """Whether the fork server has imported what it forks (waiting up to ``timeout`` seconds)."""
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                return self._ready(timeout)
            except (OSError, ValueError, RuntimeError) as exc:
                self._failed(str(exc))
                return False

    def _ready(self, timeout: float) -> bool:
        if self.pid is None:
            ready = self._message(timeout)
            if ready is None:
                return False
            if "ready" not in ready:
                raise RuntimeError(ready.get("error") or f"unexpected first message {ready!r}")
            self.pid = int(ready["ready"])
        return True

    def _reply(self, timeout: float) -> dict[str, Any]:
        """The next answer (a child's reported exit is recorded in :attr:`exits` on the way)."""
        deadline = time.monotonic() + timeout
        while True:
            message = self._message(deadline - time.monotonic())
            if message is None:
                raise TimeoutError(f"no answer within {timeout:g} s")
            if "exited" in message:
                self.exits[int(message["exited"])] = int(message["code"])
            else:
                return message

    def _message(self, timeout: float) -> dict[str, Any] | None:
        """The next message within ``timeout`` seconds (None: none came)."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError(f"exited (code {self.proc.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError(f"unexpected message {message!r}")
        return message

    def exit_code(self, pid: int, timeout: float = 0.0) -> int | None:
        """The exit code of child ``pid`` (launched with ``report_exit``), waiting up to ``timeout``
        seconds for it; None while it runs. A child outliving its fork server is reaped by another
        process: its code is unknown then (-1) once it is gone."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                serving = self.proc is not None and self.pid is not None and self.proc.poll() is None
                if pid not in self.exits and serving:
                    try:
                        self._drain(min(0.05, max(0.0, deadline - time.monotonic())))
                    except (OSError, ValueError, RuntimeError) as exc:
                        self._failed(str(exc))
                if pid in self.exits:
                    return self.exits[pid]
            if not serving and not psutil.pid_exists(pid):
                return -1
            if time.monotonic() >= deadline:
                return None
            if not serving:
                time.sleep(0.05)  # an orphan: looked at until it is gone

    def _drain(self, timeout: float) -> None:
        """Record the exits the fork server reported, waiting up to ``timeout`` for the first."""
        message = self._message(timeout)
        while message is not None:
            if "exited" not in message:
                raise ValueError(f"unexpected message {message!r}")  # no launch awaits an answer now
            self.exits[int(message["exited"])] = int(message["code"])
            message = self._message(0.0)

    def spawn(self, argv: list[str], cwd: Path, env: dict[str, str], out: Path, err: Path | None = None) -> ForkedProcess | None:
        """Fork what ``argv`` (``<this interpreter> -m <module> args...``) would exec, as
        :meth:`launch` does, with its exit reported; a :class:`ForkedProcess`, or None when the
        caller must exec ``argv`` (another interpreter or form, no fork server, or one still
        importing: a caller never waits for it)."""
        if len(argv) < 3 or argv[:1] != self.prefix[:1] or self.prefix[1:] or argv[1] != "-m":
            return None
        pid = self.launch(argv[3:], cwd, env, out, " ".join(argv), module=argv[2], err=err, report_exit=True,
                          ready_secs=0.0)
        return None if pid is None else ForkedProcess(self, pid, argv)

    def _failed(self, why: str) -> None:
        log.warning("fork-server-failed", reason=why, retry_secs=RESTART_SECS,
                    hint="workers are started by exec meanwhile (about half a second of CPU more each)")
        self._retry_at = time.monotonic() + RESTART_SECS
        self._stop_process(kill=True)

    def close(self) -> None:
        """Stop the fork server (its input closed: it exits; the workers it forked run on)."""
        with self._lock:
            self._stop_process(kill=False)

    def _stop_process(self, kill: bool) -> None:
        proc, self.proc, self.pid = self.proc, None, None
        if proc is None:
            return
        try:
            if kill:
                proc.kill()
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


class ForkedProcess:
    """A child of a fork server, with what its launcher's callers use of :class:`subprocess.Popen`:
    ``pid``, ``returncode``, :meth:`poll`, :meth:`wait`, :meth:`send_signal`, :meth:`terminate`,
    :meth:`kill`."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]):
        self.server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self.server.exit_code(self.pid, 1e9 if timeout is None else timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def python_prefix(childopts: list[str] | tuple[str, ...]) -> list[str]:
    """The interpreter and its options a worker runs with."""
    return [sys.executable, *childopts]
