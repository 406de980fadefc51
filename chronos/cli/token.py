"""``chronos token``: make a bearer token for the proxy or the admin API.

Prints the secret once (give it to the caller) and the entry to append to
``security.tokens_file``, which holds only its hash; nothing is written anywhere.
"""

from __future__ import annotations

import argparse
import json

from chronos.web.tokens import OPERATIONS, hash_token, new_token


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = sub.add_parser("token", help="make a bearer token and its tokens-file entry")
    token.add_argument("--name", required=True, help="who uses it (shown in refusals and logs)")
    token.add_argument(
        "--topic",
        action="append",
        default=[],
        help="a target topic it may schedule to; 'orders.*' for a prefix (repeatable)",
    )
    token.add_argument(
        "--op",
        action="append",
        choices=OPERATIONS,
        default=[],
        help="an operation it may call (repeatable)",
    )
    token.add_argument(
        "--requests-per-s", type=float, default=0.0, help="its request rate (0: unlimited)"
    )
    token.add_argument(
        "--messages-per-s",
        type=float,
        default=0.0,
        help="messages it may schedule a second, a batch counting each (0: unlimited)",
    )
    token.add_argument(
        "--max-pending",
        type=int,
        default=0,
        help="most of its messages waiting at once, per proxy (0: unlimited)",
    )
    token.set_defaults(func=token_main)


def token_main(args: argparse.Namespace) -> int:
    secret = new_token()
    entry = [
        "[[tokens]]",
        f"name = {json.dumps(args.name)}",
        f'sha256 = "{hash_token(secret)}"',
        f"topics = {json.dumps(args.topic)}",
        f"operations = {json.dumps(sorted(set(args.op)))}",
    ]
    if args.requests_per_s:
        entry.append(f"requests_per_s = {args.requests_per_s:g}")
    if args.messages_per_s:
        entry.append(f"messages_per_s = {args.messages_per_s:g}")
    if args.max_pending:
        entry.append(f"max_pending = {args.max_pending}")
    print(json.dumps({"name": args.name, "token": secret, "tokens_file_entry": "\n".join(entry)}))
    return 0
