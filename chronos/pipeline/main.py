"""``chronos pipeline <job>`` and ``spark-submit chronos/pipeline/main.py <job>``: one parser.

Importing this module does not import PySpark (``chronos --help`` works without the extra);
running a job does, and says what to install when it is missing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from chronos.arguments import add_config, duration_ms, settings_from

JOBS = ("schedule", "audit", "backlog")


def epoch_ms(text: str) -> int:
    """Epoch milliseconds or ISO 8601 with an offset."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not epoch ms or ISO 8601") from exc
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} needs a UTC offset (e.g. Z or +00:00)")
    return round(moment.timestamp() * 1000)


def add_job_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The three jobs and their options."""
    common = argparse.ArgumentParser(add_help=False)
    add_config(common)
    common.add_argument(
        "--master", default=None, help="Spark master (default local[*]; spark-submit's own)"
    )
    p = sub.add_parser(
        "schedule",
        parents=[common],
        help="validate a table of messages and produce them as delay requests",
    )
    p.add_argument("--input", required=True, help="Parquet, CSV (with header) or JSON Lines")
    p.add_argument(
        "--format",
        choices=("parquet", "csv", "json"),
        default=None,
        help="input format (default: from the file name)",
    )
    p.add_argument(
        "--rejects", default="rejects.parquet", help="where rejected rows go (.jsonl: JSON Lines)"
    )
    p = sub.add_parser(
        "audit", parents=[common], help="compare scheduled with delivered for a due-time window"
    )
    p.add_argument(
        "--from",
        dest="start",
        type=epoch_ms,
        default=None,
        help="window start: epoch ms or ISO 8601 with offset (default: an hour before --to)",
    )
    p.add_argument(
        "--to",
        dest="end",
        type=epoch_ms,
        default=None,
        help="window end, exclusive: epoch ms or ISO 8601 with offset (default: a minute ago)",
    )
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument(
        "--late",
        type=duration_ms,
        default=1000,
        help="a first delivery later than this after due is late: 500ms, 1s, ... (default 1s)",
    )
    p.add_argument(
        "--early-slack",
        type=duration_ms,
        default=3_600_000,
        help="read target records from this long before the window (default 1h)",
    )
    p.add_argument("--topics", default=None, help="target topics (default: those scheduled)")
    p = sub.add_parser(
        "backlog",
        parents=[common],
        help="pending deliveries per topic per minute, from a checkpoint",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        action="append",
        help="from `chronos checkpoint`; for a cluster, once per member (each inner partition "
        "is read from the copy that delivered furthest)",
    )
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument(
        "--bucket",
        choices=("minute", "hour"),
        default="minute",
        help="forecast step (default minute)",
    )
    p.add_argument("--horizon", type=duration_ms, default=86_400_000, help="default 24h")
    p.add_argument("--now", type=epoch_ms, default=None, help="forecast start (default: now)")


#: Exit code of an audit that ran and found missing or early messages; 1 stays "it failed to
#: run" (Kafka unreachable, a crash), 2 a usage or configuration error.
AUDIT_FOUND_PROBLEMS = 3


def run_job(args: argparse.Namespace) -> int:
    """Run the chosen job; exit code 0, or AUDIT_FOUND_PROBLEMS when the audit found missing or
    early messages."""
    try:
        from chronos.pipeline.session import spark_session
    except ImportError as exc:
        print(f"chronos: {exc}", file=sys.stderr)
        return 2
    settings = settings_from(args)
    if args.job == "backlog":
        from chronos.store.checkpoint import freshest_copies

        reads = freshest_copies(args.checkpoint)  # a bad one fails before Spark starts
    spark = spark_session(args.master)
    if args.job == "schedule":
        from chronos.pipeline.jobs.schedule import run_schedule

        report = run_schedule(spark, settings, args.input, args.rejects, args.format)
        print(
            f"scheduled {report.accepted} of {report.rows} rows in {report.seconds:.1f} s "
            f"({report.rows_per_s:,.0f} rows/s); rejected {report.rejected}"
            + (f" -> {args.rejects}" if report.rejected else "")
        )
        return 0
    if args.job == "audit":
        from chronos.pipeline.jobs.audit import AuditWindow, run_audit

        end = args.end if args.end is not None else int(time.time() * 1000) - 60_000
        start = args.start if args.start is not None else end - 3_600_000
        topics = args.topics.split(",") if args.topics else None
        summary = run_audit(
            spark,
            settings,
            AuditWindow(start, end),
            args.out,
            late_ms=args.late,
            early_slack_ms=args.early_slack,
            targets=topics,
        )
        print(summary.to_json())
        return 0 if summary.ok else AUDIT_FOUND_PROBLEMS
    from chronos.pipeline.jobs.backlog import run_backlog

    backlog = run_backlog(
        spark,
        reads,
        args.out,
        bucket=args.bucket,
        horizon_ms=args.horizon,
        now_ms=args.now,
    )
    print(backlog.to_json())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chronos-pipeline", description=__doc__)
    add_job_parsers(parser.add_subparsers(dest="job", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for spark-submit."""
    return run_job(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
