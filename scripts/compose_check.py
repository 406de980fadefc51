#!/usr/bin/env python3
"""The compose commands of docs/containers.md, checked: a replica group in containers delivers
what the proxy container accepted, and killing the master container moves delivery to the backup.

    python scripts/compose_check.py [--build] [--messages 50] [--keep] [--compose v1|v2]

Runs ``docker-compose`` (Debian's 1.29, ``v1``) or ``docker compose`` (``v2``), the first that
exists unless ``--compose`` names one, on
``docker/compose.yaml`` under its own project name, so it never touches a deployment of yours.
Steps: tokens (``docker/compose-token.sh``), ``up -d``, wait for every service healthy, create
the topic, send N messages through the proxy, find the master (``chronos group --json``),
``kill`` it, send N more, start it again and wait for it to rejoin as backup; with
``--zombie``, ``pause`` the master past the failure detector's patience until the other takes
over, ``unpause`` it and wait for it to say it was fenced (``became_backup``); with
``--rolling``, the rolling restart. From the kill on, messages keep coming through the proxy
(20/s). Then read the topic back inside the master's container and require every message
exactly once. Prints a JSON summary (the takeover time: kill until the backup's first commit
is seen). The suite's container test runs it on one stack (issue 60: the compose checks and
the container failover test shared none).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker" / "compose.yaml"
PROJECT = "chronoscheck"
TOPIC = "compose.check"


#: The compose command (``--compose``): Debian's docker-compose 1.29 or the v2 plugin.
COMMANDS = {"v1": ["docker-compose"], "v2": ["docker", "compose"]}
_command: list[str] = []


def _compose() -> list[str]:
    if not _command:
        _command.extend(COMMANDS["v1" if shutil.which("docker-compose") else "v2"])
    return [*_command, "-p", PROJECT, "-f", str(COMPOSE_FILE)]


def run(*args: str, check: bool = True, timeout: float = 300) -> str:
    done = subprocess.run(
        [*_compose(), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _healthy(services: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ids = run("ps", "-q", *services).split()
        states = [
            subprocess.run(
                ["docker", "inspect", "-f", "{{.State.Health.Status}}", i],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            for i in ids
        ]
        if len(states) == len(services) and all(s == "healthy" for s in states):
            return
        time.sleep(1)
    raise RuntimeError(f"not healthy within {timeout_s} s: {services}")


def _group(node: str) -> dict[str, Any]:
    out = run("exec", "-T", node, "chronos", "group", "--json", check=False)
    return dict(json.loads(out)) if out.strip().startswith("{") else {}


def _send(token: str, ids: list[str]) -> None:
    for message_id in ids:
        body = json.dumps({"topic": TOPIC, "value": message_id, "delay_ms": 1000, "id": message_id})
        request = urllib.request.Request(
            "http://127.0.0.1:8080/v1/messages",
            data=body.encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 201


class _Feed:
    """Messages through the proxy, 20 a second, while the faults happen (``with``)."""

    def __init__(self, token: str) -> None:
        self._token = token
        self.sent: list[str] = []
        self.errors: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            message_id = f"during-{len(self.sent)}"
            try:
                _send(self._token, [message_id])
            except Exception as exc:  # the proxy stays up: a failed send fails the check
                self.errors.append(f"{message_id}: {exc}")
            else:
                self.sent.append(message_id)
            self._done.wait(0.05)

    def __enter__(self) -> _Feed:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(30)


def _wait_master(node: str, expected: str, timeout_s: float = 60) -> None:
    """Until ``node``'s view names ``expected`` as the master (RuntimeError after
    ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while _group(node).get("master") != expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{expected} did not become master within {timeout_s} s")
        time.sleep(0.2)


def _logged(service: str, event: str, more_than: int) -> int:
    """How often ``service``'s log has said ``event``; waits (60 s) until more than
    ``more_than``."""
    deadline = time.monotonic() + 60
    while True:
        count = run("logs", "--no-color", service, check=False).count(f'"{event}"')
        if count > more_than or time.monotonic() > deadline:
            return count
        time.sleep(0.5)


def _zombie(master: str, other: str, summary: dict[str, Any]) -> None:
    """Freeze the master (``pause``) until the other takes over, thaw it: it wakes up believing
    it delivers, and the fencing must turn it into a backup (``became_backup``), with nothing
    delivered twice."""
    demoted = run("logs", "--no-color", master, check=False).count('"became_backup"')
    paused_at = time.monotonic()
    run("pause", master)
    try:
        _wait_master(other, other)
        summary["zombie_takeover_s"] = round(time.monotonic() - paused_at, 2)
    finally:
        run("unpause", master)
    summary["zombie_fenced"] = _logged(master, "became_backup", demoted) > demoted


def _rolling_restart(order: list[str], summary: dict[str, Any]) -> None:
    """The rolling restart of docs/containers.md (messages keep coming through the proxy):
    each node recreated (``up -d --no-deps --force-recreate``: a new image is picked up the same
    way) and healthy (``/readyz``) before the next."""
    for service in order:
        started = time.monotonic()
        run("up", "-d", "--no-deps", "--force-recreate", service)
        _healthy([service], 180)
        summary[f"recreated_{service}_s"] = round(time.monotonic() - started, 1)
    # Each node's own view of who commits: both must name the same one.
    summary["masters_after_rolling"] = sorted({str(_group(node).get("master")) for node in order})


