"""``chronos send``, ``chronos cancel`` and ``chronos reschedule``: from the shell."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from chronos.arguments import add_config, duration_ms, settings_from
from chronos.cli.args import header, repeat
from chronos.cli.waiting import waiting_notice
from chronos.errors import ValidationError
from chronos.repeat import CatchUp, Repeat

if TYPE_CHECKING:
    from proxy.client import DelayClient


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    send = sub.add_parser("send", help="schedule one message")
    add_config(send)
    send.add_argument("--topic", required=True, help="target topic the message is delivered to")
    send.add_argument(
        "--value", default=None, help="UTF-8 record value; - reads it from stdin (default: null)"
    )
    send.add_argument("--key", default=None, help="UTF-8 record key (default: null)")
    send.add_argument(
        "--header",
        type=header,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a record header (repeatable; names starting with chronos- are reserved)",
    )
    when = send.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--delay",
        type=duration_ms,
        help="deliver after this long: 250ms, 5s, 2m, 1h, 1d (a bare number is seconds; 0: now)",
    )
    when.add_argument("--at", type=int, help="deliver at this time, epoch milliseconds (UTC)")
    send.add_argument(
        "--id",
        default=None,
        help="message id, 1-128 of [A-Za-z0-9._:-]; re-sending it schedules nothing new "
        "(default: a random one)",
    )
    send.add_argument(
        "--repeat",
        type=repeat,
        default=None,
        help="fixed:INTERVAL:TIMES or exponential:INTERVAL:TIMES[:MULT[:CAP]]",
    )
    send.add_argument(
        "--cron",
        default=None,
        metavar="EXPRESSION",
        help="repeat at the times a cron expression matches (5 fields, or 6 with seconds "
        "first), from its first fire at or after --delay/--at; needs --times",
    )
    send.add_argument(
        "--zone", default="UTC", help="with --cron: IANA time zone, e.g. Europe/Berlin"
    )
    send.add_argument("--times", type=int, default=None, help="with --cron: total occurrences")
    send.add_argument(
        "--until", type=int, default=None, help="with --cron: no occurrence after this epoch ms"
    )
    send.add_argument(
        "--catch-up",
        choices=["all", "latest"],
        default="all",
        help="with --repeat: occurrences that fell due while nothing delivered them (failover, "
        "outage) are each delivered once (all, the default) or only the latest",
    )
    send.set_defaults(func=send_main)

    cancel = sub.add_parser("cancel", help="cancel a message by id")
    add_config(cancel)
    cancel.add_argument("id", help="id of the message to cancel (as send printed it)")
    cancel.set_defaults(func=cancel_main)

    reschedule = sub.add_parser("reschedule", help="move a pending message to a new due time")
    add_config(reschedule)
    reschedule.add_argument("id", help="id of the message to move (as send printed it)")
    due = reschedule.add_mutually_exclusive_group(required=True)
    due.add_argument(
        "--delay", type=duration_ms, help="deliver after this long from now: 5s, 2m, 1h (0: now)"
    )
    due.add_argument("--at", type=int, help="deliver at this time, epoch milliseconds (UTC)")
    reschedule.set_defaults(func=reschedule_main)


def _repeat_of(args: argparse.Namespace) -> Repeat | None:
    """``--repeat`` or ``--cron`` (with ``--times``), with ``--catch-up``."""
    catch_up = CatchUp.LATEST if args.catch_up == "latest" else CatchUp.ALL
    if args.cron is not None:
        if args.repeat is not None:
            raise ValidationError("--cron", "give --repeat or --cron, not both")
        if args.times is None:
            raise ValidationError("--cron", "needs --times (total occurrences)")
        return Repeat.calendar(
            args.cron, args.zone, times=args.times, until_ms=args.until or 0, catch_up=catch_up
        )
    if args.times is not None or args.until is not None:
        raise ValidationError("--times", "goes with --cron only, as --until does")
    given: Repeat | None = args.repeat
    return None if given is None else dataclasses.replace(given, catch_up=catch_up)


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[DelayClient]:
    """A client for one command, saying on stderr when Kafka keeps it waiting."""
    from proxy.client import DelayClient

    settings = settings_from(args)
    with (
        waiting_notice(settings.kafka.bootstrap_servers, settings.proxy.ack_timeout_s),
        DelayClient(settings) as client,
    ):
        yield client


def send_main(args: argparse.Namespace) -> int:
    value = sys.stdin.buffer.read() if args.value == "-" else args.value
    with _client(args) as client:
        receipt = client.send_delay(
            args.topic,
            value,
            key=args.key,
            headers=args.header,
            delay=None if args.delay is None else args.delay / 1000.0,
            deliver_at=args.at,
            id=args.id,
            repeat=_repeat_of(args),
        )
    print(
        json.dumps(
            {
                "id": receipt.id,
                "deliver_at_ms": receipt.deliver_at_ms,
                "deliver_at": receipt.deliver_at.isoformat(),
            }
        )
    )
    return 0


def cancel_main(args: argparse.Namespace) -> int:
    with _client(args) as client:
        receipt = client.cancel(args.id)
    print(json.dumps({"id": receipt.id, "status": "cancel_accepted"}))
    return 0


def reschedule_main(args: argparse.Namespace) -> int:
    with _client(args) as client:
        receipt = client.reschedule(
            args.id,
            delay=None if args.delay is None else args.delay / 1000.0,
            deliver_at=args.at,
        )
    print(
        json.dumps(
            {
                "id": receipt.id,
                "deliver_at_ms": receipt.deliver_at_ms,
                "status": "reschedule_accepted",
            }
        )
    )
    return 0
