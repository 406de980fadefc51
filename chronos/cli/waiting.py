"""One line on stderr when a command waits on Kafka longer than a person expects."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: A command answered within this is not worth a word.
NOTICE_AFTER_S = 2.0


@contextmanager
def waiting_notice(bootstrap: str, timeout_s: float) -> Iterator[None]:
    """Print once, after :data:`NOTICE_AFTER_S`, that the command still waits for Kafka."""
    timer = threading.Timer(
        NOTICE_AFTER_S,
        lambda: print(
            f"chronos: waiting for Kafka at {bootstrap} to acknowledge "
            f"(gives up after {timeout_s:.0f} s)...",
            file=sys.stderr,
            flush=True,
        ),
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
