"""One shell subprocess: started with pipes, read by a thread, written without blocking.

* **stdout** — a reader thread per child reads whatever arrives (``os.read`` of up to 1 MiB),
  decodes it into messages with the codec and hands each batch to ``deliver`` (the executor's
  inbox; the executor thread applies them — a reader thread never touches a collector). The last
  thing delivered is :class:`Exited` (EOF, with the exit code) or the :class:`ProtocolError` that
  stopped the decoder.
* **stderr** — a second thread drains it line by line into the worker log and keeps the last
  lines for error reports (a Python traceback at exit lands there).
* **stdin** — non-blocking: :meth:`ChildProcess.write` writes what the pipe takes and keeps the
  rest; the owner calls :meth:`flush` on its next round. One ``write`` carries a whole batch of
  framed messages, and the executor thread never blocks on a slow child.

The child stays in the worker's process group, so a supervisor that kills the worker's group kills
it too; a child whose parent vanished sees EOF on stdin (pystorm exits then).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gale.log import get_logger
from gale.worker.multilang.codec import Codec, ProtocolError

log = get_logger("multilang")

READ_BYTES = 1 << 20
STDERR_LINES = 20


@dataclass(frozen=True, slots=True)
class Exited:
    """The child closed its stdout: it exited with ``code`` (negative: killed by that signal)."""

    code: int | None


def resolve_command(command: Sequence[str], cwd: str) -> list[str]:
    """``command`` with its program found: a bare name on PATH, else beside the worker's Python
    (so ``streamparse_run`` or ``pip``-installed scripts of Gale's own environment are found); a
    relative path is relative to ``cwd`` (as ``subprocess`` does with ``cwd``)."""
    argv = list(command)
    program = argv[0]
    if os.sep not in program:
        found = shutil.which(program)
        if found is None:
            beside = Path(sys.executable).parent / program
            if beside.is_file() and os.access(beside, os.X_OK):
                found = str(beside)
        if found is not None:
            argv[0] = found
    elif not os.path.isabs(program):
        argv[0] = os.path.normpath(os.path.join(cwd, program))
    return argv


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment plus ``extra``; an extra ``PATH`` is appended, as Storm does."""
    env = dict(os.environ)
    for key, value in extra.items():
        if key == "PATH" and env.get("PATH"):
            env["PATH"] = env["PATH"] + os.pathsep + value
        else:
            env[key] = str(value)
    return env


class ChildProcess:
    """A started subprocess and its three pipes. ``deliver(items)`` is called from the reader
    thread with a list of messages, then finally with an :class:`Exited` or a
    :class:`ProtocolError`."""

    def __init__(self, argv: Sequence[str], cwd: str, env: Mapping[str, str], codec: Codec,
                 deliver: Callable[[Any], None], name: str):
        self.argv = list(argv)
        self.cwd = cwd
        self.env = dict(env)
        self.codec = codec
        self.deliver = deliver
        self.name = name
        self.proc: subprocess.Popen | None = None
        self._out = bytearray()
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_LINES)
        self.decoder = codec.decoder()
        self.broken = False  # stdin gone (the child exited or closed it)
        self._stderr_reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        """Start the process (``OSError`` if it cannot be: no such program, no permission)."""
        self.proc = subprocess.Popen(
            self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, bufsize=0, close_fds=True,
        )
        fd = self.proc.stdin.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        threading.Thread(target=self._read, name=f"{self.name}-stdout", daemon=True).start()
        self._stderr_reader = threading.Thread(
            target=self._drain_stderr, name=f"{self.name}-stderr", daemon=True)
        self._stderr_reader.start()

    # ------------------------------------------------------------------ writing (owner thread)

    @property
    def backlog(self) -> int:
        """Bytes written but not yet taken by the pipe."""
        return len(self._out)

    def write(self, data: bytes) -> None:
        self._out += data
        self.flush()

    def flush(self) -> bool:
        """Write what the pipe takes now; True when nothing is left."""
        out = self._out
        if not out or self.broken or self.proc is None:
            return not out
        fd = self.proc.stdin.fileno()
        try:
            while out:
                n = os.write(fd, out)
                del out[:n]
        except BlockingIOError:
            return False
        except OSError as exc:  # EPIPE: the child is gone; its reader reports how
            if exc.errno not in (errno.EPIPE, errno.EBADF):
                log.warning("subprocess-write-failed", child=self.name, error=str(exc))
            self.broken = True
            out.clear()
        return True

    # ------------------------------------------------------------------ reading (threads)

    def _read(self) -> None:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        decoder = self.decoder
        try:
            while True:
                data = os.read(fd, READ_BYTES)
                if not data:
                    decoder.finish()
                    break
                msgs = decoder.feed(data)
                if msgs:
                    self.deliver(msgs)
        except ProtocolError as exc:
            if exc.messages:
                self.deliver(exc.messages)
            self.deliver(exc)
            return
        except OSError as exc:  # closed under us (the owner killed the child)
            log.debug("subprocess-read-ended", child=self.name, error=str(exc))
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # closed its stdout but lives on: not a usable child
            proc.kill()
            code = proc.wait()
        self.deliver(Exited(code))

    def _drain_stderr(self) -> None:
        proc = self.proc
        assert proc is not None and proc.stderr is not None
        try:
            for raw in iter(proc.stderr.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self.stderr_tail.append(line)
                log.info("subprocess-stderr", child=self.name, pid=proc.pid, line=line)
        except (OSError, ValueError):
            pass

    # ------------------------------------------------------------------ stopping

    def close_stdin(self) -> None:
        """EOF to the child (pystorm exits on it). Whatever was unwritten is dropped."""
        self._out.clear()
        if self.proc is not None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self.broken = True

    def terminate(self) -> None:
        """SIGTERM (Storm's ``Process.destroy``)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.terminate()
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL now and close our ends (the threads end on EOF)."""
        proc = self.proc
        if proc is None:
            return
        self.close_stdin()
        if proc.poll() is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass

    def exited(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def stderr_text(self, lines: int = 5, wait: float = 0.0) -> str:
        """The last ``lines`` lines of the child's stderr. ``wait`` > 0 (the child is dead or killed):
        first read its stderr to EOF, for at most ``wait`` seconds, so the lines it wrote just
        before it died are in the report (a grandchild holding the pipe open bounds the wait)."""
        reader = self._stderr_reader
        if wait > 0 and reader is not None and reader is not threading.current_thread():
            reader.join(wait)
        tail = list(self.stderr_tail)[-lines:]
        return "\n".join(tail)


def stop_children(children: Sequence[ChildProcess], grace: float, clock: Any) -> None:
    """Stop children together within ``grace`` seconds: EOF on stdin and SIGTERM at once (Storm's
    ``destroy``), SIGKILL for any still alive at the end. Their pending tuples replay from the
    spouts (the worker is stopping); the bound keeps the worker within its own stop deadline."""
    live = [c for c in children if c.proc is not None]
    for c in live:
        c.flush()
        c.close_stdin()
        c.terminate()
    deadline = clock.monotonic() + grace
    for c in live:
        remaining = deadline - clock.monotonic()
        if remaining > 0 and c.proc.poll() is None:
            try:
                c.proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                pass
    for c in live:
        if c.proc.poll() is None:
            c.kill()
            try:
                c.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL ignored: nothing more to do
                log.warning("subprocess-did-not-die", child=c.name, pid=c.pid)
