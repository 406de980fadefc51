"""``chronos bench``: run the benchmark scenarios and write docs/benchmarks/ results."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chronos.devstack import BROKER_KINDS

if TYPE_CHECKING:
    from chronos.bench.stack import TopicLayout

ALL = ("relay", "steady", "redis", "burst", "scale", "proxy", "replicated")

# (steady rates, seconds per rate, max delay ms, burst count, scale count, relay count, proxy s)
_QUICK = ([5_000.0], 8.0, 3_000, 20_000, 50_000, 50_000, 3.0)
_FULL = (
    # Every 5,000 msg/s, plus 32,500 and 37,500 around the edge round 5 found.
    [
        5_000.0,
        10_000.0,
        15_000.0,
        20_000.0,
        25_000.0,
        30_000.0,
        32_500.0,
        35_000.0,
        37_500.0,
        40_000.0,
        45_000.0,
        50_000.0,
    ],
    60.0,
    10_000,
    500_000,
    10_000_000,
    500_000,
    10.0,
)


#: Memory the embedded Tansu broker (memory storage) holds per inner record of the scale
#: scenario: 13,563 MiB of RSS for 30 M records of 200-byte payloads (474 B each).
_TANSU_BYTES_PER_RECORD = 480


def _scale_fits_embedded_broker(pending: int) -> tuple[bool, int, int | None]:
    """Whether ``pending`` inner records fit in the memory of the embedded broker: (fits,
    bytes needed, bytes available). Unknown memory counts as fitting."""
    from chronos.bench.host import meminfo_bytes

    needed = pending * _TANSU_BYTES_PER_RECORD
    available = meminfo_bytes("MemAvailable")
    return available is None or needed <= available * 0.8, needed, available


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("bench", help="benchmarks beside a bare relay and a Redis queue")
    parser.add_argument("--quick", action="store_true", help="small sizes, under 2 minutes")
    parser.add_argument(
        "--only", nargs="+", choices=ALL, default=list(ALL), help="scenarios to run (default: all)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("docs/benchmarks"),
        help="folder of the results (default docs/benchmarks)",
    )
    parser.add_argument(
        "--broker",
        choices=BROKER_KINDS,
        default="tansu",
        help=(
            "local broker each scenario starts: tansu (memory-only, the embedded default) or "
            "kafka (Apache Kafka, KRaft, from Maven Central jars); results of kafka runs go to "
            "results-<mode>-kafka.*"
        ),
    )
    parser.add_argument(
        "--bootstrap", default=None, help="existing Kafka instead of a local broker"
    )
    parser.add_argument("--rates", type=float, nargs="+", default=None, help="steady rates, /s")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per steady rate")
    parser.add_argument(
        "--scale",
        type=int,
        default=None,
        help=(
            "pending messages to preload (default 10,000,000); beyond what the embedded "
            "broker holds in memory (~480 B each) use --broker kafka (disk storage)"
        ),
    )
    parser.add_argument("--burst", type=int, default=None, help="messages due in one second")
    parser.add_argument(
        "--inner-partitions",
        type=int,
        default=None,
        help="partitions of the inner topic (default: topics.inner_partitions, 1)",
    )
    parser.add_argument(
        "--target-partitions",
        type=int,
        default=None,
        help="partitions of the topic delivered to, chronos' and Redis' (default 8)",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        default=2,
        help="replicated: nodes of the replica group compared with a node alone (default 2; "
        "1 compares the two delivery engines alone)",
    )
    parser.add_argument(
        "--lateness",
        choices=("visible", "stamped"),
        default="visible",
        help="replicated: lateness when a read_committed consumer receives each record "
        "(visible, default) or from its timestamp, stamped when produced (stamped)",
    )
    guard = parser.add_argument_group(
        "regression guard",
        "--baseline REF runs the steady scenario for REF (installed in its own checkout and "
        "venv) and for this tree, alternated, a fresh broker and node per case, then climbs "
        "each side to the highest rate it holds; exit 1 when this tree is worse than the "
        "tolerances (its p99 over 1.5x the baseline's + 20 ms at any rate where the "
        "baseline's is under a second, a rate the baseline holds lost, p99 or CPU per "
        "message beyond the slack where both hold), 2 when a baseline case failed",
    )
    guard.add_argument(
        "--baseline",
        metavar="REF",
        default=None,
        help="a tag, branch or commit of this repository to compare this tree against",
    )
    guard.add_argument(
        "--candidate",
        metavar="REF",
        default=None,
        help="compare this revision (installed like the baseline) instead of this tree: "
        "for bisecting, or to keep editing while the guard runs",
    )
    guard.add_argument(
        "--rounds", type=int, default=2, help="times each rate runs on each side (default 2)"
    )
    guard.add_argument(
        "--climb",
        type=int,
        default=4,
        help="cases each side may run climbing to its highest held rate (default 4; 0: none)",
    )
    guard.add_argument(
        "--p99-slack-ms",
        type=float,
        default=10.0,
        help="added p99 allowed where both sides hold a rate (default 10)",
    )
    guard.add_argument(
        "--cpu-slack",
        type=float,
        default=0.05,
        help="added CPU per message allowed, as a fraction of the baseline's (default 0.05)",
    )
    parser.set_defaults(func=main)


def layout_of(args: argparse.Namespace) -> TopicLayout:
    """The topics' partitions: those given, else the settings' inner count and 8 targets
    (ValueError below one)."""
    from chronos.bench.stack import TopicLayout

    given = {"inner": args.inner_partitions, "target": args.target_partitions}
    return TopicLayout(**{k: v for k, v in given.items() if v is not None})


def _guard(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """``--baseline``: this tree against another revision, alternated (``bench/guard.py``)."""
    from chronos.bench import guard, report, revision

    if args.rounds < 1:
        log("--rounds must be at least 1")
        return 2
    # The checkout this chronos runs from (an editable install), else the current directory's.
    source = Path(__file__).resolve().parents[2]
    repo = source if (source / ".git").exists() else Path.cwd()
    try:
        layout = layout_of(args)
        baseline = revision.install(args.baseline, repo, log)
        candidate = (
            revision.this_tree(repo)
            if args.candidate is None
            else revision.install(args.candidate, repo, log)
        )
    except (ValueError, revision.RevisionError) as exc:
        log(str(exc))
        return 2
    tolerance = guard.Tolerance(p99_ms=args.p99_slack_ms, cpu_ratio=1.0 + args.cpu_slack)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    result = guard.run(
        baseline,
        candidate,
        args.rates or list(guard.DEFAULT_RATES),
        args.seconds or 30.0,
        args.rounds,
        log,
        layout=layout,
        broker=args.broker,
        bootstrap=args.bootstrap,
        tolerance=tolerance,
        climb_steps=args.climb,
    )
    result["started"] = started
    result["machine"] = report.machine("existing" if args.bootstrap else args.broker)
    text = guard.markdown(result, tolerance)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"guard-{baseline.sha[:7]}-{candidate.sha[:7]}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(text)
    print(text)
    log(f"wrote {stem}.json and {stem}.md")
    for side in ("baseline", "candidate"):
        log(f"highest rate held, {side}: {guard.held_text(result, side, tolerance)}")
    unclear = guard.inconclusive(result, tolerance)
    if unclear is not None:
        log(f"verdict: inconclusive: {unclear}")
        return 2
    lost = [v for v in guard.verdicts(result, tolerance) if guard.regressions(v, tolerance)]
    log(f"verdict: {'fail' if lost else 'ok'}")
    return 1 if lost else 0


def main(args: argparse.Namespace) -> int:
    from chronos.bench import baselines, report, scenarios
    from chronos.cli.early import exit_through_cleanup

    exit_through_cleanup()  # the brokers and nodes it starts are stopped on every way out
    from chronos.bench.ladder import Ladder, climb, highest_sustained
    from chronos.bench.stack import Rig
    from chronos.settings import NodeSettings

    rates, seconds, max_delay, burst_n, scale_n, relay_n, proxy_s = _QUICK if args.quick else _FULL
    rates, seconds = args.rates or rates, args.seconds or seconds
    burst_n, scale_n = args.burst or burst_n, args.scale or scale_n
    try:
        layout = layout_of(args)
    except ValueError as exc:
        print(f"[bench] {exc}", file=sys.stderr)
        return 2

    def log(line: str) -> None:
        print(f"[bench] {line}", file=sys.stderr, flush=True)

    if args.baseline is not None:
        return _guard(args, log)
    if "redis" in args.only and shutil.which("redis-server") is None:
        # Checked first: a full run takes half an hour before it reaches the Redis baseline.
        log("redis-server not found: apt-get install redis-server, or leave out 'redis' (--only)")
        return 2
    if "scale" in args.only and args.bootstrap is None and args.broker == "tansu":
        fits, needed, available = _scale_fits_embedded_broker(scale_n)
        if not fits:
            # Checked first, like Redis: the broker would be killed for memory mid-run.
            log(
                f"--scale {scale_n:,}: the embedded broker keeps topics in memory and needs "
                f"~{needed / 2**30:.0f} GiB, more than 80 % of the "
                f"{(available or 0) / 2**30:.0f} GiB available; "
                "use --broker kafka (disk storage) or --bootstrap, or measure the store alone with "
                "scripts/store_ingest_bench.py --count N"
            )
            return 2

    results: dict[str, Any] = {
        "mode": ("quick" if args.quick else "full") + ("-kafka" if args.broker == "kafka" else ""),
        "broker": "existing" if args.bootstrap else args.broker,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": report.machine("existing" if args.bootstrap else args.broker),
        "scenarios": {},
        "settings": {
            "rates": rates,
            "seconds": seconds,
            "max_delay_ms": max_delay,
            "payload_bytes": 200,
            **layout.as_result(),
            # Decides how fast ingest catches up (docs/benchmarks/README.md, item 15).
            "ingest_batch_max": NodeSettings().ingest_batch_max,
            # Where the node decodes (item 17): changes its CPU, memory and lateness.
            "ingest_decoder": NodeSettings().ingest_decoder,
        },
    }
    found = results["scenarios"]
    rig = Rig(args.bootstrap, log, layout, args.broker)
    ladder = Ladder(rig, rates, seconds, max_delay)
    workdir = Path(tempfile.mkdtemp(prefix="chronos-bench-"))
    # Only the baselines (relay, Redis) use a broker of their own; each scenario starts its.
    baseline_broker = {"relay", "redis"} & set(args.only)
    bootstrap, broker = (
        baselines.local_broker(args.bootstrap, workdir, args.broker)
        if baseline_broker
        else (args.bootstrap or "", None)
    )
    try:
        if "relay" in args.only:
            found["relay"] = baselines.bare_relay(bootstrap, relay_n, 200, log)
        if "steady" in args.only:
            found["steady"] = scenarios.highest_rate(ladder)
        if "redis" in args.only:
            runs = climb(
                rates,
                ["redis"],
                lambda _mode, rate: baselines.redis_steady(
                    bootstrap, rate, seconds, 200, log, max_delay, layout.target
                ),
            )["redis"]
            found["redis_steady"] = {
                "runs": runs,
                "highest_sustained_rate": highest_sustained(runs),
            }
            found["redis_memory"] = baselines.redis_memory(min(scale_n, 1_000_000), 200, log)
        if "burst" in args.only:
            found["burst"] = scenarios.burst(rig, burst_n)
        if "scale" in args.only:
            found["scale"] = scenarios.scale(rig, scale_n)
        if "replicated" in args.only:
            found["replicated"] = scenarios.replicated(
                ladder, group_size=args.group_size, visible=args.lateness == "visible"
            )
        if "proxy" in args.only:
            found["proxy"] = scenarios.proxy_http(rig, proxy_s, 100)
    finally:
        if broker is not None:
            broker.stop()
    previous = args.out / f"results-{results['mode']}.json"
    if set(args.only) != set(ALL) and previous.exists():
        # A partial run updates its scenarios in the existing results and keeps the others.
        kept = json.loads(previous.read_text())
        kept["scenarios"].update(found)
        kept.setdefault("reruns", []).append(
            {"started": results["started"], "only": args.only, "settings": results["settings"]}
        )
        results = kept
    for path in report.write(results, args.out):
        log(f"wrote {path}")
    return 0
