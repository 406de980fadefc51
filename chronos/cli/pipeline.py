"""``chronos pipeline <job>``: the Spark jobs (needs the ``spark`` extra)."""

from __future__ import annotations

import argparse

from chronos.pipeline.main import add_job_parsers, run_job


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "pipeline", help="Spark jobs: schedule from a table, audit deliveries, backlog forecast"
    )
    add_job_parsers(parser.add_subparsers(dest="job", required=True))
    parser.set_defaults(func=run_job)
