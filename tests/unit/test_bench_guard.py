"""The regression guard's verdicts: what counts as held, as slower and as dearer."""

from __future__ import annotations

from typing import Any

from chronos.bench.guard import (
    Tolerance,
    highest_held,
    holds,
    inconclusive,
    markdown,
    next_climb,
    regressions,
    verdicts,
)


def _case(
    side: str, rate: float, p99: int, cpu: float, missing: int = 0, round_: int = 1
) -> dict[str, Any]:
    return {
        "side": side,
        "round": round_,
        "rate_target": rate,
        "ingest_rate": rate,
        "expected": 100,
        "delivered": 100 - missing,
        "missing": missing,
        "duplicates": 0,
        "lateness_ms": {"p50": 1, "p99": p99, "p999": p99, "max": p99},
        "worst_lateness_per_second_ms": {"0": p99},
        "node": {"cpu_percent_mean": 50.0},
        "cpu_us_per_msg": cpu,
    }


def _result(cases: list[dict[str, Any]]) -> dict[str, Any]:
    rates = sorted({c["rate_target"] for c in cases})
    describe = {"ref": "v1", "sha": "0" * 40, "label": "v1 (0000000)", "pinned": True}
    return {
        "baseline": describe,
        "candidate": {**describe, "ref": "working tree", "label": "working tree (0000000)"},
        "rates": rates,
        "seconds": 30.0,
        "rounds": 1,
        "max_delay_ms": 10_000,
        "cases": cases,
    }


def _lost(cases: list[dict[str, Any]], tolerance: Tolerance | None = None) -> list[str]:
    tolerance = tolerance or Tolerance()
    return [
        reason for v in verdicts(_result(cases), tolerance) for reason in regressions(v, tolerance)
    ]


def test_equal_sides_pass() -> None:
    assert _lost([_case("baseline", 1000, 20, 50.0), _case("candidate", 1000, 20, 50.0)]) == []


def test_a_p99_beyond_the_slack_fails_and_one_within_passes() -> None:
    within = [_case("baseline", 1000, 20, 50.0), _case("candidate", 1000, 30, 50.0)]
    beyond = [_case("baseline", 1000, 20, 50.0), _case("candidate", 1000, 31, 50.0)]
    assert _lost(within) == []
    assert _lost(beyond) == ["p99 31 ms against 20 ms (+10 allowed)"]


def test_cpu_per_message_beyond_the_ratio_fails() -> None:
    dearer = [_case("baseline", 1000, 20, 50.0), _case("candidate", 1000, 20, 53.0)]
    assert _lost(dearer) == ["CPU per message x1.06 (x1.05 allowed)"]
    assert _lost(dearer, Tolerance(cpu_ratio=1.1)) == []


def test_a_rate_the_baseline_holds_and_the_candidate_does_not_fails() -> None:
    cases = [_case("baseline", 1000, 20, 50.0), _case("candidate", 1000, 150, 40.0)]
    assert _lost(cases) == ["the baseline holds this rate, the candidate does not"]


def test_a_rate_neither_holds_loses_only_by_its_tail() -> None:
    """Past the baseline's own edge a rate cannot be lost, but its tail can: up to 1.5 times
    the baseline's worst p99 plus 20 ms, wherever that is under a second."""
    within = [_case("baseline", 1000, 300, 50.0), _case("candidate", 1000, 470, 80.0)]
    assert _lost(within) == []
    beyond = [_case("baseline", 1000, 300, 50.0), _case("candidate", 1000, 471, 50.0)]
    assert _lost(beyond) == [
        "p99 471 ms against 300 ms (at most x1.5 + 20 ms = 470 ms wherever the baseline's "
        "is under 1000 ms)"
    ]
    saturated = [_case("baseline", 1000, 1000, 50.0), _case("candidate", 1000, 9000, 50.0)]
    assert _lost(saturated) == []


def test_a_tenfold_tail_fails_where_neither_side_holds_100_ms() -> None:
    """Issue 60's run: main against 40b59fe at 10,000 msg/s, two rounds: p99 1,316 and
    2,239 ms against 114 and 100 ms, CPU per message x0.917. The guard said "ok" (its p99 rule
    applied only where both hold) and the run ended "inconclusive"."""
    cases = [
        _case("baseline", 10_000, 114, 60.0, round_=1),
        _case("candidate", 10_000, 1316, 55.0, round_=1),
        _case("candidate", 10_000, 2239, 55.0, round_=2),
        _case("baseline", 10_000, 100, 60.0, round_=2),
    ]
    (verdict,) = verdicts(_result(cases), Tolerance())
    assert verdict.cpu_ratio == 0.917
    assert not verdict.baseline_holds and not verdict.candidate_holds
    assert regressions(verdict, Tolerance()) == [
        "p99 2239 ms against 114 ms (at most x1.5 + 20 ms = 191 ms wherever the baseline's "
        "is under 1000 ms)"
    ]
    assert inconclusive(_result(cases), Tolerance()) is None
    assert "| 10,000 | 114 / 100 | 1316 / 2239 |" in markdown(_result(cases), Tolerance())


