"""The benchmark's Markdown names the partitions of each steady run."""

from __future__ import annotations

from typing import Any

from chronos.bench.report import markdown


def _run(topics: dict[str, int] | None) -> dict[str, Any]:
    run: dict[str, Any] = {
        "rate_target": 1000.0,
        "ingest_rate": 999.0,
        "delivery_rate_sustained": 998.0,
        "missing": 0,
        "duplicates": 0,
        "early": 0,
        "lateness_ms": {"p50": 1, "p99": 2, "p999": 3, "max": 4},
        "node": {"cpu_percent_mean": 10.0, "rss_mib_peak": 100.0},
        "sustained": True,
    }
    if topics is not None:
        run["topics"] = topics
    return run


def _results(runs: list[dict[str, Any]]) -> dict[str, Any]:
    machine = {"cpu": "cpu", "cores": 2, "memory_gib": 1.0, "broker": "b", "python": "3"}
    return {
        "mode": "quick",
        "started": "now",
        "machine": {**machine, "librdkafka": "2"},
        "scenarios": {"steady": {"runs": runs, "highest_sustained_rate": 1000.0}},
    }


def test_steady_section_names_the_partitions_of_its_runs() -> None:
    text = markdown(_results([_run({"inner_partitions": 1, "target_partitions": 8})]))
    assert "Partitions: inner topic 1 partition, target topic 8 partitions." in text


def test_runs_without_a_recorded_layout_print_no_partitions_line() -> None:
    """Results written before the layout was recorded still render."""
    text = markdown(_results([_run(None)]))
    assert "Partitions:" not in text
    assert "Highest sustained rate" in text


def test_a_rerun_line_says_which_partitions_and_batch_size_it_ran_with() -> None:
    results = _results([_run(None)])
    results["reruns"] = [
        {
            "started": "later",
            "only": ["steady"],
            "settings": {"inner_partitions": 1, "target_partitions": 8, "ingest_batch_max": 1000},
        },
        {
            "started": "newer",
            "only": ["scale"],
            "settings": {
                "inner_partitions": 1,
                "target_partitions": 8,
                "ingest_batch_max": 1000,
                "ingest_decoder": "process",
            },
        },
        {"started": "old", "only": ["burst"]},
    ]
    text = markdown(results)
    assert (
        "Re-run later: steady (inner topic 1, target topic 8 partitions; ingest batches up to "
        "1000)." in text
    )
    assert (
        "Re-run newer: scale (inner topic 1, target topic 8 partitions; ingest batches up to "
        "1000; decoding in a process)." in text
    )
    assert "Re-run old: burst." in text


def test_the_steady_table_shows_the_worst_second_of_a_cold_start() -> None:
    run = _run({"inner_partitions": 1, "target_partitions": 8})
    run["worst_lateness_per_second_ms"] = {str(s): 5 for s in range(30)} | {"3": 240, "20": 90}
    text = markdown(_results([run]))
    assert "worst 1 s, first 10 s / all ms" in text
    assert "| 240 / 240 |" in text


def test_the_steady_section_shows_cpu_per_message_per_stage_against_the_relay() -> None:
    run = _run(None)
    run["cpu_us_per_msg"] = 30.0
    run["stage_cpu_us_per_msg"] = {"ingest": 7.5, "decoder/decoder": 8.0}
    results = _results([run])
    results["scenarios"]["relay"] = {"rate": 100_000, "cpu_us_per_record": 3.0}
    text = markdown(results)
    assert "100000 records/s, 3.0 µs of CPU per record" in text
    # Largest stage first; the node against the relay as a ratio.
    assert "| rate/s | node + children µs/msg | × relay | decoder/decoder | ingest |" in text
    assert "| 1000 | 30.0 | 10.0 | 8.0 | 7.5 |" in text


def test_runs_measured_before_stages_were_recorded_print_no_stage_table() -> None:
    assert "per stage" not in markdown(_results([_run(None)]))
