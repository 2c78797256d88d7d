"""A dependency of the Spark standalone topology: its functions run inside Python UDFs on Spark's
executors, which can import this module only from the code archive Gale ships to them."""

from __future__ import annotations

import os
import time


def normalize(word: str) -> str:
    time.sleep(0.001)  # a little work per row, so a batch lasts long enough to be interrupted
    return word.strip().lower()


def where() -> str:
    """The executor's working directory: under the Spark worker's work dir on an executor."""
    return os.getcwd()
