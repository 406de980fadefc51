"""Argument types of the subcommands: headers, repeats, signed values (``--config`` and
durations: ``chronos/arguments.py``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from chronos.arguments import duration_ms
from chronos.repeat import Repeat, RepeatKind

# Subcommand modules import only argparse and this module at their top: every one of them is
# imported to build ``chronos --help``, so what they need to run is imported in their main().

#: Options whose value may start with '-' (a negative delay means "deliver now").
SIGNED_OPTIONS = frozenset({"--delay"})


def attach_signed_values(argv: Sequence[str]) -> list[str]:
    """``--delay -5s`` as ``--delay=-5s``: argparse takes a value starting with '-' for an
    option of its own and fails with "expected one argument"."""
    out: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        following = argv[index + 1] if index + 1 < len(argv) else None
        if arg in SIGNED_OPTIONS and following is not None and following.startswith("-"):
            out.append(f"{arg}={following}")
            index += 2
            continue
        out.append(arg)
        index += 1
    return out


def header(text: str) -> tuple[str, str]:
    """``name=value``."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not a header like name=value")
    return name, value


def repeat(text: str) -> Repeat:
    """``fixed:INTERVAL:TIMES`` or ``exponential:INTERVAL:TIMES[:MULTIPLIER[:CAP]]``; the
    catch-up policy is ``send --catch-up``'s."""
    parts = text.split(":")
    try:
        if parts[0] == "fixed" and len(parts) == 3:
            return Repeat(RepeatKind.FIXED, duration_ms(parts[1]), int(parts[2]))
        if parts[0] == "exponential" and 3 <= len(parts) <= 5:
            multiplier = int(parts[3]) if len(parts) > 3 else 2
            cap = duration_ms(parts[4]) if len(parts) > 4 else 86_400_000
            return Repeat(
                RepeatKind.EXPONENTIAL, duration_ms(parts[1]), int(parts[2]), multiplier, cap
            )
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"{text!r} is not fixed:INTERVAL:TIMES or exponential:INTERVAL:TIMES[:MULT[:CAP]]"
    )
