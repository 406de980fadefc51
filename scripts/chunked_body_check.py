#!/usr/bin/env python3
"""The proxy's memory after chunked uploads it refuses: ``--rounds`` (3) rounds of
``--clients`` (8) clients at once, each sending a chunked body of up to 1 GiB (no
``Content-Length``: the proxy learns its size only as it reads) until the proxy answers 413 at
``security.max_body_bytes`` and closes. The proxy's RSS is read from ``/proc`` before, after
each round (once every refused connection is closed) and at the end.

    python scripts/chunked_body_check.py [--broker tansu|kafka] [--max-rss-growth-mib 64]

Passes when the RSS after the last round is at most ``--max-rss-growth-mib`` over the RSS
before the first (bodies held at once are bounded by ``security.max_bodies_bytes`` anyway; this
judges what stays once they are gone). JSON summary last; exit 1 when over.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chronos.bench.scenarios import wait_http  # noqa: E402
from chronos.bench.stack import BenchStack  # noqa: E402
from chronos.devstack.tansu import free_port  # noqa: E402

_CHUNK = 64 * 1024
_GIB = 1 << 30
_SETTLE_S = 2.0


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _upload(port: int, answers: list[bytes]) -> None:
    """One chunked upload of up to 1 GiB, sent until the proxy stops reading; its answer."""
    chunk = f"{_CHUNK:x}\r\n".encode() + b"x" * _CHUNK + b"\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /v1/messages HTTP/1.1\r\nHost: check\r\ncontent-type: application/json\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        sent = 0
        try:
            while sent < _GIB:
                sock.sendall(chunk)
                sent += _CHUNK
        except OSError:
            pass  # the proxy answered and closed: the rest is refused
        sock.settimeout(30)
        answer = b""
        try:
            while part := sock.recv(4096):
                answer += part
        except OSError:
            pass
        answers.append(answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=("tansu", "kafka"), default="tansu")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-rss-growth-mib", type=float, default=64.0)
    args = parser.parse_args()
    port = free_port()
    with BenchStack(bootstrap=None, broker=args.broker) as stack:
        proxy = stack.start_proxy(port)
        try:
            wait_http(port)
            body = {"topic": stack.target, "value": "x", "delay_ms": 3_600_000}
            warm = httpx.post(f"http://127.0.0.1:{port}/v1/messages", json=body, timeout=30)
            assert warm.status_code == 201, warm.text
            before = _rss_mib(proxy.pid)
            after_rounds: list[float] = []
            statuses: list[str] = []
            for _ in range(args.rounds):
                answers: list[bytes] = []
                clients = [
                    threading.Thread(target=_upload, args=(port, answers))
                    for _ in range(args.clients)
                ]
                for client in clients:
                    client.start()
                for client in clients:
                    client.join(300)
                statuses += [a.split(b"\r\n", 1)[0].decode(errors="replace") for a in answers]
                time.sleep(_SETTLE_S)  # the proxy's trim runs 0.5 s after a burst
                after_rounds.append(_rss_mib(proxy.pid))
            again = httpx.post(f"http://127.0.0.1:{port}/v1/messages", json=body, timeout=30)
        finally:
            proxy.terminate()
            proxy.wait(30)
    growth = after_rounds[-1] - before
    summary = {
        "clients_per_round": args.clients,
        "rounds": args.rounds,
        "answers": sorted(set(statuses)),
        "rss_before_mib": round(before, 1),
        "rss_after_rounds_mib": [round(r, 1) for r in after_rounds],
        "rss_growth_mib": round(growth, 1),
        "served_after": again.status_code,
        "ok": growth <= args.max_rss_growth_mib and again.status_code == 201,
    }
    print(json.dumps(summary, indent=1))
    sys.exit(0 if summary["ok"] else 1)


if __name__ == "__main__":
    main()
