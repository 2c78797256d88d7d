"""What a process forked by the worker fork server sees (run as ``python -m tests.fork_probe``, or
forked with ``module="tests.fork_probe"``): writes it as one JSON line to its standard output, then
blocks opening the FIFO named by its first argument (so a test can look at the live process) and
exits with the code its second argument gives."""

from __future__ import annotations

import json
import os
import random
import sys

import numpy as np


def main() -> None:
    fifo, code = sys.argv[1], int(sys.argv[2])
    print(json.dumps({
        "pid": os.getpid(), "sid": os.getsid(0), "pgid": os.getpgid(0), "cwd": os.getcwd(), "path0": sys.path[0],
        "argv": sys.argv, "env": os.environ.get("FORK_PROBE"), "hashseed": os.environ.get("PYTHONHASHSEED"),
        "random": random.random(), "numpy_random": float(np.random.random()), "main": __name__,
        "stdin": os.read(0, 10).decode(),
        "loaded": sorted(m for m in ("gale.worker.daemon", "gale.nimbus.serve") if m in sys.modules),
        # the next root/edge id a worker's collectors would draw (None where the fork server did not import them)
        "tuple_id": sys.modules["gale.worker.runtime.collector"]._rand(64) if "gale.worker.runtime.collector" in sys.modules else None,
    }), flush=True)
    print("the probe's standard error", file=sys.stderr, flush=True)
    with open(fifo):  # blocks until the test opens the other end
        pass
    sys.exit(code)


if __name__ == "__main__":
    main()
