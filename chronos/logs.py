"""Logging set-up: structlog key/value events, configured once at the entry point."""

from __future__ import annotations

import logging
import sys
from typing import TextIO, cast

import structlog

from chronos.settings import LogSettings


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at each write, not the stream it was when logging
    was configured: a command run in-process (tests) may swap and close its stderr, and a
    logger bound to the closed one would fail in every thread that logs afterwards."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(settings: LogSettings, librdkafka_level: int = logging.WARNING) -> None:
    """Route structlog and stdlib logs (librdkafka's included, from ``librdkafka_level`` up, or
    all of them at ``debug``) to stderr: stdout holds a command's results only."""
    level = getattr(logging, settings.level.upper())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if settings.format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(
        level=max(level, logging.WARNING),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("librdkafka").setLevel(
        logging.DEBUG if settings.level == "debug" else librdkafka_level
    )
