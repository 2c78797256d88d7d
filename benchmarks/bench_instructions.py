"""Instructions per sentence of the per-tuple path, counted by callgrind: a figure a noisy machine
does not disturb, for comparing two builds or two commits of the data path.

Run: ``.venv/bin/python -m benchmarks.bench_instructions [--small N] [--large M] [--acking on|off|both]``

Runs ``bench_peers``' Gale engine (local mode, one executor thread: spout → split → keyed count
emitting every update, acking on or off) under ``valgrind --tool=callgrind`` twice, with ``N`` and
with ``M`` sentences of ten words, and prints ``gale_{acking,noacking}_instructions_per_sentence``:
the difference of the two totals over ``M - N`` (the start-up cancels out). Building the data set
and the topology grows with the sentences too, so it is counted alone the same way and printed
(``gale_harness_instructions_per_sentence``), and ``…_run_instructions_per_sentence`` is the total
less it: the per-tuple path alone. Set
``GALE_PURE_PYTHON=1`` to count the pure-Python build. valgrind counts the instructions of the
process whatever else the machine does (two runs of the same build agree within 0.1%); it is slow
(about 30 s a run at 25,000 sentences on the compiled build).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(n: int, mode: str) -> None:
    """What one callgrind run executes: the engine over ``n`` sentences (``mode`` "on" or "off":
    acking), or, for "harness", only what the run does before the engine starts (build the data set
    and the topology), whose instructions also grow with ``n``."""
    from benchmarks.bench_peers import gale_topology, run_gale, sentences
    from gale.log import configure

    configure(fmt="console", level="WARNING")
    data = sentences(n)
    if mode == "harness":
        gale_topology(data)
        return
    run_gale(data, mode == "on")


def callgrind_total(*args: str, children: bool = False) -> int:
    """Instructions that ``python args…`` executes under callgrind (user space: the kernel's part of a
    system call is not counted); ``children``: its child processes too, summed."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={Path(tmp) / 'callgrind.%p'}",
             *(["--trace-children=yes"] if children else []), sys.executable, *args],
            cwd=ROOT, capture_output=True, text=True, check=True)
    found = re.findall(r"Collected : (\d+)", proc.stderr)
    if not found:
        raise RuntimeError(f"callgrind printed no total:\n{proc.stderr[-2000:]}")
    return sum(int(x) for x in found)


def instructions(n: int, mode: str) -> int:
    return callgrind_total("-m", "benchmarks.bench_instructions", "--once", str(n), mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=5_000)
    parser.add_argument("--large", type=int, default=25_000)
    parser.add_argument("--acking", choices=("on", "off", "both"), default="both")
    parser.add_argument("--once", nargs=2, metavar=("N", "MODE"), help=argparse.SUPPRESS)  # MODE: on, off, harness
    args = parser.parse_args()
    if args.once:
        run_once(int(args.once[0]), args.once[1])
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench_instructions: valgrind is not installed (apt-get install -y valgrind)")

    def per_sentence(mode: str) -> float:
        return (instructions(args.large, mode) - instructions(args.small, mode)) / (args.large - args.small)

    harness = per_sentence("harness")
    print(f"gale_harness_instructions_per_sentence: {harness:,.0f} instructions (building the data set and "
          "the topology, counted in the totals below)", flush=True)
    for mode in {"on": ["on"], "off": ["off"], "both": ["on", "off"]}[args.acking]:
        total = per_sentence(mode)
        name = "gale_acking" if mode == "on" else "gale_noacking"
        print(f"{name}_instructions_per_sentence: {total:,.0f} instructions", flush=True)
        print(f"{name}_run_instructions_per_sentence: {total - harness:,.0f} instructions (the run alone)",
              flush=True)


if __name__ == "__main__":
    main()
