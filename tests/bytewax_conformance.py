"""A pytest plugin that runs Bytewax's own test suite on Gale: ``bytewax.testing.run_main`` and
``cluster_main`` become :func:`gale.bytewax.run_main` and :func:`gale.bytewax.cluster_main` before any
test module imports them, so every dataflow those tests run executes on Gale's runtime.

Bytewax's tests are not part of this repository. Fetch its repository at the tag of the supported
version and run its operator tests from there (docs/bytewax.md, "Conformance")::

    git -C bytewax checkout v0.21.1
    cd bytewax && PYTHONPATH=<gale checkout> <gale venv>/bin/python -m pytest -p tests.bytewax_conformance \\
        pytests/operators pytests/operators/windowing -q

Their benchmarks (the ``benchmark`` fixture of pytest-benchmark, which Bytewax skips in its own runs
with ``--benchmark-skip``) are skipped here too. ``GALE_BYTEWAX_FAST=0`` runs the library operators'
own Python instead of Gale's equivalents (``topology.bytewax.fast.operators: false``).
"""

from __future__ import annotations

import os

import bytewax.testing
import pytest

import gale.bytewax

if os.environ.get("GALE_BYTEWAX_FAST", "1") == "0":
    from gale.worker.bytewax.run import bound_topology, flow_conf, run_topology

    GENERIC = {"topology.bytewax.fast.operators": False}

    def _run_main(flow, *, epoch_interval=None, recovery_config=None):
        run_topology(bound_topology(flow, flow_conf(1, epoch_interval, recovery_config, GENERIC)))

    def _cluster_main(flow, addresses, proc_id, *, epoch_interval=None, recovery_config=None,
                      worker_count_per_proc=1):
        run_topology(bound_topology(flow, flow_conf(worker_count_per_proc, epoch_interval, recovery_config, GENERIC)))

    bytewax.testing.run_main = _run_main
    bytewax.testing.cluster_main = _cluster_main
else:
    bytewax.testing.run_main = gale.bytewax.run_main
    bytewax.testing.cluster_main = gale.bytewax.cluster_main


@pytest.fixture
def benchmark():
    pytest.skip("a benchmark of Bytewax's engine (skipped as Bytewax's own runs do, --benchmark-skip)")
