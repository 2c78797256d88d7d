"""Structured logging with structlog.

Daemons log JSON lines (one event per line); people at a terminal get readable console output.
Context is bound with :func:`bind` (daemon, topology id, component, task, port, ...) and carried on
every line; standard-library loggers (kazoo, uvicorn, py4j) are routed through the same renderer.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from typing import Any, TextIO

import structlog

_process_context: dict[str, Any] = {}


def _add_process_context(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    for key, value in _process_context.items():
        event.setdefault(key, value)
    return event


def _shared_processors() -> list[Any]:
    return [
        structlog.contextvars.merge_contextvars,
        _add_process_context,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]


def configure(
    *,
    fmt: str = "console",
    level: str | int = "INFO",
    stream: TextIO | None = None,
    file: str | os.PathLike[str] | None = None,
    max_bytes: int = 50 * 1024 * 1024,
    backups: int = 5,
    also_file: str | os.PathLike[str] | None = None,
    **context: Any,
) -> None:
    """Configure structlog and the standard library once per process.

    ``fmt`` is ``"json"`` (daemons) or ``"console"`` (people). With ``file``, lines go to a
    rotating file instead of ``stream`` (default stderr); with ``also_file``, to a rotating file as
    well (a supervisor's own log, which its log server shows). Extra keyword arguments are bound as
    context on every line of this process, from every thread (for example ``daemon="supervisor"``).
    """
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    handlers: list[logging.Handler] = []
    for path in (file, also_file):
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            handlers.append(logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups))
    if file is None:
        handlers.insert(0, logging.StreamHandler(stream or sys.stderr))
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else getattr(logging, str(level).upper(), logging.INFO))
    for noisy in ("kazoo.client", "py4j", "urllib3", "httpx", "httpcore", "kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # pika logs several error lines per failed reconnect attempt; the RabbitMQ spout reports
    # connection trouble itself (one event per attempt, with backoff)
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    structlog.configure(
        processors=_shared_processors() + [structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    _process_context.clear()
    _process_context.update(context)


def get_logger(name: str | None = None, **context: Any) -> Any:
    """A structlog logger; lines carry ``context`` plus whatever :func:`bind` added."""
    logger = structlog.get_logger(name)
    return logger.bind(**context) if context else logger


def bind(**context: Any) -> None:
    """Bind context for later lines of the current thread / asyncio task (e.g. a correlation id)."""
    structlog.contextvars.bind_contextvars(**context)
