"""A pytest plugin that runs Bytewax's own test suite on Gale: ``bytewax.testing.run_main`` and
``cluster_main`` become :func:`gale.bytewax.run_main` and :func:`gale.bytewax.cluster_main` before any
test module imports them, so every dataflow those tests run executes on Gale's runtime.

Bytewax's tests are not part of this repository. Fetch its repository at the tag of the supported
version and run its operator tests from there (docs/bytewax.md, "Conformance")::

    git -C bytewax checkout v0.21.1
    cd bytewax && PYTHONPATH=<gale checkout> <gale venv>/bin/python -m pytest -p tests.bytewax_conformance \\
        pytests/operators pytests/operators/windowing -q

Their benchmarks (the ``benchmark`` fixture of pytest-benchmark, which Bytewax skips in its own runs
with ``--benchmark-skip``) are skipped here too.
"""

from __future__ import annotations

import bytewax.testing
import pytest

import gale.bytewax

bytewax.testing.run_main = gale.bytewax.run_main
bytewax.testing.cluster_main = gale.bytewax.cluster_main


@pytest.fixture
def benchmark():
    pytest.skip("a benchmark of Bytewax's engine (skipped as Bytewax's own runs do, --benchmark-skip)")
