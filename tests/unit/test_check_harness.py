"""The harness every ``scripts/`` check shares (``chronos/devstack/check.py``): what it counts
and what it prints decide whether a check passes."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from chronos.devstack.check import Tally, add_broker_options, finish, staged
from chronos.devstack.watch import Collected, Delivered


def _copy(message_id: str, due_ms: int, produced_ms: int) -> Delivered:
    return Delivered("t", message_id, due_ms, 1, produced_ms, None, b"v", [])


def test_a_tally_counts_lost_duplicated_and_early_copies_of_what_was_expected() -> None:
    seen = Collected()
    for copy in (
        _copy("once", 1_000, 1_010),
        _copy("twice", 2_000, 2_005),
        _copy("twice", 2_000, 2_300),
        _copy("early", 3_000, 2_999),
        _copy("unexpected", 4_000, 4_000),
    ):
        seen.add(copy)
    tally = Tally()
    lateness = tally.count({"once": 1_000, "twice": 2_000, "early": 3_000, "lost": 5_000}, seen)
    assert (tally.lost, tally.duplicates, tally.early) == (1, 1, 1)
    assert not tally.exact
    assert lateness == [10, 5, -1], "the first copy of each delivered message"
    assert Tally().exact


@dataclass
class _Summary(Tally):
    scenario: str
    problems: int = 0

    @property
    def ok(self) -> bool:
        return self.exact and not self.problems


def test_finish_prints_the_summary_last_and_exits_by_its_ok(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert finish(_Summary(scenario="kill"), tmp_path) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"logs: {tmp_path}"
    assert json.loads(lines[-1]) == {
        "lost": 0,
        "duplicates": 0,
        "early": 0,
        "scenario": "kill",
        "problems": 0,
        "ok": True,
    }
    assert finish(_Summary(scenario="kill", lost=2)) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False
    assert finish({"ok": True, "rate": 5}) == 0
    assert finish({"rate": 5}) == 1, "a summary that does not say ok failed"
    with pytest.raises(TypeError):
        finish(_Summary)  # type: ignore[arg-type]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_broker_options(parser)
    return parser.parse_args(argv)


def test_a_stage_on_a_named_cluster_starts_no_broker_and_keeps_or_removes_its_directory(
    tmp_path: Path,
) -> None:
    with staged(_args("--bootstrap", "kafka:9092"), "harness", temporary=True) as stage:
        assert stage.broker is None and stage.broker_name == "external"
        assert stage.bootstrap == "kafka:9092" and stage.workdir.is_dir()
    assert not stage.workdir.exists(), "a temporary work directory is removed"
    kept = tmp_path / "kept"
    args = _args("--bootstrap", "kafka:9092", "--keep", str(kept))
    with staged(args, "harness", temporary=True) as stage:
        (stage.workdir / "node.log").write_text("seen")
    assert (kept / "node.log").read_text() == "seen", "--keep always stays"
