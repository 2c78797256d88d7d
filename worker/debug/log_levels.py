"""Timed log levels (Storm's dynamic log level): a worker follows its topology's ``LogConfig``.

Nimbus keeps ``/storm/logconfigs/<topology-id>`` (``POST /api/v1/topology/<id>/logconfig``): logger
name (``ROOT``: the root logger; else a standard-library logger name, e.g. a component's module or
``gale.worker``) → the level to set and when to put it back. Every worker of the topology — or,
when the entry names components, every worker running one of them — sets the level until then,
and a worker started meanwhile (a restart, a rebalance) picks up what is still in force. At the
time, or when the entry is removed, the logger gets back the level it had before.

:func:`plan` decides (pure); :class:`LogLevels` applies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gale.records import LogConfig

ROOT = "ROOT"
LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
          "CRITICAL": logging.CRITICAL}


def plan(config: LogConfig | None, now: float, running: Iterable[str]) -> tuple[dict[str, int], float | None]:
    """(logger → level in force now for a worker running ``running``, when the next one ends)."""
    if config is None:
        return {}, None
    here = set(running)
    out: dict[str, int] = {}
    next_end: float | None = None
    for name, entry in config.named_logger_level.items():
        if entry.reset_log_level_timeout_epoch <= now:
            continue
        if entry.components and not here.intersection(entry.components):
            continue
        out[name] = LEVELS[entry.target_log_level]
        end = entry.reset_log_level_timeout_epoch
        next_end = end if next_end is None else min(next_end, end)
    return out, next_end


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


class LogLevels:
    """Sets loggers' levels and remembers what they were, to put them back."""

    def __init__(self) -> None:
        self.original: dict[str, int] = {}

    def apply(self, wanted: dict[str, int]) -> list[str]:
        """Loggers in ``wanted`` get their level; the others changed before get theirs back.
        Returns what changed, for the worker's log."""
        changed = []
        for name, level in sorted(wanted.items()):
            logger = _logger(name)
            if name not in self.original:
                self.original[name] = logger.level
            if logger.level != level:
                logger.setLevel(level)
                changed.append(f"{name}={logging.getLevelName(level)}")
        for name in sorted(set(self.original) - set(wanted)):
            level = self.original.pop(name)
            _logger(name).setLevel(level)
            changed.append(f"{name}={logging.getLevelName(level) if level else 'NOTSET'} (reset)")
        return changed
