"""The pipeline's row-level logic, without Spark: planning, ids, due times, rules, repeats."""

from __future__ import annotations

import builtins
from typing import Any

import pyarrow as pa
import pytest

from chronos.errors import ValidationError
from chronos.pipeline import require_spark
from chronos.pipeline.checkpoint_source import split_slots
from chronos.pipeline.jobs.occurrences import INPUT, expand_batches
from chronos.pipeline.jobs.requests import INPUT_COLUMNS, check_row, content_id, deliver_at_ms
from chronos.pipeline.kafka_source import OffsetRange, split_range
from chronos.repeat import Repeat, RepeatKind
from chronos.settings import ChronosSettings
from chronos.validation import validate_id
from proxy import DelayClient
from proxy.client import DelayRequest

SETTINGS = ChronosSettings()
NOW = 1_800_000_000_000


def test_split_range_cuts_exact_ranges_and_keeps_an_open_end_open() -> None:
    exact = split_range(OffsetRange("t", 0, 10, 35), 0, 10)
    assert [(r.start, r.end) for r in exact] == [(10, 20), (20, 30), (30, 35)]
    open_end = split_range(OffsetRange("t", 1, 0, None), 25, 10)
    assert [(r.start, r.end) for r in open_end] == [(0, 10), (10, 20), (20, None)]
    assert [(r.start, r.end) for r in split_range(OffsetRange("t", 2, 5, None), 5, 10)] == [
        (5, None)
    ]


def test_split_slots_cover_the_span_once() -> None:
    ranges = split_slots(100, 1099, 8)
    assert ranges[0].start_ms == 100 and ranges[-1].stop_ms == 1100
    assert all(a.stop_ms == b.start_ms for a, b in zip(ranges, ranges[1:], strict=False))
    assert len(split_slots(5, 6, 8)) == 2


def test_content_ids_are_stable_valid_and_tell_rows_apart() -> None:
    a = content_id("t", b"k", b"v", [("h", b"1")], "in:5s")
    assert a == content_id("t", b"k", b"v", [("h", b"1")], "in:5s")
    others = {
        content_id("t", b"k", b"v", [("h", b"2")], "in:5s"),
        content_id("t", None, b"kv", [("h", b"1")], "in:5s"),
        content_id("t", b"kv", None, [("h", b"1")], "in:5s"),
        content_id("t", b"k", b"v", [("h", b"1")], "in:6s"),
        content_id("u", b"k", b"v", [("h", b"1")], "in:5s"),
    }
    assert a not in others and len(others) == 5
    validate_id(a, SETTINGS.limits)


def test_deliver_at_takes_epoch_ms_or_iso_with_an_offset() -> None:
    assert deliver_at_ms("1800000000000") == NOW
    assert deliver_at_ms("2027-01-15T08:00:00.250+01:00") == 1_799_996_400_250
    with pytest.raises(ValidationError, match="no UTC offset"):
        deliver_at_ms("2027-01-15T08:00:00")
    with pytest.raises(ValidationError, match="neither epoch ms"):
        deliver_at_ms("tomorrow")


def _row(**fields: Any) -> tuple[Any, ...]:
    base: dict[str, Any] = {
        "id": None,
        "topic": "t",
        "key": None,
        "value": b"v",
        "headers": [],
        "deliver_at": None,
        "delay": "5s",
    }
    base.update(fields)
    return tuple(base.get(c) for c in INPUT_COLUMNS)


@pytest.mark.parametrize(
    ("fields", "request_fields"),
    [
        ({"topic": "bad topic"}, {"topic": "bad topic"}),
        ({"topic": "chronos.inner"}, {"topic": "chronos.inner"}),
        ({"headers": [{"name": "chronos-x", "value": b"1"}]}, {"headers": [("chronos-x", b"1")]}),
        ({"value": b"x" * ((1 << 20) + 1)}, {"value": b"x" * ((1 << 20) + 1)}),
        ({"id": "a b"}, {"id": "a b"}),
        ({"delay": "400d"}, {"delay": 400 * 86400}),
    ],
)
def test_rows_break_the_same_rules_as_proxy_requests(
    fields: dict[str, Any], request_fields: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError) as from_row:
        check_row(_row(**fields), SETTINGS.limits, SETTINGS.topics.names, NOW)
    request: dict[str, Any] = {"topic": "t", "value": b"v", "delay": 5, **request_fields}
    with pytest.raises(ValidationError) as from_proxy:
        DelayClient(SETTINGS).build(DelayRequest(**request))
    assert from_row.value.field == from_proxy.value.field
    assert from_row.value.status == from_proxy.value.status


