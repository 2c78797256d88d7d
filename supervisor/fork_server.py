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
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gale.log import get_logger
from gale.worker.zygote import TITLE_ROOM

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

    def __init__(self, prefix: list[str], env: dict[str, str], stderr: Any = None):
        self.prefix = list(prefix)
        self.env = dict(env)
        self.stderr = stderr
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
        try:
            self.proc = subprocess.Popen(
                [*self.prefix, "-m", "gale.worker.zygote", " " * TITLE_ROOM], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self.stderr, env=self.env, start_new_session=True, close_fds=True)
        except OSError as exc:
            self._failed(f"could not start: {exc}")

    def launch(self, args: list[str], cwd: Path, env: dict[str, str], out: Path, title: str,
               module: str | None = None) -> int | None:
        """Fork a worker running ``worker <args>`` (or ``python -m <module> <args>``) in ``cwd`` with
        ``env``, its output appended to ``out``, its command line ``title``; its pid, or None when the
        caller must exec it."""
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
                if self.pid is None:
                    ready = self._reply(READY_SECS)
                    if "ready" not in ready:
                        raise RuntimeError(ready.get("error") or f"unexpected first message {ready!r}")
                    self.pid = int(ready["ready"])
                request = {"args": args, "cwd": str(cwd), "env": env, "out": str(out), "title": title}
                if module is not None:
                    request["module"] = module
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

    def _reply(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no answer within {timeout:g} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError(f"exited (code {self.proc.wait()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise ValueError(f"unexpected message {reply!r}")
        return reply

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


def python_prefix(childopts: list[str] | tuple[str, ...]) -> list[str]:
    """The interpreter and its options a worker runs with."""
    return [sys.executable, *childopts]
