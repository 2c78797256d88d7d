"""Gale's exception hierarchy.

Every error a person can cause (bad config, bad topology, unknown topology name) derives from
:class:`GaleError` and carries a message that names what is wrong; daemons and the CLI print
``str(error)`` as is.
"""

from __future__ import annotations


class GaleError(Exception):
    """Base class of every error Gale raises on purpose."""


class ConfigError(GaleError, ValueError):
    """A configuration key or value is invalid; the message names the key and the problem."""


class CorruptRecordError(GaleError):
    """A znode or local file could not be decoded into the record it should hold."""

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"corrupt record at {path}: {problem}")


class TopologyError(GaleError, ValueError):
    """A topology definition is invalid; the message names the component/stream/field."""


class NotFoundError(GaleError, LookupError):
    """A named topology, supervisor or component does not exist."""
