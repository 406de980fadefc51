"""Rate ladders (``bench/ladder.py``): where a climb stops decides the rate a benchmark
publishes."""

from __future__ import annotations

from chronos.bench.ladder import Result, climb, highest_sustained


def test_each_mode_stops_at_its_first_rate_not_sustained_and_the_ladder_when_all_have() -> None:
    limits = {"alone": 3_000.0, "group": 1_500.0}
    asked: list[tuple[str, float]] = []

    def measure(mode: str, rate: float) -> Result:
        asked.append((mode, rate))
        return {"rate_target": rate, "sustained": rate <= limits[mode]}

    runs = climb([1_000, 2_000, 3_000, 4_000, 5_000], ["alone", "group"], measure)
    assert asked == [
        ("alone", 1_000),
        ("group", 1_000),
        ("alone", 2_000),
        ("group", 2_000),
        ("alone", 3_000),
        ("alone", 4_000),
    ], "a mode that failed is not run again; nothing runs once every mode failed"
    assert highest_sustained(runs["alone"]) == 3_000
    assert highest_sustained(runs["group"]) == 1_000
    assert highest_sustained([{"rate_target": 9, "sustained": False}]) == 0
