"""Tests that need a real component the machine may lack (Prometheus, Chromium, systemd, root...).

``requires(available, reason)`` marks a test or module (``pytestmark``); ``require(available,
reason)`` does the same inside a test or fixture. On a developer's machine a missing component
skips the test; under ``make test`` (which installs every component and exports
``GALE_REQUIRE_COMPONENTS=1``) or when ``CI`` is set, the test FAILS with the reason instead, so a
green run there means every component was exercised. ``tests/conftest.py`` applies the marks and
turns any other skip into a failure there too (except the ``slow`` soak tests, deselected by design).
"""

from __future__ import annotations

import os

import pytest


def components_required() -> bool:
    """Under ``make test`` or CI every real component is installed, so none may be skipped."""
    return os.environ.get("GALE_REQUIRE_COMPONENTS", "") not in ("", "0") or os.environ.get("CI", "") not in (
        "", "0", "false")


def requires(available: bool, reason: str) -> pytest.MarkDecorator:
    """Mark a test (or, as ``pytestmark``, a module) that needs a real component: skipped when it is
    missing, except under :func:`components_required`, where the test fails with ``reason``."""
    return pytest.mark.requires_component(available=bool(available), reason=reason)


def require(available: bool, reason: str) -> None:
    """:func:`requires` inside a test or fixture."""
    if not available:
        if components_required():
            pytest.fail(f"required component missing: {reason}", pytrace=False)
        pytest.skip(reason)
