"""``chronos status ID``: where a message is, as a ready node answers it."""

from __future__ import annotations

import argparse
import json

from chronos.arguments import add_config, settings_from


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = sub.add_parser(
        "status",
        help="where a message is: pending, delivered, dead_lettered, cancelled or unknown",
    )
    add_config(status)
    status.add_argument("id", help="the message id")
    status.add_argument(
        "--node",
        action="append",
        default=None,
        metavar="URL",
        help="a node's admin API (http://host:port), repeatable "
        "(default: proxy.status_nodes of the settings)",
    )
    status.set_defaults(func=status_main)


def status_main(args: argparse.Namespace) -> int:
    """Prints the answer as JSON; exit 0 when the message is known, 1 when unknown."""
    from proxy.status import StatusSource

    settings = settings_from(args)
    nodes = args.node if args.node else settings.proxy.status_nodes
    secret = settings.proxy.status_token
    token = None if secret is None else secret.get_secret_value()
    answer = StatusSource(nodes, token=token).status(args.id)
    print(json.dumps(answer, indent=2))
    return 1 if answer.get("state") == "unknown" else 0
