"""The worker fork server: one process per supervisor that has imported the worker once and forks a
worker for each launch (``supervisor.worker.fork.server``, on by default).

Starting a worker by ``exec`` spends about half a second of CPU importing Gale, numpy, pydantic and
the rest before the worker does anything; a supervisor that restarts a crashed worker, or starts
several, pays it every time. The fork server pays it once: the supervisor starts it beside itself
(``python -m gale.worker.zygote``, with the workers' interpreter options and environment) and asks it
for each worker, and the forked child is the worker the ``exec`` would have made — its own session
(process group), working directory, environment, standard streams into ``worker.out``, the same
command line in ``ps`` and ``/proc/<pid>/cmdline`` (``setproctitle``: the supervisor recognises its
workers by it after a restart), and the worker command's own code from there on. What a fork
shares is reset: Python's ``random``, numpy's global generator and the collectors' tuple-id generator
(``gale.worker.runtime.collector``, reseeded by its own ``os.register_at_fork``) are seeded afresh; a
module that keeps a generator of its own made at import must do the same.

The protocol, one JSON object a line: the fork server writes ``{"ready": pid}`` once it has imported
the worker; the supervisor writes a request ``{"args", "cwd", "env", "out", "title"}`` and reads the
reply, ``{"pid": n}`` or ``{"error": "..."}``. A request may also name another module to run as
``__main__`` than the worker command (``module``), a file for the child's standard error apart from
``out`` (``err``), and ask for the child's exit (``"exit": true``: ``{"exited": pid, "code": n}`` on
the same channel once it is reaped). The fork server reaps its children as they exit (their exits
also go to its standard error as ``worker-exited`` lines) and ends when the supervisor closes its
input. ``GALE_FORK_SERVER_PRELOAD`` (comma-separated modules) replaces what it imports before it
says ready — a dev cluster's fork server imports the daemons and the command line instead of the
worker. :class:`gale.supervisor.fork_server.ForkServer` is the other end.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import select
import signal
import sys
import threading
from typing import Any

#: what a worker imports before it does anything (the rest loads with the topology's code); not
#: ``gale.worker.cli`` itself, which each child runs as ``__main__`` as ``python -m`` would
PRELOAD = ("click", "gale.config", "gale.worker.daemon")
#: the room a child's command line has in ``/proc/<pid>/cmdline``: the fork server is started with an
#: argument of this many spaces, whose memory each child overwrites with its title (the environment's
#: memory is left alone, so ``/proc/<pid>/environ`` stays readable: setproctitle's ``SPT_NOENV``)
TITLE_ROOM = 4096
#: the module a request runs as ``__main__`` unless it names another (``python -m`` of it)
WORKER_MODULE = "gale.worker.cli"
#: how often the fork server reaps exited workers while it waits for requests (it also wakes for
#: each SIGCHLD, so this only bounds a missed one)
REAP_SECS = 0.5
#: the environment variable that replaces :data:`PRELOAD` (comma-separated module names)
PRELOAD_ENV = "GALE_FORK_SERVER_PRELOAD"


def _write(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def _reap(replies: int, report: set[int]) -> None:
    """Reap every exited child; say each exit a request asked for on ``replies``."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        _write(2, {"event": "worker-exited", "pid": pid, "code": code})
        if pid in report:
            report.discard(pid)
            _write(replies, {"exited": pid, "code": code})


def _read_all(fd: int) -> str:
    """What ``fd`` gives until its writers close it."""
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _become_worker(request: dict[str, Any], done: int, wakeup: tuple[int, int]) -> None:
    """In the forked child: turn into the worker ``request`` describes and run it. Ends the process
    (``SystemExit`` from the worker command, through the interpreter's normal shutdown). ``done`` is
    closed once the child is the worker — in its directory, named by its command line — or gets why
    not: the fork server answers only then, as an exec returns only once the new program runs (a
    supervisor checking at once must find the worker by its command line)."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in wakeup:
            os.close(fd)
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        err = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if request.get("err") else out
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {null, out, err}:
            os.close(fd)
        import setproctitle

        setproctitle.setproctitle(request["title"])
        sys.path[0] = os.getcwd()  # as ``python -m`` started in that directory would have it
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:
            numpy_random.seed()  # random reseeds itself after a fork; numpy's legacy generator does not
        module = request.get("module", WORKER_MODULE)
        sys.argv = [module, *request["args"]]  # runpy puts the module's file first, as ``python -m``
    except BaseException as exc:  # noqa: BLE001 - nothing of the fork server may run on in the child
        os.write(done, f"{type(exc).__name__}: {exc}".encode(errors="replace"))
        os._exit(70)
    os.close(done)
    runpy.run_module(module, run_name="__main__", alter_sys=True)  # the worker command exits with its code
    sys.exit(0)


def serve(requests: int = 0, replies: int = 1) -> int:
    """Import the worker, say ready, then fork a worker per request until the input ends."""
    preload = os.environ.pop(PRELOAD_ENV, None)
    for name in preload.split(",") if preload else PRELOAD:
        importlib.import_module(name.strip())
    try:
        os.environ["SPT_NOENV"] = "1"
        import setproctitle

        # takes the memory of the arguments for titles now, while the environment is the one the
        # process started with (a child changes it before it names itself)
        setproctitle.setproctitle(" ".join(arg for arg in sys.orig_argv if arg.strip()))
        del os.environ["SPT_NOENV"]
    except ImportError:
        _write(replies, {"error": "setproctitle is not installed: workers could not carry their command line"})
        return 1
    gc.collect()
    gc.freeze()  # what the import made stays shared with the children: no copy when a collection scans it
    if threading.active_count() != 1:
        _write(replies, {"error": "the fork server started threads while importing the worker"})
        return 1
    # a child's exit wakes the loop (a no-op handler: the wakeup fd is what counts), so exits are
    # reaped and reported at once rather than at the next REAP_SECS
    wakeup = os.pipe()
    for fd in wakeup:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    report: set[int] = set()
    _write(replies, {"ready": os.getpid()})
    pending = b""
    while True:
        readable, _, _ = select.select([requests, wakeup[0]], [], [], REAP_SECS)
        if wakeup[0] in readable:
            while True:
                try:
                    if not os.read(wakeup[0], 512):
                        break
                except BlockingIOError:
                    break
        _reap(replies, report)
        if requests not in readable:
            continue
        chunk = os.read(requests, 1 << 16)
        if not chunk:
            return 0  # the supervisor is gone or stopped: workers run on, as after its exec launches
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            try:
                request = json.loads(line)
                ready, done = os.pipe()
                pid = os.fork()
            except (ValueError, OSError) as exc:
                _write(replies, {"error": f"{type(exc).__name__}: {exc}"})
                continue
            if pid == 0:
                os.close(ready)
                _become_worker(request, done, wakeup)
            os.close(done)
            why = _read_all(ready)
            os.close(ready)
            if not why and request.get("exit"):
                report.add(pid)  # reaped at the earliest by the next _reap, after this reply
            _write(replies, {"error": f"the child could not become the worker: {why}"} if why else {"pid": pid})


def main() -> int:
    server = os.getpid()
    try:
        return serve()
    except BrokenPipeError:
        if os.getpid() != server:
            raise  # a worker's own error, not the fork server's
        return 0  # the supervisor stopped before it read an answer: nothing left to serve


if __name__ == "__main__":  # python -m gale.worker.zygote (started by a supervisor)
    sys.exit(main())
