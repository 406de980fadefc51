#!/usr/bin/env python3
"""What authentication costs the HTTP proxy: requests/s and proxy CPU per request with
tokens off, on, and on with a pending-message quota, alternated in one run on one broker.

    python scripts/proxy_auth_bench.py [--broker kafka] [--rounds 2] [--seconds 15]

Each mode runs ``chronos proxy`` as its own process (fresh, the same config but for
``[security]``) and drives it with wrk (2 threads, 16 connections) at full speed: single
messages (``POST /v1/messages``) and batches of 100 (``POST /v1/messages/batch``), each
message 200 bytes due in an hour. The order of the modes rotates every round, so drift on
these shared cores hits each. Any answer but 201 fails the run (a refused token, a quota hit).
Reported per mode: requests/s of every round and the proxy's CPU ms per request; then the
ratios to ``off``. JSON summary last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chronos.bench.sampler import cpu_seconds  # noqa: E402
from chronos.bench.scenarios import run_wrk, wait_http  # noqa: E402
from chronos.bench.stack import BenchStack  # noqa: E402
from chronos.web.tokens import hash_token, new_token  # noqa: E402

PORT = 18090
TOKEN = new_token()
MODES = ("off", "on", "on+quota")


def _security(mode: str, workdir: Path) -> str:
    """The ``[security]`` table of ``mode`` (none for off: loopback without tokens)."""
    if mode == "off":
        return ""
    quota = "max_pending = 1000000000\n" if mode == "on+quota" else ""
    tokens = workdir / f"tokens-{mode.replace('+', '-')}.toml"
    tokens.write_text(
        f'[[tokens]]\nname = "bench"\nsha256 = "{hash_token(TOKEN)}"\n'
        f'topics = ["bench*"]\noperations = ["send"]\n{quota}'
    )
    return f'\n[security]\ntokens_file = "{tokens}"\n'


def _run_mode(stack: BenchStack, mode: str, seconds: int) -> dict[str, Any]:
    config = stack.workdir / "proxy.toml"
    config.write_text(
        (stack.workdir / "chronos.toml").read_text()
        + f"\n[proxy]\nport = {PORT}\n"
        + _security(mode, stack.workdir)
    )
    proxy = subprocess.Popen(
        [sys.executable, "-m", "chronos.cli.entry", "proxy", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    one = f'{{"topic":"{stack.target}","value":"{"x" * 200}","delay_ms":3600000}}'
    results: dict[str, Any] = {}
    try:
        wait_http(PORT)
        for name, path, body in (
            ("single", "/v1/messages", one),
            ("batch100", "/v1/messages/batch", '{"messages":[' + ",".join([one] * 100) + "]}"),
        ):
            before = cpu_seconds(proxy.pid)
            auth = {} if mode == "off" else {"Authorization": f"Bearer {TOKEN}"}
            rate, requests = run_wrk(PORT, path, body, seconds, auth)
            if not requests:
                raise RuntimeError(f"wrk measured nothing for {mode} {name}")
            cpu = cpu_seconds(proxy.pid) - before
            results[name] = {
                "requests_per_s": round(rate),
                "cpu_ms_per_request": round(cpu * 1000 / requests, 3),
            }
            print(f"  {mode:9} {name:9} {rate:8.0f} req/s  {cpu * 1000 / requests:.3f} ms CPU/req")
    finally:
        proxy.terminate()
        proxy.wait(30)
        time.sleep(1)  # the port
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="kafka")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=15)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with BenchStack(bootstrap=None, broker=args.broker) as stack:
        for round_ in range(args.rounds):
            order = MODES[round_ % 3 :] + MODES[: round_ % 3]
            print(f"round {round_ + 1}: {', '.join(order)}")
            for mode in order:
                runs[mode].append(_run_mode(stack, mode, args.seconds))
    summary: dict[str, Any] = {"broker": args.broker, "seconds": args.seconds, "modes": {}}
    for mode in MODES:
        summary["modes"][mode] = {
            kind: {
                "requests_per_s": [r[kind]["requests_per_s"] for r in runs[mode]],
                "cpu_ms_per_request": statistics.median(
                    r[kind]["cpu_ms_per_request"] for r in runs[mode]
                ),
            }
            for kind in ("single", "batch100")
        }
    base = summary["modes"]["off"]
    for mode in MODES[1:]:
        for kind in ("single", "batch100"):
            entry = summary["modes"][mode][kind]
            entry["rate_ratio_to_off"] = round(
                statistics.median(entry["requests_per_s"])
                / statistics.median(base[kind]["requests_per_s"]),
                3,
            )
            entry["cpu_ratio_to_off"] = round(
                entry["cpu_ms_per_request"] / base[kind]["cpu_ms_per_request"], 3
            )
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
