"""``chronos checkpoint``: a consistent copy of a node's store, for the pipeline's backlog job."""

from __future__ import annotations

import argparse
from pathlib import Path

from chronos.arguments import add_config, settings_from


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "checkpoint",
        help="write a consistent checkpoint of the node store (asks the running node, if any)",
    )
    add_config(parser)
    parser.add_argument("--out", type=Path, required=True, help="new directory to create")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for a running node"
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    from chronos.store.checkpoint import take_checkpoint
    from chronos.store.database import member_store_dir

    data_dir = settings.node.data_dir
    if settings.cluster.name is not None and settings.cluster.shape == "node":
        data_dir = member_store_dir(data_dir)  # a cluster member's one database
    result = take_checkpoint(data_dir, settings.store, args.out, args.timeout)
    print(f"checkpoint {result.path} (seek {result.seek_ms}, {result.took_ms} ms)")
    return 0
