"""CPU by process kind while a command runs (for example the whole test suite)::

    python -m benchmarks.suite_cpu -- make test
    python -m benchmarks.suite_cpu --interval 0.5 -- .venv/bin/python -m pytest -n 2 tests/test_spark.py

Every process on the machine is sampled every ``--interval`` seconds from ``/proc`` (psutil). A
process's CPU is the last sample's minus the first (CPU spent before the command started is not
counted); a process that lives less than one interval is missed, the command itself is read to its
end. A process is counted under the kind its command line had when last seen, so a shell script
that ``exec``\\s a JVM counts as the JVM; a child forked without ``exec`` shares its parent's command
line, and its kind. Prints ``cpu_<kind>: seconds s`` lines with the processes of that kind started
meanwhile, the largest first, then the total.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import psutil

#: (substring of the command line, kind), the first match wins; Python processes not listed are
#: named by their module or script
PYTHON_KINDS = [
    ("gale.worker", "gale-worker"), ("gale.nimbus.cli", "nimbus-cli"), ("gale.nimbus", "nimbus"),
    ("gale.supervisor", "supervisor"), ("pyspark", "pyspark-python"), ("exec(eval(sys.stdin", "pytest-xdist"),
    ("pytest", "pytest"), ("pip", "pip"),
]
JAVA_KINDS = [("zookeeper", "zookeeper-jvm"), ("spark", "spark-jvm"), ("kafka", "kafka-jvm")]


def kind(cmdline: Sequence[str], by_topology: bool = False) -> str:
    """What a process is, from its command line (pure); "" for none (a kernel thread, or a process
    that exited and awaits its parent: it keeps the kind it had). A worker forked from its
    supervisor's fork server carries its command line as one title (one string with spaces, then
    empty ones). ``by_topology`` names a worker by its topology's name (``gale-worker:<name>``)."""
    if len(cmdline) > 1 and " " in cmdline[0] and not any(cmdline[1:]):
        cmdline = cmdline[:1]
    if len(cmdline) == 1 and " " in cmdline[0]:
        cmdline = cmdline[0].split()
    if not cmdline:
        return ""
    if by_topology and "gale.worker.cli" in cmdline and "run" in cmdline:
        args = cmdline[cmdline.index("run") + 1:]
        if args:
            return f"gale-worker:{args[0].rsplit('-', 2)[0]}"  # an id is <name>-<counter>-<timestamp>
    exe = os.path.basename(cmdline[0])
    line = " ".join(cmdline)
    if exe == "java":
        return next((k for s, k in JAVA_KINDS if s in line.lower()), "other-jvm")
    if exe.startswith("python"):
        found = next((k for s, k in PYTHON_KINDS if s in line), None)
        if found:
            return found
        args = cmdline[1:]
        if len(args) >= 2 and args[0] == "-m":
            return f"python-{args[1]}"
        if args[:1] == ["-c"]:
            return "python-c"
        return f"python-{os.path.basename(args[0])}" if args else "python"
    return exe


@dataclass
class Ledger:
    """CPU seconds by kind from snapshots ``{(pid, create_time): (kind, cpu_secs)}`` (pure): the
    first snapshot is the baseline; a process's CPU counts from it (or from zero if it started later)."""

    base: dict[tuple[int, float], float] = field(default_factory=dict)
    last: dict[tuple[int, float], tuple[str, float]] = field(default_factory=dict)
    started: set[tuple[int, float]] = field(default_factory=set)
    _first: bool = True

    def observe(self, snapshot: Mapping[tuple[int, float], tuple[str, float]]) -> None:
        for key, (what, cpu) in snapshot.items():
            what = what or self.last.get(key, ("kernel",))[0]
            if key not in self.last:
                self.base[key] = cpu if self._first else 0.0
                if not self._first:
                    self.started.add(key)
            self.last[key] = (what, cpu)
        self._first = False

    def totals(self) -> tuple[Counter, Counter]:
        """(CPU seconds, processes started) by kind."""
        cpu: Counter = Counter()
        started: Counter = Counter()
        for key, (what, secs) in self.last.items():
            cpu[what] += secs - self.base[key]
            started[what] += key in self.started
        return cpu, started


def snapshot(by_topology: bool = False) -> dict[tuple[int, float], tuple[str, float]]:
    out = {}
    for p in psutil.process_iter(["pid", "create_time", "cmdline", "cpu_times"]):
        info = p.info
        times = info["cpu_times"]
        if times is None or info["create_time"] is None:
            continue  # gone or not ours to read
        out[(info["pid"], info["create_time"])] = (kind(info["cmdline"] or [], by_topology), times.user + times.system)
    return out


def exited(pid: int) -> bool:
    """Whether our child ``pid`` exited, without reaping it (its CPU stays readable until then)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--top", type=int, default=25, help="kinds to print")
    parser.add_argument("--by-topology", action="store_true", help="count workers by their topology's name")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run (after --)")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    ledger = Ledger()
    ledger.observe(snapshot(args.by_topology))
    started = time.monotonic()
    proc = subprocess.Popen(command)
    while not exited(proc.pid):
        time.sleep(args.interval)
        ledger.observe(snapshot(args.by_topology))
    ledger.observe(snapshot(args.by_topology))  # the command's own last CPU, read before it is reaped
    proc.wait()
    cpu, count = ledger.totals()
    for what, secs in cpu.most_common(args.top):
        print(f"cpu_{what}: {secs:.1f} s  (started_{what}: {count[what]})")
    print(f"cpu_total: {sum(cpu.values()):.1f} s")
    print(f"wall: {time.monotonic() - started:.1f} s")
    print(f"command_exit_code: {proc.returncode}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
