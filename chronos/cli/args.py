"""Argument parsing helpers shared by subcommands (durations, headers, repeat, settings)."""

from __future__ import annotations

import argparse
from pathlib import Path

from chronos.errors import ValidationError
from chronos.repeat import Repeat, RepeatKind
from chronos.settings import ChronosSettings, load_settings
from chronos.validation import parse_duration_ms


def duration_ms(text: str) -> int:
    """``250ms``, ``5s``, ``2m``, ``1h``, ``1d``; a bare number is seconds."""
    try:
        return parse_duration_ms(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc


def header(text: str) -> tuple[str, str]:
    """``name=value``."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not a header like name=value")
    return name, value


def repeat(text: str) -> Repeat:
    """``fixed:INTERVAL:TIMES`` or ``exponential:INTERVAL:TIMES[:MULTIPLIER[:CAP]]``."""
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


def add_config(parser: argparse.ArgumentParser) -> None:
    """The ``--config`` option every subcommand shares."""
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="TOML settings file (CHRONOS_* environment variables override it)",
    )


def settings_from(args: argparse.Namespace) -> ChronosSettings:
    """Settings from ``--config`` and the environment."""
    path: Path | None = args.config
    return load_settings(path)
