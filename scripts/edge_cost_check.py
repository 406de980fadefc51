#!/usr/bin/env python3
"""The proxy while three clients send the costliest bodies its limits allow (issue 62,
acceptance 2): a fourth client's plain ``POST /v1/messages`` and ``GET /healthz`` must stay
fast, and the proxy's memory bounded.

    python scripts/edge_cost_check.py [--broker kafka|tansu] [--seconds 30]

The three costly clients, each in a process of its own, send in a loop (each waits for its
answer, as a client does):

* ``keys``: one message object filling ``security.max_body_bytes`` with unknown keys;
* ``batch``: a batch of ``proxy.batch_max`` messages, each with as many headers as the body's
  size allows;
* ``cron``: a batch of ``proxy.batch_max`` every-second cron repeats at
  ``limits.repeat_max_times``, each with its own first due (no cache helps) and every tenth
  with an expression of its own;
* ``small-cron`` (not by default: ``--attacks``): a batch just under
  ``proxy.inline_body_bytes`` (read on the server's side, not by a body worker) of cron
  repeats at ``limits.repeat_max_times``, each with an expression, zone and first due of its
  own.

Meanwhile the plain client sends one small message every 50 ms and asks ``/healthz`` every
100 ms. Passes when every plain POST is 201 with p99 under ``--post-p99-ms`` (100), every
health answer 200 with p99 under ``--health-p99-ms`` (50), and the resident memory of the
proxy and its body workers together never over ``--max-rss-mib`` (1,024). JSON summary last;
exit 1 when it fails.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chronos.bench.scenarios import wait_http  # noqa: E402
from chronos.bench.stack import BenchStack  # noqa: E402
from chronos.devstack.tansu import free_port  # noqa: E402
from chronos.settings import ChronosSettings  # noqa: E402

_HOUR_MS = 3_600_000


def keys_body(topic: str, max_bytes: int) -> tuple[str, bytes]:
    """One message with unknown keys up to ``max_bytes``."""
    head = f'{{"topic":"{topic}","value":"x","delay_ms":{_HOUR_MS}'.encode()
    parts = [head]
    size, index = len(head) + 1, 0
    while True:
        part = b',"k%07d":0' % index
        if size + len(part) > max_bytes:
            break
        parts.append(part)
        size += len(part)
        index += 1
    parts.append(b"}")
    return "/v1/messages", b"".join(parts)


def batch_body(topic: str, max_bytes: int, batch_max: int) -> tuple[str, bytes]:
    """``batch_max`` messages, each with as many one-letter headers as the size allows."""
    per_message = max_bytes // batch_max - 80
    header = '{"name":"h","value":"v"}'
    count = max(0, per_message // (len(header) + 1))
    headers = ",".join([header] * count)
    message = f'{{"topic":"{topic}","value":"x","delay_ms":{_HOUR_MS},"headers":[{headers}]}}'
    body = '{"messages":[' + ",".join([message] * batch_max) + "]}"
    return "/v1/messages/batch", body.encode()


def cron_body(topic: str, batch_max: int, times: int) -> tuple[str, bytes]:
    """``batch_max`` every-second cron repeats of ``times``, each first due its own second."""
    messages = []
    for index in range(batch_max):
        expression = "* * * * * *" if index % 10 else f"{index % 60} * * * * *"
        repeat = {"kind": "cron", "cron": expression, "zone": "Europe/Berlin", "times": times}
        delay = _HOUR_MS + index * 1000
        messages.append({"topic": topic, "value": "x", "delay_ms": delay, "repeat": repeat})
    return "/v1/messages/batch", json.dumps({"messages": messages}).encode()


def small_cron_body(topic: str, max_bytes: int, times: int) -> tuple[str, bytes]:
    """As many cron repeats as fit in ``max_bytes`` (a body read on the event loop's side),
    each with an expression, a zone and a first due of its own: no cache helps."""
    zones = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Tehran")
    messages: list[dict[str, Any]] = []
    while True:
        index = len(messages)
        repeat = {
            "kind": "cron",
            "cron": f"{index % 60} */{1 + index % 7} * * * *",
            "zone": zones[index % len(zones)],
            "times": times,
        }
        message = {"topic": topic, "value": "x", "delay_ms": _HOUR_MS + index, "repeat": repeat}
        body = json.dumps({"messages": [*messages, message]}).encode()
        if len(body) > max_bytes:
            return "/v1/messages/batch", json.dumps({"messages": messages}).encode()
        messages.append(message)


def _attack(name: str, port: int, path: str, body: bytes, until: float, results: Any) -> None:
    """Send ``body`` again and again until ``until`` (monotonic); put ``name`` and the
    (status, s) pairs."""
    answers: list[tuple[int | str, float]] = []
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as http:
        while time.monotonic() < until:
            sent = time.monotonic()
            try:
                status: int | str = http.post(path, content=body, headers=headers).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            answers.append((status, round(time.monotonic() - sent, 3)))
    results.put((name, answers))


def _family(pid: int) -> list[int]:
    """``pid`` and its children (the proxy's body workers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


def _rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its children, MiB."""
    total = 0
    for member in _family(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:  # a worker replaced meanwhile
            continue
    return total / 1024


def _cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its children now running."""
    total = 0
    for member in _family(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / 100


class _Plain(threading.Thread):
    """One plain request every ``every_s`` until stopped: latencies in ms, statuses."""

    def __init__(self, port: int, method: str, path: str, every_s: float, body: Any) -> None:
        super().__init__(daemon=True)
        self._url = f"http://127.0.0.1:{port}{path}"
        self._method, self._every_s, self._body = method, every_s, body
        self._halt = threading.Event()
        self.ms: list[float] = []
        self.failed: list[str] = []

    def run(self) -> None:
        with httpx.Client(timeout=30) as http:
            while not self._halt.is_set():
                sent = time.monotonic()
                try:
                    answer = http.request(self._method, self._url, json=self._body)
                    if answer.status_code not in (200, 201):
                        self.failed.append(str(answer.status_code))
                except httpx.HTTPError as exc:
                    self.failed.append(type(exc).__name__)
                took = time.monotonic() - sent
                self.ms.append(took * 1000)
                self._halt.wait(max(0.0, self._every_s - took))

    def stop(self) -> None:
        self._halt.set()
        self.join(60)


def _rank(ordered: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile of sorted values (0 for none)."""
    if not ordered:
        return 0.0
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]


def _summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "count": len(ordered),
        "p50_ms": round(_rank(ordered, 50), 1),
        "p99_ms": round(_rank(ordered, 99), 1),
        "max_ms": round(ordered[-1], 1) if ordered else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="kafka")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--attacks", nargs="+", default=["keys", "batch", "cron"])
    parser.add_argument("--post-p99-ms", type=float, default=100.0)
    parser.add_argument("--health-p99-ms", type=float, default=50.0)
    parser.add_argument("--max-rss-mib", type=float, default=1024.0)
    args = parser.parse_args()
    settings = ChronosSettings()
    port = free_port()
    with BenchStack(bootstrap=None, broker=args.broker) as stack:
        bodies = {
            "keys": keys_body(stack.target, settings.security.max_body_bytes),
            "batch": batch_body(
                stack.target, settings.security.max_body_bytes, settings.proxy.batch_max
            ),
            "cron": cron_body(
                stack.target, settings.proxy.batch_max, settings.limits.repeat_max_times
            ),
            "small-cron": small_cron_body(
                stack.target, settings.proxy.inline_body_bytes, settings.limits.repeat_max_times
            ),
        }
        log_path = stack.workdir / "proxy.log"
        with log_path.open("wb") as log_file:
            proxy = stack.start_proxy(port, log_file)
            try:
                wait_http(port)
                plain_body = {"topic": stack.target, "value": "x", "delay_ms": _HOUR_MS}
                warm = httpx.post(f"http://127.0.0.1:{port}/v1/messages", json=plain_body)
                assert warm.status_code == 201, warm.text
                result = _run(args, port, proxy.pid, bodies, plain_body)
            finally:
                proxy.terminate()
                proxy.wait(30)
    print(json.dumps(result, indent=1))
    sys.exit(0 if result["ok"] else 1)


def _run(
    args: argparse.Namespace,
    port: int,
    proxy_pid: int,
    bodies: dict[str, tuple[str, bytes]],
    plain_body: dict[str, Any],
) -> dict[str, Any]:
    """Attack, measure the plain client and the proxy's memory; the summary."""
    results: Any = multiprocessing.get_context("fork").Queue()
    until = time.monotonic() + args.seconds
    attackers = [
        multiprocessing.get_context("fork").Process(
            target=_attack, args=(name, port, *bodies[name], until, results), daemon=True
        )
        for name in args.attacks
    ]
    cpu_before = _cpu_s(proxy_pid)
    for attacker in attackers:
        attacker.start()
    post = _Plain(port, "POST", "/v1/messages", 0.05, plain_body)
    health = _Plain(port, "GET", "/healthz", 0.1, None)
    post.start()
    health.start()
    rss = [_rss_mib(proxy_pid)]
    while time.monotonic() < until:
        time.sleep(0.25)
        rss.append(_rss_mib(proxy_pid))
    post.stop()
    health.stop()
    answers = dict(results.get(timeout=600) for _ in args.attacks)
    for attacker in attackers:
        attacker.join(60)
    cpu_s = _cpu_s(proxy_pid) - cpu_before
    plain, probe = _summary(post.ms), _summary(health.ms)
    ok = (
        not post.failed
        and not health.failed
        and plain["p99_ms"] < args.post_p99_ms
        and probe["p99_ms"] < args.health_p99_ms
        and max(rss) <= args.max_rss_mib
    )
    return {
        "seconds": args.seconds,
        "body_bytes": {name: len(bodies[name][1]) for name in args.attacks},
        "costly_answers": {
            name: {
                "count": len(a),
                "statuses": sorted({str(s) for s, _ in a}),
                "s_max": max((s for _, s in a), default=0.0),
            }
            for name, a in answers.items()
        },
        "plain_post": {**plain, "failed": post.failed[:10]},
        "healthz": {**probe, "failed": health.failed[:10]},
        "proxy_rss_mib_max": round(max(rss), 1),
        "proxy_cpu_s": round(cpu_s, 1),
        "ok": ok,
    }


if __name__ == "__main__":
    main()
