"""Bytewax dataflows on Gale: ``from gale.bytewax import run_main, cluster_main``.

An unmodified Bytewax file runs on Gale (docs/bytewax.md)::

    nimbus local wordcount.py                   # its `flow` is a bytewax.dataflow.Dataflow
    nimbus submit wordcount.py -c topology.workers=2
    python -m gale.bytewax wordcount:flow -w 2  # the shape of python -m bytewax.run

:func:`run_main` and :func:`cluster_main` take the arguments of ``bytewax.testing``'s functions of
the same names, so a Bytewax test suite can swap them in. The dataflow → topology translation is
pure (``gale.bytewax.plan``, ``gale.bytewax.topology``); what runs it lives in the worker
(``gale.worker.bytewax``) and is imported on first use.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gale.bytewax.plan import SUPPORTED_VERSIONS, check_version, is_dataflow

__all__ = ["SUPPORTED_VERSIONS", "check_version", "cluster_main", "is_dataflow", "main", "run_main"]


def run_main(flow: Any, *, epoch_interval: timedelta | None = None, recovery_config: Any = None) -> None:
    """Run ``flow`` in this process until its input ends (``bytewax.testing.run_main``'s arguments):
    ``epoch_interval`` is the checkpoint interval, ``recovery_config`` a ``bytewax.recovery.RecoveryConfig``
    whose directory keeps the state (SQLite) between runs. User code that raises stops the run with
    ``RuntimeError`` (the user's exception as its cause)."""
    from gale.worker.bytewax import run

    run.run_main(flow, epoch_interval=epoch_interval, recovery_config=recovery_config)


def cluster_main(flow: Any, addresses: list[str], proc_id: int, *, epoch_interval: timedelta | None = None,
                 recovery_config: Any = None, worker_count_per_proc: int = 1) -> None:
    """``bytewax.testing.cluster_main``'s arguments: ``worker_count_per_proc`` is every step's
    parallelism; ``addresses`` must name at most this process (a dataflow over several processes is
    a topology on a Gale cluster: ``nimbus submit``)."""
    from gale.worker.bytewax import run

    run.cluster_main(flow, addresses, proc_id, epoch_interval=epoch_interval, recovery_config=recovery_config,
                     worker_count_per_proc=worker_count_per_proc)


def main(argv: list[str] | None = None) -> int:
    """``python -m gale.bytewax <module>[:<flow>] [-w N] [-r DIR -s SECS]``: the shape of
    ``python -m bytewax.run`` (``gale.worker.bytewax.cli``)."""
    from gale.worker.bytewax import cli

    return cli.main(argv)
