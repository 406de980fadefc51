"""The regression guard: this tree against another revision, alternated in one run.

Why alternated and in one run: on a shared two-core machine the highest rate moves between runs
by more than two revisions differ, so each rate runs both sides back to back on a fresh broker
and node each, the order flipped from rate to rate and round to round (A B, B A, ...), and the
verdict compares CPU per message as a ratio and p99 as a difference, never one run's best.

Both sides are measured by the same harness (this tree's load generator, observer and
sampler); only the node process differs (``bench/revision.py``).

Tails are compared at every rate, held or not: a candidate p99 ten times the baseline's is a
regression even where both miss 100 ms (the guard once said "ok" for 1,316 and 2,239 ms
against 114 and 100 ms). And each side climbs to the highest rate it holds, so a run always
says where each side's edge is.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
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
        tail_ratio, tail_slack_ms: at any rate, held or not, the candidate's worst p99 may be
            at most ``tail_ratio`` times the baseline's worst plus ``tail_slack_ms``...
        tail_ceiling_ms: ...wherever the baseline's worst p99 is under this (beyond it both
            sides are saturated, and their tails say how long a run lasted).
    """

    p99_ms: float = 10.0
    cpu_ratio: float = 1.05
    p99_limit_ms: float = 100.0
    tail_ratio: float = 1.5
    tail_slack_ms: float = 20.0
    tail_ceiling_ms: float = 1000.0

    def tail_limit(self, baseline_p99: float) -> float | None:
        """The worst p99 the candidate may show where the baseline's worst is
        ``baseline_p99``; None where tails are not compared."""
        if baseline_p99 >= self.tail_ceiling_ms:
            return None
        return self.tail_ratio * baseline_p99 + self.tail_slack_ms


#: How far one climbing step moves the rate (down by its inverse), and the most steps a side
#: takes each way: the climb ends within a quarter of the edge, in a few extra cases.
CLIMB_FACTOR = 1.25
CLIMB_STEPS = 4
#: The lowest rate a side climbs down to.
CLIMB_FLOOR = 500.0


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
    tolerance: Tolerance = Tolerance(),
    climb_steps: int = CLIMB_STEPS,
) -> Result:
    """Every rate ``rounds`` times for each side, alternating which goes first; then each
    side climbs from there to the highest rate it holds (``next_climb``), the sides again
    alternated, at most ``climb_steps`` cases each."""
    sides = {"baseline": baseline, "candidate": candidate}
    cases: list[Result] = []

    def measure(side: str, rate: float, round_number: int) -> Result:
        case = _case(sides[side], rate, seconds, max_delay_ms, layout, broker, bootstrap)
        case.update(side=side, round=round_number)
        log(_case_line(case))
        return case

    for round_index in range(rounds):
        for rate_index, rate in enumerate(rates):
            order = list(sides)
            if (round_index + rate_index) % 2:
                order.reverse()
            for side in order:
                cases.append(measure(side, rate, round_index + 1))
    climbed: dict[str, list[Result]] = {side: [] for side in sides}
    for step in range(climb_steps):
        order = list(sides) if step % 2 == 0 else list(reversed(sides))
        for side in order:
            held = _held_by_rate(cases, side, tolerance)
            climb_to = next_climb(held, climbed[side], tolerance)
            if climb_to is not None:
                climbed[side].append(measure(side, climb_to, 0))
    return {
        "baseline": _describe(baseline),
        "candidate": _describe(candidate),
        "rates": list(rates),
        "seconds": seconds,
        "rounds": rounds,
        "max_delay_ms": max_delay_ms,
        "cases": cases,
        "climb": [case for side in sides for case in climbed[side]],
    }


def _held_by_rate(cases: Sequence[Result], side: str, tolerance: Tolerance) -> dict[float, bool]:
    """Per rate of the alternated rounds: whether ``side`` held it in every round."""
    held: dict[float, bool] = {}
    for case in cases:
        if case["side"] == side:
            rate = float(case["rate_target"])
            held[rate] = held.get(rate, True) and holds(case, tolerance)
    return held


