"""The ``chronos`` command's first module: signals handled from the first moment of start-up.

Why a module of its own: everything else takes time to import (a loaded machine took 0.68 s for
``chronos.cli.main`` alone, more for the node's libraries), and a SIGTERM meanwhile found
Python's default handling: the node died with exit code -15 instead of stopping cleanly. Here
only ``signal``, ``sys`` and ``early.py`` (the handlers, ``signal`` alone) are imported before
the handlers are set. Until a command installs
its own handling (the node, ``chronos dev``), SIGTERM or SIGINT ends the command at once with
exit code 0 and a line on stderr: nothing has started that could need draining. Other commands
get Python's default handling back when they start (``early.hand_back``).
"""

from __future__ import annotations

import signal
import sys

from chronos.cli.early import StoppedEarly, install


def _stopped_line(name: str) -> str:
    """The line saying so: one JSON record when the command had set up JSON logs (a log
    pipeline reads nothing else), else plain text."""
    text = f"chronos: stopped by {name} during start-up; nothing had started"
    # Nothing is imported here: the signal may have interrupted an import (asyncio's, seen in
    # CI), and importing structlog again then failed on the half-made package (exit 1).
    # Logs configured as JSON mean structlog was imported whole before.
    structlog = sys.modules.get("structlog")
    if structlog is None:
        return text
    try:
        if not structlog.is_configured():
            return text
        last = structlog.get_config()["processors"][-1]
        if not isinstance(last, structlog.processors.JSONRenderer):
            return text
    except (AttributeError, IndexError):  # its own import was the one interrupted
        return text
    import json
    from datetime import UTC, datetime

    return json.dumps(
        {
            "event": "stopped_during_start_up",
            "signal": name,
            "message": text,
            "level": "warning",
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        }
    )


def main() -> int:
    """Install the early handlers, then run the command (``chronos.cli.main``)."""
    install()
    try:
        from chronos.cli.main import main as command

        return command()
    except StoppedEarly as stop:
        print(_stopped_line(signal.Signals(stop.signum).name), file=sys.stderr)
        return 0


if __name__ == "__main__":
    sys.exit(main())
