"""CLI argument helpers: durations, headers, repeat specs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from chronos.arguments import duration_ms
from chronos.cli.args import attach_signed_values, header, repeat
from chronos.repeat import Repeat, RepeatKind


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250ms", 250),
        ("5s", 5000),
        ("2m", 120_000),
        ("1.5h", 5_400_000),
        ("1d", 86_400_000),
        ("3", 3000),
        ("0.25", 250),
        ("0", 0),
        (" 5s ", 5000),
        ("1.5ms", 2),
    ],
)
def test_duration_ms(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "error"),
    [
        *((t, "not a duration") for t in ["", "abc", "5x", "5 s", "1.5.2s", "s", ".5s", "5S"]),
        *((t, "not a duration") for t in ["1e3", "5sec"]),
        ("-5s", "cannot be negative"),
    ],
)
def test_duration_ms_errors(text: str, error: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=error):
        duration_ms(text)


def test_duration_ms_as_argparse_type() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=duration_ms)
    assert parser.parse_args(["--delay", "2m"]).delay == 120_000
    with pytest.raises(SystemExit):
        parser.parse_args(["--delay", "soon"])


def test_header() -> None:
    assert header("a=b") == ("a", "b")
    assert header("a=b=c") == ("a", "b=c")
    assert header("a=") == ("a", "")
    for bad in ("noequals", "=value", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            header(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("fixed:5s:3", Repeat(RepeatKind.FIXED, 5000, 3)),
        ("fixed:250ms:1", Repeat(RepeatKind.FIXED, 250, 1)),
        ("exponential:1s:5", Repeat(RepeatKind.EXPONENTIAL, 1000, 5, 2, 86_400_000)),
        ("exponential:2s:4:3", Repeat(RepeatKind.EXPONENTIAL, 2000, 4, 3, 86_400_000)),
        ("exponential:1s:6:2:1m", Repeat(RepeatKind.EXPONENTIAL, 1000, 6, 2, 60_000)),
        ("exponential:10:2:5:1.5h", Repeat(RepeatKind.EXPONENTIAL, 10_000, 2, 5, 5_400_000)),
    ],
)
def test_repeat(text: str, expected: Repeat) -> None:
    assert repeat(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "fixed",
        "fixed:5s",
        "fixed:5s:3:4",
        "linear:5s:3",
        "fixed:5s:x",
        "fixed:5s:3.5",
        "exponential:1s",
        "exponential:1s:3:x",
        "exponential:1s:3:2:1m:9",
        "FIXED:5s:3",
    ],
)
def test_repeat_errors(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="fixed:INTERVAL:TIMES"):
        repeat(text)


@pytest.mark.parametrize("text", ["fixed:soon:3", "exponential:1s:3:2:later"])
def test_repeat_bad_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        repeat(text)


def test_a_negative_delay_gets_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Not argparse's "expected one argument": the value reaches the option and is explained."""
    from chronos.cli.main import build_parser

    argv = attach_signed_values(["send", "--topic", "t", "--value", "v", "--delay", "-5s"])
    assert argv[-1] == "--delay=-5s"
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert "a delay cannot be negative (0 delivers now" in capsys.readouterr().err


def test_every_subcommand_option_has_help() -> None:
    from chronos.cli.main import build_parser

    missing = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "chronos")
    assert not missing, missing


def test_topics_migrate_refuses_to_run_outside_compact_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The migration applies compact mode's topic settings: run in refresh mode, it would
    leave the operator's configuration disagreeing with the topic, so it stops first."""
    from chronos.cli.main import build_parser

    config = tmp_path / "c.toml"
    config.write_text('[node]\ndata_dir = "' + str(tmp_path / "store") + '"\n')
    args = build_parser().parse_args(["topics", "migrate", "--config", str(config)])
    assert args.func(args) == 2
    assert "set rebuild.mode = compact" in capsys.readouterr().out
    assert not (tmp_path / "store").exists(), "no store opened"


def test_topics_migrate_refuses_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cluster's schedules are per partition: read as one store, it would be empty, nothing
    would be restated and the topic made compact anyway (reschedules lost to the cleaner)."""
    from chronos.cli.main import build_parser

    config = tmp_path / "c.toml"
    config.write_text(
        '[node]\ndata_dir = "' + str(tmp_path / "store") + '"\n'
        '[rebuild]\nmode = "compact"\n[cluster]\nname = "c"\nshape = "node"\n'
    )
    args = build_parser().parse_args(["topics", "migrate", "--config", str(config)])
    assert args.func(args) == 2
    assert "does not move to compact mode in place" in capsys.readouterr().out
    assert not (tmp_path / "store").exists(), "no store opened"
