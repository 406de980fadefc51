"""``chronos tail``: print what chronos delivered to a topic, with its lateness."""

from __future__ import annotations

import argparse
import threading
from typing import TYPE_CHECKING

from chronos.arguments import add_config, settings_from

if TYPE_CHECKING:
    from chronos.devstack.watch import Delivered


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("tail", help="print delivered records of a topic")
    add_config(parser)
    parser.add_argument("--topic", required=True, help="topic to read delivered records from")
    parser.add_argument(
        "--count", type=int, default=0, help="exit after N records (default 0: never)"
    )
    parser.add_argument(
        "--timeout", type=float, default=0.0, help="exit after this many seconds (default 0: never)"
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from chronos.devstack.watch import DeliveryWatcher

    settings = settings_from(args)
    seen = 0
    enough = threading.Event()

    def show(record: Delivered) -> None:
        nonlocal seen
        seen += 1
        value = (record.value or b"").decode(errors="replace")
        print(
            f"{record.topic} id={record.id} occurrence={record.occurrence} "
            f"late={record.lateness_ms}ms value={value!r}",
            flush=True,
        )
        if args.count and seen >= args.count:
            enough.set()

    watcher = DeliveryWatcher(settings.kafka.bootstrap_servers, [args.topic], show).start()
    try:
        enough.wait(args.timeout or None)
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()
    return 0 if not args.count or seen >= args.count else 1