def test_a_valid_row_becomes_the_message_the_proxy_would_schedule() -> None:
    message = check_row(
        _row(id="x1", key=b"k", headers=[{"name": "h", "value": b"\x00"}], delay="250ms"),
        SETTINGS.limits,
        SETTINGS.topics.names,
        NOW,
    )
    assert (message.id, message.topic, message.key, message.value) == ("x1", "t", b"k", b"v")
    assert message.headers == [("h", b"\x00")] and message.first_due_ms == NOW + 250
    with pytest.raises(ValidationError, match="exactly one"):
        check_row(_row(deliver_at="1", delay="1s"), SETTINGS.limits, SETTINGS.topics.names, NOW)


def test_a_cron_row_becomes_the_cron_repeat_the_proxy_would_schedule() -> None:
    fields = {"cron": "0 9 * * 1-5", "zone": "Europe/Berlin", "times": "3", "delay": "0s"}
    message = check_row(_row(**fields), SETTINGS.limits, SETTINGS.topics.names, NOW)
    weekdays = Repeat.calendar("0 9 * * 1-5", "Europe/Berlin", times=3)
    assert message.repeat == weekdays
    assert message.first_due_ms == weekdays.first_due(NOW) == NOW  # NOW: a Friday, 09:00 CET
    until = check_row(
        _row(**fields, until=str(message.first_due_ms)),
        SETTINGS.limits,
        SETTINGS.topics.names,
        NOW,
    )
    assert until.repeat is not None and until.repeat.until_ms == message.first_due_ms
    assert until.id != message.id, "rows differing only in their schedule are two messages"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "0 9 * * 1-5"}, "times"),
        ({"times": "3"}, "times"),
        ({"cron": "0 9 * * 1-5", "times": "3", "zone": "Nowhere/City"}, "repeat.cron"),
        ({"cron": "0 9 * * 1-5", "times": "3", "until": "soon"}, "until"),
    ],
)
def test_a_cron_row_that_cannot_be_scheduled_names_its_field(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        check_row(_row(**fields), SETTINGS.limits, SETTINGS.topics.names, NOW)
    assert refused.value.field == field


def test_a_cron_add_expands_from_its_first_fire_in_its_zone() -> None:
    start = 1_774_612_800_000  # 2026-03-27 12:00 UTC, a Friday: today's 09:00 has passed
    row = {
        "id": "cron", "topic": "t", "occurrence": 1, "due_ms": start, "first_due_ms": start,
        "repeat": "cron", "repeat_times": 10, "repeat_cron": "0 9 * * 1-5",
        "repeat_zone": "Europe/Berlin",
    }  # fmt: skip
    day, hour = 86_400_000, 3_600_000
    monday = start + 3 * day - 5 * hour  # 09:00 CEST = 07:00 UTC: the clocks went forward
    assert [g[1:] for g in _expand([row], until=monday + 2 * day + 1)] == [
        (1, monday),
        (2, monday + day),
        (3, monday + 2 * day),
    ]


def _expand(rows: list[dict[str, Any]], until: int) -> list[tuple[str, int, int]]:
    batch = pa.RecordBatch.from_pylist([{c: r.get(c) for c in INPUT} for r in rows])
    out = pa.Table.from_batches(list(expand_batches(iter([batch]), until_ms=until)))
    return list(
        zip(
            out["id"].to_pylist(),
            out["occurrence"].to_pylist(),
            out["due_ms"].to_pylist(),
            strict=True,
        )
    )


def test_repeats_expand_along_their_schedule_until_the_bound() -> None:
    expo = Repeat(RepeatKind.EXPONENTIAL, 1000, 6, multiplier=2, max_interval_ms=5000)
    rows = [
        {"id": "one", "topic": "t", "occurrence": 1, "due_ms": 50, "first_due_ms": 50},
        {
            "id": "fix",
            "topic": "t",
            "occurrence": 2,
            "due_ms": 1100,
            "first_due_ms": 0,
            "repeat": "fixed",
            "repeat_interval_ms": 1000,
            "repeat_times": 5,
        },
        {
            "id": "exp",
            "topic": "t",
            "occurrence": 1,
            "due_ms": 0,
            "first_due_ms": 0,
            "repeat": "exponential",
            "repeat_interval_ms": 1000,
            "repeat_times": 6,
            "repeat_multiplier": 2,
            "repeat_max_interval_ms": 5000,
        },
        {"id": "late", "topic": "t", "occurrence": 1, "due_ms": 99_999, "first_due_ms": 0},
    ]
    got = _expand(rows, until=4000)
    assert ("one", 1, 50) in got
    # A stored occurrence keeps its slot (1100, later than its 1000 due); later ones follow
    # the schedule.
    assert [g for g in got if g[0] == "fix"] == [
        ("fix", 2, 1100),
        ("fix", 3, 2000),
        ("fix", 4, 3000),
    ]
    assert [g[2] for g in got if g[0] == "exp"] == [
        expo.due_of(0, n) for n in range(1, 7) if expo.due_of(0, n) < 4000
    ]
    assert not [g for g in got if g[0] == "late"]


def test_missing_spark_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_pyspark(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError("No module named 'pyspark'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyspark)
    with pytest.raises(ImportError, match=r"chronos-delay\[spark\]"):
        require_spark()
