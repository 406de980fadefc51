"""Entry point of the ``chronos`` command.

Exit codes: 0 success, 1 runtime failure (Kafka unreachable, demo or check failed),
2 usage or configuration error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from chronos import __version__
from chronos.cli import (
    bench,
    check,
    checkpoint,
    cluster,
    demo,
    dev,
    group,
    pipeline,
    policy,
    proxy_cmd,
    run,
    send,
    status,
    tail,
    token,
    topics,
)
from chronos.cli.args import attach_signed_values
from chronos.cli.early import hand_back
from chronos.errors import ChronosError, ConfigError, NotAcknowledged, ValidationError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chronos", description="Delay-message broker for Kafka")
    parser.add_argument("--version", action="version", version=f"chronos {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (
        run,
        proxy_cmd,
        dev,
        send,
        status,
        tail,
        demo,
        check,
        checkpoint,
        group,
        cluster,
        topics,
        policy,
        token,
        bench,
        pipeline,
    )
    for module in commands:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(attach_signed_values(sys.argv[1:] if argv is None else argv))
    from chronos.logs import configure_logging
    from chronos.settings import LogSettings

    # Until a command configures its own (run, proxy, dev): errors only, on stderr; librdkafka's
    # connection retries left to the one clear error a command ends with.
    configure_logging(LogSettings(level="error"), librdkafka_level=logging.CRITICAL)
    hand_back(keep=getattr(args, "early_signals", False))
    try:
        code: int = args.func(args)
        return code
    except (ConfigError, ValidationError) as exc:
        print(f"chronos: {exc}", file=sys.stderr)
        return 2
    except (NotAcknowledged, ChronosError, TimeoutError) as exc:
        print(f"chronos: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        from confluent_kafka import KafkaException  # loaded by then: the command used Kafka

        if isinstance(exc, KafkaException):
            print(f"chronos: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
