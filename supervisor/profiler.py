"""CPU profiles of a worker with py-spy, run by its supervisor (Storm's profiling actions).

``py-spy record`` samples the worker's Python stacks from outside (ptrace: the supervisor's user,
or root) for a bounded time at a bounded rate and writes a flame graph SVG into the worker's
artifacts directory, where the log server shows it. ``--nonblocking``: the worker is never paused
(a paused worker would miss heartbeats); ``--threads``: the flame graph is split by thread (the
executor threads, the transfer, heartbeats).

Limits: :data:`DURATION_MAX` seconds, :data:`RATE_MAX` samples a second, one profile per worker at
a time and :data:`CONCURRENT_MAX` per supervisor. A worker that exits during its profile is
reported (:class:`WorkerExited`, with what py-spy wrote of it).
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gale.errors import GaleError

DURATION_DEFAULT = 10
DURATION_MAX = 60
RATE_DEFAULT = 100
RATE_MAX = 250
CONCURRENT_MAX = 2
#: what py-spy may take beyond the profile's duration (attach, write the SVG)
SLACK_SECS = 20.0


class ProfileError(GaleError):
    """The profile could not be taken (py-spy missing, refused, failed)."""


class ProfileBusy(ProfileError):
    """This worker is already being profiled, or the supervisor's profiles are all in use."""


class WorkerExited(ProfileError):
    """The worker exited before its profile ended."""

    def __init__(self, message: str, output: str | None):
        super().__init__(message)
        self.output = output


@dataclass(frozen=True)
class Profile:
    output: Path
    duration_secs: float
    samples: int | None


def check_limits(duration: int, rate: int) -> None:
    if not 1 <= duration <= DURATION_MAX:
        raise ProfileError(f"duration {duration} s is out of range: 1 to {DURATION_MAX} s")
    if not 1 <= rate <= RATE_MAX:
        raise ProfileError(f"rate {rate} is out of range: 1 to {RATE_MAX} samples a second")


def py_spy_binary() -> str | None:
    """py-spy beside this interpreter (a virtual environment's bin) or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def command(binary: str, pid: int, duration: int, rate: int, output: Path) -> list[str]:
    return [binary, "record", "--pid", str(pid), "--duration", str(duration), "--rate", str(rate),
            "--format", "flamegraph", "--output", str(output), "--nonblocking", "--threads"]


def _samples(text: str) -> int | None:
    marker = "Samples: "
    if marker not in text:
        return None
    digits = text.split(marker, 1)[1].split()[0]
    return int(digits) if digits.isdigit() else None


_TITLE = re.compile(r'(<text id="title"[^>]*>)[^<]*(</text>)')


def retitle(svg: Path, title: str) -> None:
    """Replace py-spy's title (its command line, with the host's paths) by what was profiled."""
    try:
        text = svg.read_text()
    except OSError:
        return
    svg.write_text(_TITLE.sub(lambda m: m.group(1) + html.escape(title) + m.group(2), text, count=1))


class Profiler:
    """Runs py-spy, at most one profile per worker and :data:`CONCURRENT_MAX` at once."""

    def __init__(self, binary: Callable[[], str | None] = py_spy_binary):
        self.binary = binary
        self._lock = threading.Lock()
        self._running: set[str] = set()

    def record(self, worker: str, pid: int, alive: Callable[[], bool], duration: int, rate: int,
               output: Path) -> Profile:
        """Profile ``pid`` (worker ``worker``) into ``output``; ``alive()`` says whether the worker
        still runs (the same process: not a reused pid)."""
        check_limits(duration, rate)
        binary = self.binary()
        if binary is None:
            raise ProfileError("py-spy is not installed on this supervisor's host (pip install py-spy; it comes with "
                               "Gale's dependencies)")
        with self._lock:
            if worker in self._running:
                raise ProfileBusy(f"worker {worker} is being profiled already: wait for that profile to end")
            if len(self._running) >= CONCURRENT_MAX:
                raise ProfileBusy(f"this supervisor runs {CONCURRENT_MAX} profiles already: try again when one ended")
            self._running.add(worker)
        started = time.monotonic()
        try:
            try:
                proc = subprocess.run(command(binary, pid, duration, rate, output), capture_output=True, text=True,
                                      timeout=duration + SLACK_SECS)
            except subprocess.TimeoutExpired:
                raise ProfileError(f"py-spy did not finish within {duration + SLACK_SECS:.0f} s") from None
            took = time.monotonic() - started
            text = (proc.stdout or "") + (proc.stderr or "")
            if not alive() or "process exited" in text:
                partial = str(output) if output.exists() else None
                raise WorkerExited(f"the worker (pid {pid}) exited {took:.1f} s into its {duration} s profile"
                                   + ("; what was sampled until then is kept" if partial else ""), partial)
            if proc.returncode != 0 or not output.exists():
                last = text.strip().splitlines()[-1] if text.strip() else f"exit code {proc.returncode}"
                raise ProfileError(f"py-spy failed on pid {pid}: {last} (it needs ptrace: run the supervisor as the "
                                   "workers' user, with CAP_SYS_PTRACE or kernel.yama.ptrace_scope=0)")
            retitle(output, f"worker {worker} (pid {pid}): {duration} s at {rate} samples/s")
            return Profile(output=output, duration_secs=round(took, 3), samples=_samples(text))
        finally:
            with self._lock:
                self._running.discard(worker)