def test_each_side_climbs_to_the_highest_rate_it_holds() -> None:
    tolerance = Tolerance()
    # Held the highest rate: up by a quarter until a rate is not held.
    assert next_climb({5000.0: True, 10_000.0: True}, [], tolerance) == 12_500
    up = [_case("candidate", 12_500, 20, 1.0)]
    assert next_climb({10_000.0: True}, up, tolerance) == 15_600
    assert (
        next_climb({10_000.0: True}, [*up, _case("candidate", 15_600, 400, 1.0)], tolerance) is None
    )
    # Held none: down by a quarter until one is, never below 500/s.
    assert next_climb({10_000.0: False}, [], tolerance) == 8000
    down = [_case("baseline", 8000, 400, 1.0)]
    assert next_climb({10_000.0: False}, down, tolerance) == 6400
    assert next_climb({10_000.0: False}, [_case("baseline", 8000, 20, 1.0)], tolerance) is None
    assert next_climb({600.0: False}, [], tolerance) is None
    # The edge lies between two tested rates: nothing to climb.
    assert next_climb({5000.0: True, 10_000.0: False}, [], tolerance) is None
    result = _result([_case("baseline", 10_000, 400, 1.0), _case("candidate", 10_000, 30, 1.0)])
    result["climb"] = [
        _case("baseline", 8000, 300, 1.0, round_=0),
        _case("baseline", 6400, 40, 1.0, round_=0),
        _case("candidate", 12_500, 90, 1.0, round_=0),
        _case("candidate", 15_600, 300, 1.0, round_=0),
    ]
    assert highest_held(result, "baseline", tolerance) == 6400
    assert highest_held(result, "candidate", tolerance) == 12_500
    text = markdown(result, tolerance)
    assert "Highest rate held (p99 within 100 ms, nothing missing): baseline 6,400/s, " in text
    assert "candidate 12,500/s." in text
    # A climb that ran out of steps still holding: the edge lies higher.
    result["climb"] = [_case("candidate", 12_500, 90, 1.0, round_=0)]
    assert "candidate at least 12,500/s." in markdown(result, tolerance)


def test_a_missing_message_is_not_held() -> None:
    tolerance = Tolerance()
    assert holds(_case("candidate", 1000, 5, 1.0), tolerance)
    assert not holds(_case("candidate", 1000, 5, 1.0, missing=1), tolerance)


def test_every_round_counts_the_worst_p99_and_the_mean_cpu() -> None:
    cases = [
        _case("baseline", 1000, 20, 50.0),
        _case("baseline", 1000, 40, 50.0),
        _case("candidate", 1000, 45, 49.0),
        _case("candidate", 1000, 25, 55.0),
    ]
    (verdict,) = verdicts(_result(cases), Tolerance())
    assert verdict.baseline_p99 == [20, 40]
    assert verdict.cpu_ratio == 1.04  # (49 + 55) / 2 against 50
    assert regressions(verdict, Tolerance()) == []  # 45 against the baseline's worst 40


def test_a_failed_node_is_listed_and_not_held() -> None:
    failed = {"side": "candidate", "round": 1, "rate_target": 1000, "error": "node exited"}
    cases = [_case("baseline", 1000, 20, 50.0), failed]
    assert _lost(cases) == ["the baseline holds this rate, the candidate does not"]
    assert "node exited" in markdown(_result(cases), Tolerance())


def test_markdown_has_a_row_per_case_and_a_verdict_per_rate() -> None:
    cases = [_case("baseline", 1000, 20, 50.0), _case("candidate", 1000, 31, 50.0)]
    text = markdown(_result(cases), Tolerance())
    assert text.count("| 1,000 | 1 |") == 2
    assert "| 1,000 | 20 | 31 | 50.0 | 50.0 | 1.0 | p99 31 ms against 20 ms" in text


def test_a_run_whose_baseline_failed_proves_nothing() -> None:
    tolerance = Tolerance()
    failed = {"side": "baseline", "round": 1, "rate_target": 1000, "error": "node exited"}
    assert "node exited" in str(
        inconclusive(_result([failed, _case("candidate", 1000, 20, 50.0)]), tolerance)
    )
    # A baseline that holds no rate still has tails to compare (and a climb).
    beyond = [_case("baseline", 1000, 300, 50.0), _case("candidate", 1000, 600, 80.0)]
    assert inconclusive(_result(beyond), tolerance) is None
    fine = [_case("baseline", 1000, 20, 50.0), _case("candidate", 1000, 20, 50.0)]
    assert inconclusive(_result(fine), tolerance) is None


def test_a_revision_installed_with_its_own_library_versions_is_flagged() -> None:
    result = _result([_case("baseline", 1000, 20, 50.0), _case("candidate", 1000, 20, 50.0)])
    result["baseline"] = {**result["baseline"], "pinned": False}
    assert "Not comparable: v1 (0000000)" in markdown(result, Tolerance())
