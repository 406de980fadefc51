"""What the admin API costs the hot path: the steady benchmark with the admin API on (its
defaults: delivery outcomes kept, due counts followed, ``/metrics`` scraped every 5 s as a
Prometheus would) beside the same node with ``[admin] enabled = false``, alternated in one run.

    python scripts/admin_overhead.py [--broker kafka] [--rounds 2] [--seconds 20]
        [--rates 10000 14000 16000 18000 20000]

Each round runs both modes (the order flips every round, so drift on these shared cores hits
both), each at increasing rates on a fresh node until one is not sustained (loss, ingest under
95 % of the rate, or lateness p99 over 100 ms). Reported per mode and round: the highest
sustained rate, and the node's CPU seconds per 1,000 messages at every rate; then the ratios
on / off. JSON summary last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chronos.bench.scenarios import steady  # noqa: E402
from chronos.bench.stack import BenchStack  # noqa: E402

MODES = {"on": "", "off": "\n[admin]\nenabled = false\n"}
SCRAPE_S = 5.0


def _admin_url(log: Path, timeout_s: float = 30) -> str | None:
    """The admin API's address from the node's ``admin_listening`` log line."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if "admin_listening" in line:
                event = json.loads(line)
                return f"http://{event['host']}:{event['port']}"
        time.sleep(0.2)
    return None


class Scraper(threading.Thread):
    """Scrapes ``/metrics`` every few seconds, as a Prometheus server would."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self._url = url
        self._halt = threading.Event()
        self.scrapes = 0

    def run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._halt.wait(SCRAPE_S):
                if client.get(f"{self._url}/metrics").status_code == 200:
                    self.scrapes += 1

    def stop(self) -> None:
        self._halt.set()
        self.join()


def one_rate(broker: str, mode: str, rate: float, seconds: float) -> dict[str, Any]:
    with BenchStack(bootstrap=None, node_settings=MODES[mode], broker=broker) as stack:  # type: ignore[arg-type]
        stack.start_node()
        scraper = None
        if mode == "on":
            url = _admin_url(stack.workdir / "node.log")
            if url is None:
                raise RuntimeError("admin API on but no admin_listening line")
            scraper = Scraper(url)
            scraper.start()
        started = time.monotonic()
        run = steady(stack, rate, seconds)
        elapsed = time.monotonic() - started
        if scraper is not None:
            scraper.stop()
    cpu_s = run["node"]["cpu_percent_mean"] / 100 * elapsed
    return {
        "rate": rate,
        "sustained": run["sustained"],
        "ingest_rate": round(run["ingest_rate"]),
        "delivered": run["delivered"],
        "missing": run["missing"],
        "duplicates": run["duplicates"],
        "p99_ms": run["lateness_ms"]["p99"],
        "max_ms": run["lateness_ms"]["max"],
        "node_cpu_percent": run["node"]["cpu_percent_mean"],
        "node_cpu_s_per_1000": round(1000 * cpu_s / max(run["delivered"], 1), 4),
        "scrapes": None if scraper is None else scraper.scrapes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", choices=["kafka", "tansu"], default="kafka")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument(
        "--rates", type=float, nargs="+", default=[10000, 14000, 16000, 18000, 20000]
    )
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for round_no in range(args.rounds):
        order = ["on", "off"] if round_no % 2 == 0 else ["off", "on"]
        for mode in order:
            runs = []
            for rate in args.rates:
                run = one_rate(args.broker, mode, rate, args.seconds)
                runs.append(run)
                print(f"round {round_no + 1} admin {mode:>3} {rate:>7.0f}/s: {run}", flush=True)
                if not run["sustained"]:
                    break
            best = max((r["rate"] for r in runs if r["sustained"]), default=0)
            results[mode].append({"round": round_no + 1, "highest": best, "runs": runs})
    summary: dict[str, Any] = {"rounds": results}
    for mode in MODES:
        summary[f"highest_{mode}"] = [r["highest"] for r in results[mode]]
    # CPU per message at the rates both modes sustained in every round: the steadier comparison.
    ratios = []
    for rate in args.rates:
        per_mode = {}
        for mode in MODES:
            values = [
                run["node_cpu_s_per_1000"]
                for r in results[mode]
                for run in r["runs"]
                if run["rate"] == rate and run["sustained"]
            ]
            if len(values) == args.rounds:
                per_mode[mode] = statistics.mean(values)
        if len(per_mode) == 2:
            ratios.append(
                {
                    "rate": rate,
                    "cpu_s_per_1000_on": round(per_mode["on"], 4),
                    "cpu_s_per_1000_off": round(per_mode["off"], 4),
                    "on_over_off": round(per_mode["on"] / per_mode["off"], 3),
                }
            )
    summary["cpu_per_message"] = ratios
    summary["highest_on_over_off"] = round(
        statistics.mean(summary["highest_on"]) / max(statistics.mean(summary["highest_off"]), 1), 3
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
