"""Options and argument types the command line and the pipeline's spark-submit entry point
share: ``--config`` and the settings it names, durations.

Imports only argparse at the top: every subcommand module imports this to build ``chronos
--help``, which must not load the heavy libraries.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from chronos.errors import ValidationError

if TYPE_CHECKING:
    from chronos.settings import ChronosSettings


def duration_ms(text: str) -> int:
    """``250ms``, ``5s``, ``2m``, ``1h``, ``1d``; a bare number is seconds."""
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a delay cannot be negative (0 delivers now; --at takes a time in the past)"
        )
    from chronos.validation import parse_duration_ms

    try:
        return parse_duration_ms(text)
    except ValidationError as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc


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
    from chronos.settings import load_settings

    path: Path | None = args.config
    return load_settings(path)
