"""A dependency of the Spark standalone topology: its functions run inside Python UDFs on Spark's
executors, which can import this module only from the code archive Gale ships to them.

``normalize`` holds while ``<control dir>/hold`` exists, after leaving a ``running-<pid>`` file
that names the executor's working directory: a test creates the hold file, waits until a batch is
held on the executor it wants to kill, kills it mid-batch, and removes the hold file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def normalize(word: str, control: str) -> str:
    hold = Path(control) / "hold"
    if hold.exists():
        marker = Path(control) / f"running-{os.getpid()}"
        if not marker.exists():
            marker.write_text(os.getcwd())
        deadline = time.monotonic() + 120
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return word.strip().lower()


def where() -> str:
    """The executor's working directory: under the Spark worker's work dir on an executor."""
    return os.getcwd()
