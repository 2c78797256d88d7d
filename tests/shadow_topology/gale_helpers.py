"""The topology's helpers, using its modules named like Gale's source folders."""

from __future__ import annotations

import json
import os

import common
import nimbus
import supervisor
import worker


def transform(word: str) -> str:
    return supervisor.tag(f"{common.PREFIX}:{worker.shout(word)}{nimbus.SUFFIX}")


def origins() -> dict[str, str]:
    """Where each of the four modules was loaded from."""
    return {m.__name__: os.path.abspath(m.__file__) for m in (common, nimbus, supervisor, worker)}


def record(out_dir: str, task: int, line: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"task-{task}.jsonl"), "a") as fh:
        fh.write(json.dumps(line) + "\n")