def next_climb(
    rounds: Mapping[float, bool], climbed: Sequence[Result], tolerance: Tolerance
) -> float | None:
    """The next rate a side climbs to, None once it found its highest held rate.

    ``rounds``: whether it held each rate of the alternated rounds; ``climbed``: its climbing
    cases so far. A side that held the highest rate climbs up by ``CLIMB_FACTOR`` until a rate
    is not held; one that held none climbs down until one is (not below ``CLIMB_FLOOR``);
    one that held some but not the highest rate has its edge between two tested rates."""
    if not rounds:
        return None
    top, bottom = max(rounds), min(rounds)
    if any(rounds.values()) and not rounds[top]:
        return None
    going_up = rounds[top]
    rate = top if going_up else bottom
    for case in climbed:
        held = holds(case, tolerance)
        if held != going_up:
            return None  # up: the first rate not held; down: the first held
        rate = float(case["rate_target"])
    rate = rate * CLIMB_FACTOR if going_up else rate / CLIMB_FACTOR
    if not going_up and rate < CLIMB_FLOOR:
        return None
    return round(rate / 100) * 100.0  # whole hundreds, as the rates one asks for


def held_text(result: Result, side: str, tolerance: Tolerance) -> str:
    """``side``'s highest held rate in words: "at least" when its climb ran out of steps while
    still holding (its edge lies higher), "none" when it held no rate."""
    rate = highest_held(result, side, tolerance)
    if rate is None:
        return "none"
    climb = [c for c in result.get("climb", []) if c["side"] == side]
    rising = bool(climb) and all(holds(c, tolerance) for c in climb)
    capped = rising and float(climb[-1]["rate_target"]) == rate
    return f"{'at least ' if capped else ''}{rate:,.0f}/s"


def highest_held(result: Result, side: str, tolerance: Tolerance) -> float | None:
    """The highest rate ``side`` held: in every round of the alternated ones, or in its climb."""
    held = [r for r, ok in _held_by_rate(result["cases"], side, tolerance).items() if ok]
    held += [
        float(c["rate_target"])
        for c in result.get("climb", [])
        if c["side"] == side and holds(c, tolerance)
    ]
    return max(held, default=None)


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
    """What the candidate lost at one rate (nothing: an empty list).

    Where the baseline holds the rate: the rate itself, then p99 within ``p99_ms`` and CPU per
    message; elsewhere its tail (``Tolerance.tail_limit``), so tails are compared at every rate
    (where the baseline holds, the p99 slack is the tighter rule)."""
    if not verdict.baseline_holds:
        return _tail_lost(verdict, tolerance)
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


def _tail_lost(verdict: RateVerdict, tolerance: Tolerance) -> list[str]:
    """The tail rule at one rate: the candidate's worst p99 against the baseline's."""
    base = [p for p in verdict.baseline_p99 if p is not None]
    if not base or len(base) < len(verdict.baseline_p99):
        return []  # a baseline case failed: ``inconclusive`` says so
    limit = tolerance.tail_limit(max(base))
    if limit is None:
        return []
    cand = verdict.candidate_p99
    if any(p is None for p in cand):
        return [f"the candidate failed a case where the baseline's p99 was {max(base)} ms"]
    worst = max(p for p in cand if p is not None)
    if worst <= limit:
        return []
    return [
        f"p99 {worst} ms against {max(base)} ms (at most x{tolerance.tail_ratio:g} + "
        f"{tolerance.tail_slack_ms:g} ms = {limit:g} ms wherever the baseline's is under "
        f"{tolerance.tail_ceiling_ms:g} ms)"
    ]


def inconclusive(result: Result, tolerance: Tolerance) -> str | None:
    """Why the run proves nothing either way, None when it does: a baseline case that did not
    run. (A baseline that holds none of the rates still has tails to compare, and the climb
    says where each side's edge is.)"""
    failed = [c for c in result["cases"] if c["side"] == "baseline" and "error" in c]
    if failed:
        return f"the baseline failed {len(failed)} case(s): {failed[0]['error']}"
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
    climb = result.get("climb", [])
    if climb:
        lines += ["", "Climbing to each side's highest held rate (one case each):", ""]
        lines += [
            f"- {c['side']} {c['rate_target']:,.0f}/s: "
            + (c["error"] if "error" in c else f"p99 {c['lateness_ms']['p99']} ms, ")
            + ("held" if holds(c, tolerance) else "not held")
            for c in climb
        ]
    lines += [
        "",
        "Highest rate held (p99 within "
        f"{tolerance.p99_limit_ms:g} ms, nothing missing): "
        + ", ".join(
            f"{side} {held_text(result, side, tolerance)}" for side in ("baseline", "candidate")
        )
        + ".",
        "",
        "Verdict (a rate the baseline holds: held, p99 within "
        f"+{tolerance.p99_ms:g} ms of the baseline's worst, CPU per message within "
        f"x{tolerance.cpu_ratio:g}; any other rate: the candidate's worst p99 within "
        f"x{tolerance.tail_ratio:g} + {tolerance.tail_slack_ms:g} ms of the baseline's, "
        f"wherever that is under {tolerance.tail_ceiling_ms:g} ms):",
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