def _smoke(sent: list[str], summary: dict[str, Any]) -> None:
    """The stack came up and delivers what the proxy accepted: the check's part that depends on
    the compose command (the kill and restart steps are the same commands either way)."""
    master = _group("node-a").get("master") or "node-a"
    out = run(
        "exec", "-T", master, "chronos", "tail",
        "--topic", TOPIC, "--count", str(len(sent)), "--timeout", "60",
    )  # fmt: skip
    seen = [part.split("=", 1)[1] for part in out.split() if part.startswith("id=")]
    summary.update(
        master=master,
        sent=len(sent),
        delivered=len(set(seen) & set(sent)),
        duplicates=len(seen) - len(set(seen)),
    )


def _fail_over(
    args: argparse.Namespace, token: str, first: list[str], summary: dict[str, Any]
) -> None:
    """Kill the master container, send more, start it again (with ``--zombie`` freeze the new
    master until the other takes over, with ``--rolling`` the rolling restart), messages coming
    through the proxy all along; then count what arrived."""
    master = _group("node-a").get("master")
    assert master in ("node-a", "node-b"), f"no master: {_group('node-a')}"
    backup = "node-b" if master == "node-a" else "node-a"
    with _Feed(token) as feed:
        killed_at = time.monotonic()
        run("kill", master)
        _wait_master(backup, backup)
        summary["takeover_s"] = round(time.monotonic() - killed_at, 2)
        second = [f"after-{n}" for n in range(args.messages)]
        _send(token, second)
        run("start", master)
        _healthy([master], 120)
        rejoined = [m for m in _group(backup).get("members", []) if m["node"] == master]
        summary["rejoined_as"] = "master" if rejoined and rejoined[0]["master"] else "backup"
        if args.zombie:  # the new master frozen, the killed node (back) takes over again
            _zombie(backup, master, summary)
        if args.rolling:  # the backup first, then the master
            now = _group("node-a").get("master") or backup
            other = "node-b" if now == "node-a" else "node-a"
            _rolling_restart([other, now], summary)
    if feed.errors:
        raise RuntimeError(f"{len(feed.errors)} sends failed meanwhile: {feed.errors[0]}")
    expected = set(first) | set(second) | set(feed.sent)
    summary["sent_during_faults"] = len(feed.sent)
    reader = _group("node-a").get("master") or backup
    out = run(
        "exec", "-T", reader, "chronos", "tail",
        "--topic", TOPIC, "--count", str(len(expected)), "--timeout", "60",
    )  # fmt: skip
    seen = [part.split("=", 1)[1] for part in out.split() if part.startswith("id=")]
    summary.update(
        master=master,
        backup=backup,
        sent=len(expected),
        delivered=len(set(seen) & expected),
        duplicates=len(seen) - len(set(seen)),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help="bash docker/build.sh first")
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="leave the containers running")
    parser.add_argument(
        "--compose", choices=sorted(COMMANDS), default=None, help="which compose command"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="only up, the messages through the proxy, and down (no kill, no restart)",
    )
    parser.add_argument(
        "--zombie",
        action="store_true",
        help="then freeze the master until the other takes over, and thaw it: it must be fenced",
    )
    parser.add_argument(
        "--rolling",
        action="store_true",
        help="then the rolling restart (docs/containers.md: backup, master) under load",
    )
    args = parser.parse_args()
    if args.compose:
        _command.extend(COMMANDS[args.compose])
    if args.build:
        subprocess.run(["bash", str(REPO / "docker" / "build.sh")], check=True)
    subprocess.run(["bash", str(REPO / "docker" / "compose-token.sh")], check=True)
    token = (REPO / "docker" / "token.txt").read_text().strip()
    summary: dict[str, Any] = {}
    try:
        started = time.monotonic()
        run("up", "-d")
        _healthy(["kafka", "node-a", "node-b", "proxy"], 180)
        summary["up_s"] = round(time.monotonic() - started, 1)
        run("exec", "-T", "node-a", "chronos", "topics", "create", TOPIC)
        first = [f"before-{n}" for n in range(args.messages)]
        _send(token, first)
        if args.smoke:
            _smoke(first, summary)
        else:
            _fail_over(args, token, first, summary)
    finally:
        if not args.keep:
            run("down", "-v", check=False)
    summary["compose"] = " ".join(_compose()[: len(_command)])
    ok = summary.get("delivered") == summary.get("sent") and summary.get("duplicates") == 0
    ok = ok and summary.get("zombie_fenced", True) is True
    ok = ok and summary.get("masters_after_rolling", ["node-a"])[0] in ("node-a", "node-b")
    ok = ok and len(summary.get("masters_after_rolling", [""])) == 1
    summary["ok"] = ok
    print(json.dumps(summary))  # no chronos import: this check needs only Docker
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
