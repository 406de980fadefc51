"""The regression guard: this tree against another revision, alternated in one run.

Why alternated and in one run: on a shared two-core machine the highest rate moves between runs
by more than two revisions differ, so each rate runs both sides back to back on a fresh broker
and node each, the order flipped from rate to rate and round to round (A B, B A, ...), and the
verdict compares CPU per message as a ratio and p99 as a difference, never one run's best.

Both sides are measured by the same harness (this tree's load generator, observer and
sampler); only the node process differs (``bench/revision.py``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from chronos.bench.revision import Revision
from chronos.bench.scenarios import steady
from chronos.bench.stack import BenchStack, TopicLayout
from chronos.devstack.brokers import BrokerKind

Result = dict[str, Any]

#: The guard's default rates: the low end's latency and the edge of a node alone on the
#: two-core reference machine (docs/benchmarks/README.md).
DEFAULT_RATES = (5_000.0, 20_000.0, 25_000.0, 30_000.0, 35_000.0)


@dataclass(frozen=True)
class Tolerance:
    """How much worse the candidate may be before the guard fails it.

    Parameters:
        p99_ms: added p99 allowed at a rate both sides hold.
        cpu_ratio: CPU per message allowed, as a ratio to the baseline's (1.05: 5 % more).
        p99_limit_ms: the p99 a rate must keep to count as held.
    """

    p99_ms: float = 10.0
    cpu_ratio: float = 1.05
    p99_limit_ms: float = 100.0


def run(
    baseline: Revision,
    candidate: Revision,
    rates: Sequence[float],
    seconds: float,
    rounds: int,
    log: Callable[[str], None],
    max_delay_ms: int = 10_000,
    layout: TopicLayout | None = None,
    broker: BrokerKind = "kafka",
    bootstrap: str | None = None,
) -> Result:
    """Every rate ``rounds`` times for each side, alternating which goes first."""
    sides = {"baseline": baseline, "candidate": candidate}
    cases: list[Result] = []
    for round_index in range(rounds):
        for rate_index, rate in enumerate(rates):
            order = list(sides)
            if (round_index + rate_index) % 2:
                order.reverse()
            for side in order:
                case = _case(sides[side], rate, seconds, max_delay_ms, layout, broker, bootstrap)
                case.update(side=side, round=round_index + 1)
                cases.append(case)
                log(_case_line(case))
    return {
        "baseline": _describe(baseline),
        "candidate": _describe(candidate),
        "rates": list(rates),
        "seconds": seconds,
        "rounds": rounds,
        "max_delay_ms": max_delay_ms,
        "cases": cases,
    }


def _describe(revision: Revision) -> Result:
    return {
        "ref": revision.ref,
        "sha": revision.sha,
        "label": revision.label,
        "pinned": revision.pinned,
    }


def _case(
    revision: Revision,
    rate: float,
    seconds: float,
    max_delay_ms: int,
    layout: TopicLayout | None,
    broker: BrokerKind,
    bootstrap: str | None,
) -> Result:
    """One steady run on a fresh broker and node; a node that fails counts as not holding."""
    try:
        with BenchStack(
            bootstrap=bootstrap, layout=layout, broker=broker, node_command=revision.command
        ) as stack:
            stack.start_node()
            return steady(stack, rate, seconds, max_delay_ms=max_delay_ms)
    except RuntimeError as exc:
        return {"rate_target": rate, "sustained": False, "error": str(exc)}


def _case_line(case: Result) -> str:
    head = f"{case['side']:<9} round {case['round']} {case['rate_target']:>8.0f}/s:"
    if "error" in case:
        return f"{head} {case['error']}"
    return (
        f"{head} delivered "
        f"{case['delivered']}/{case['expected']}, duplicates {case['duplicates']}, p99 "
        f"{case['lateness_ms']['p99']} ms, worst second {worst_second(case)} ms, node "
        f"{case['node']['cpu_percent_mean']} %, {case.get('cpu_us_per_msg')} us/msg"
    )


def worst_second(case: Result) -> int | None:
    """The worst lateness of any one second of a run (a cold start included)."""
    per_second = case.get("worst_lateness_per_second_ms") or {}
    return max(per_second.values(), default=None)


def holds(case: Result, tolerance: Tolerance) -> bool:
    """Everything delivered, the load reached, p99 within the limit."""
    return (
        "error" not in case
        and case["missing"] == 0
        and case["ingest_rate"] >= 0.95 * case["rate_target"]
        and case["lateness_ms"]["p99"] <= tolerance.p99_limit_ms
    )


@dataclass(frozen=True)
class RateVerdict:
    """Both sides at one rate, over every round."""

    rate: float
    baseline_p99: list[int | None]
    candidate_p99: list[int | None]
    baseline_cpu: list[float | None]
    candidate_cpu: list[float | None]
    baseline_holds: bool
    candidate_holds: bool

    @property
    def cpu_ratio(self) -> float | None:
        """Candidate's mean CPU per message over the baseline's."""
        base = [c for c in self.baseline_cpu if c is not None]
        cand = [c for c in self.candidate_cpu if c is not None]
        if not base or not cand:
            return None
        return round(statistics.fmean(cand) / statistics.fmean(base), 3)


def verdicts(result: Result, tolerance: Tolerance) -> list[RateVerdict]:
    """Per rate: what each side did in every round and what the candidate lost.

    A rate the baseline holds in every round must be held by the candidate in every round;
    where both hold, the candidate's worst p99 may exceed the baseline's worst by at most
    ``tolerance.p99_ms``, and its mean CPU per message the baseline's by ``cpu_ratio``
    (``regressions``)."""
    found: list[RateVerdict] = []
    for rate in result["rates"]:
        at = [c for c in result["cases"] if c["rate_target"] == rate]
        base = [c for c in at if c["side"] == "baseline"]
        cand = [c for c in at if c["side"] == "candidate"]
        verdict = RateVerdict(
            rate,
            [_p99(c) for c in base],
            [_p99(c) for c in cand],
            [c.get("cpu_us_per_msg") for c in base],
            [c.get("cpu_us_per_msg") for c in cand],
            bool(base) and all(holds(c, tolerance) for c in base),
            bool(cand) and all(holds(c, tolerance) for c in cand),
        )
        found.append(verdict)
    return found


def regressions(verdict: RateVerdict, tolerance: Tolerance) -> list[str]:
    """What the candidate lost at one rate (nothing: an empty list)."""
    if not verdict.baseline_holds:
        return []
    if not verdict.candidate_holds:
        return ["the baseline holds this rate, the candidate does not"]
    lost: list[str] = []
    worst_base = max(p for p in verdict.baseline_p99 if p is not None)
    worst_cand = max(p for p in verdict.candidate_p99 if p is not None)
    if worst_cand > worst_base + tolerance.p99_ms:
        lost.append(f"p99 {worst_cand} ms against {worst_base} ms (+{tolerance.p99_ms:g} allowed)")
    ratio = verdict.cpu_ratio
    if ratio is not None and ratio > tolerance.cpu_ratio:
        lost.append(f"CPU per message x{ratio} (x{tolerance.cpu_ratio:g} allowed)")
    return lost


def inconclusive(result: Result, tolerance: Tolerance) -> str | None:
    """Why the run proves nothing either way, None when it does: a baseline case that did not
    run, or a baseline that holds no rate (nothing to lose)."""
    failed = [c for c in result["cases"] if c["side"] == "baseline" and "error" in c]
    if failed:
        return f"the baseline failed {len(failed)} case(s): {failed[0]['error']}"
    if not any(v.baseline_holds for v in verdicts(result, tolerance)):
        return "the baseline holds none of the rates: choose lower ones"
    return None


def _p99(case: Result) -> int | None:
    return None if "error" in case else int(case["lateness_ms"]["p99"])


def markdown(result: Result, tolerance: Tolerance) -> str:
    """The guard's table: per rate and round both sides, then the verdict per rate."""
    base, cand = result["baseline"], result["candidate"]
    lines = [
        f"# Regression guard: {cand['label']} against {base['label']}",
        "",
        *[
            f"**Not comparable: {side['label']} was installed with its own library versions, "
            "not this environment's.**\n"
            for side in (base, cand)
            if not side["pinned"]
        ],
        f"{result['seconds']:g} s per rate, delays 1 s to {result['max_delay_ms'] / 1000:g} s, "
        f"a fresh broker and node per case, {result['rounds']} round(s), sides alternated. "
        f"Started {result.get('started', '?')}.",
        "",
        "| rate | round | side | delivered | dup | p99 ms | worst second ms | node CPU % "
        "| µs/msg | holds |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for case in result["cases"]:
        cells: list[object]
        if "error" in case:
            cells = [case["error"], "", "", "", "", "", "no"]
        else:
            cells = [
                f"{case['delivered']:,}/{case['expected']:,}",
                case["duplicates"],
                case["lateness_ms"]["p99"],
                worst_second(case),
                case["node"]["cpu_percent_mean"],
                case.get("cpu_us_per_msg"),
                "yes" if holds(case, tolerance) else "no",
            ]
        lines.append(
            "| "
            + " | ".join(
                str(c) for c in [f"{case['rate_target']:,.0f}", case["round"], case["side"], *cells]
            )
            + " |"
        )
    lines += [
        "",
        f"Verdict (p99 within +{tolerance.p99_ms:g} ms of the baseline's worst where both hold, "
        f"CPU per message within x{tolerance.cpu_ratio:g}, every rate the baseline holds held):",
        "",
        "| rate | baseline p99 | candidate p99 | baseline µs/msg | candidate µs/msg "
        "| CPU ratio | verdict |",
        "| ---: | --- | --- | --- | --- | ---: | --- |",
    ]
    for v in verdicts(result, tolerance):
        lines.append(
            f"| {v.rate:,.0f} | {_listed(v.baseline_p99)} | {_listed(v.candidate_p99)} "
            f"| {_listed(v.baseline_cpu)} | {_listed(v.candidate_cpu)} | {v.cpu_ratio} "
            f"| {'; '.join(regressions(v, tolerance)) or 'ok'} |"
        )
    return "\n".join(lines) + "\n"


def _listed(values: Sequence[object]) -> str:
    return " / ".join("-" if v is None else str(v) for v in values)
