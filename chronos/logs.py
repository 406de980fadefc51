"""Logging set-up: structlog key/value events, configured once at the entry point."""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO, cast

import structlog

from chronos.settings import LogSettings


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at each write, not the stream it was when logging
    was configured: a command run in-process (tests) may swap and close its stderr, and a
    logger bound to the closed one would fail in every thread that logs afterwards.

    One instance serves structlog and the stdlib handler (librdkafka's lines), and each of
    them hands it a whole line: written and flushed under this lock, so two records never
    share a line (structlog's ``print`` wrote a record and its newline in two writes under
    its own lock, and a librdkafka line could land between them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            written = sys.stderr.write(text)
            sys.stderr.flush()
            return written

    def flush(self) -> None:
        with self._lock:
            sys.stderr.flush()


#: Repeats of one librdkafka line inside this window are counted, not written.
REPEAT_WINDOW_S = 10.0


class Throttle:
    """Says when a repeated event may be written again: once per ``window_s`` per key, and
    how many were held back since the last one written. Safe to share between threads (the
    callers are error paths, never the hot path).

    Parameters:
        window_s: how long repeats are held back.
        now: monotonic time source.
    """

    def __init__(
        self, window_s: float = REPEAT_WINDOW_S, now: Callable[[], float] = time.monotonic
    ) -> None:
        self._window_s = window_s
        self._now = now
        #: key -> (when last written, repeats held back since).
        self._seen: dict[object, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def admit(self, key: object) -> int | None:
        """None: hold this one back; else write it, saying how many were held back before."""
        now = self._now()
        with self._lock:
            written, held = self._seen.get(key, (-self._window_s, 0))
            if now - written < self._window_s:
                self._seen[key] = (written, held + 1)
                return None
            if len(self._seen) > _MAX_KEYS:
                self._seen.clear()  # bounded memory; at worst a line is written once more
            self._seen[key] = (now, 0)
            return held


class RepeatLimiter(logging.Filter):
    """Writes a librdkafka line once per ``window_s``, and the next one after the window with
    how many were held back (``repeated``). Why: while Kafka is down every client says
    "Connect ... failed" every few hundred ms; a node wrote about 20 such lines a second.

    Lines count as the same when they differ only in numbers (ports, ms, client ids) and in
    which client said them.

    ``throttle``: how long repeats are held back (``Throttle``'s window, by default
    ``REPEAT_WINDOW_S``).
    """

    def __init__(self, throttle: Throttle | None = None) -> None:
        super().__init__()
        self._throttle = throttle or Throttle()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, without_numbers(_text_of(record)))
        held = self._throttle.admit(key)
        if held is None:
            return False
        if held:
            record.repeated = held
        return True


_NUMBERS = re.compile(r"\d+")


def without_numbers(text: str) -> str:
    """``text`` with every number as ``#``: lines that differ only in ports, durations or
    client ids count as the same line."""
    return _NUMBERS.sub("#", text)


#: Distinct lines remembered at most.
_MAX_KEYS = 1000


def _text_of(record: logging.LogRecord) -> str:
    """A librdkafka line without the client that said it (``FAIL [client] text``)."""
    args = record.args
    if isinstance(args, tuple) and len(args) == 3:
        return f"{args[0]} {args[2]}"
    return record.getMessage()


def _librdkafka_fields(
    _logger: object, _name: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """A librdkafka line as fields (facility, client, message) instead of one string."""
    record = event_dict.get("_record")
    if isinstance(record, logging.LogRecord):
        # The formatter has already cleared the record's args: the rendered line is parsed.
        line = _LIBRDKAFKA_LINE.match(str(event_dict.get("event", "")))
        if record.name == LIBRDKAFKA and line is not None:
            event_dict["event"] = "librdkafka"
            event_dict["facility"], event_dict["client"], event_dict["message"] = line.groups()
        repeated = getattr(record, "repeated", None)
        if repeated:
            event_dict["repeated"] = repeated
    return event_dict


class _LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that hands its stream the record and its newline in one write (the
    stdlib's does too, then flushes apart: the stream's lock covers both here)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + self.terminator)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


#: How confluent-kafka renders a librdkafka line: ``FACILITY [client] text``.
_LIBRDKAFKA_LINE = re.compile(r"(\S+) \[([^\]]*)\] (.*)", re.DOTALL)
#: The stdlib logger librdkafka's lines arrive on (``chronos.kafka.clients``).
LIBRDKAFKA = "librdkafka"


def configure_logging(settings: LogSettings, librdkafka_level: int = logging.WARNING) -> None:
    """Route structlog and stdlib logs (librdkafka's included, from ``librdkafka_level`` up, or
    all of them at ``debug``) to stderr: stdout holds a command's results only. Every line has
    the chosen format, stdlib and librdkafka lines too (one JSON object per line in ``json``);
    repeated librdkafka lines are held back (``RepeatLimiter``)."""
    level = getattr(logging, settings.level.upper())
    stderr = _CurrentStderr()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if settings.format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(cast(TextIO, stderr)),
        cache_logger_on_first_use=True,
    )
    handler = _LineHandler(cast(TextIO, stderr))
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                stamp,
                _librdkafka_fields,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(max(level, logging.WARNING))
    librdkafka = logging.getLogger(LIBRDKAFKA)
    librdkafka.setLevel(logging.DEBUG if settings.level == "debug" else librdkafka_level)
    if not any(isinstance(f, RepeatLimiter) for f in librdkafka.filters):
        librdkafka.addFilter(RepeatLimiter())
