"""Rate ladders: runs at increasing rates until one is not sustained, the highest rate a setup
holds. The steady and replicated scenarios and the Redis baseline climb the same way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from chronos.bench.stack import Rig

Result = dict[str, Any]


@dataclass(frozen=True)
class Ladder:
    """What a ladder of steady runs climbs and where each run goes.

    Parameters:
        rig: where each run's stack runs and its line goes.
        rates: the rates climbed, msg/s, in order.
        seconds: how long each run offers its rate.
        max_delay_ms: delays spread over 0 to this.
    """

    rig: Rig
    rates: Sequence[float]
    seconds: float
    max_delay_ms: int = 10_000


def climb(
    rates: Sequence[float], modes: Sequence[str], measure: Callable[[str, float], Result]
) -> dict[str, list[Result]]:
    """Each mode's runs at ``rates`` in order (``measure(mode, rate)``, whose ``sustained``
    says whether it held). A mode stops at its first rate not sustained; the ladder stops
    when every mode has."""
    runs: dict[str, list[Result]] = {mode: [] for mode in modes}
    for rate in rates:
        for mode in modes:
            if runs[mode] and not runs[mode][-1]["sustained"]:
                continue
            runs[mode].append(measure(mode, rate))
        if all(found and not found[-1]["sustained"] for found in runs.values()):
            break
    return runs


def highest_sustained(runs: Sequence[Result]) -> float:
    """The highest rate a run sustained, 0 when none did."""
    return max((run["rate_target"] for run in runs if run["sustained"]), default=0)
