"""The README's first command (its Set up): `chronos dev` brings up the stack and delivers
`chronos send`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from datetime import time as dtime
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from chronos.cli.main import main as chronos_main
from chronos.devstack.tansu import free_port


def chronos(*args: str) -> list[str]:
    return [sys.executable, "-m", "chronos.cli.main", *args]


def test_dev_stack_delivers_a_message_sent_from_the_shell(tmp_path: Path) -> None:
    kafka_port, http_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
    env["CHRONOS_PROXY__PORT"] = str(http_port)
    log = tmp_path / "dev.log"
    with open(log, "wb") as out:
        dev = subprocess.Popen(
            chronos("dev", "--kafka-port", str(kafka_port)),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while "chronos dev stack is up" not in log.read_text(errors="replace"):
            assert dev.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        banner = log.read_text(errors="replace")
        # The printed commands reach the broker on its non-default port as they stand.
        hint = f"CHRONOS_KAFKA__BOOTSTRAP_SERVERS=127.0.0.1:{kafka_port} chronos send"
        assert hint in banner, banner
        store = Path(re.search(r"node store\s+(\S+) \(removed at exit\)", banner)[1])  # type: ignore[index]
        assert store.is_dir()
        # The printed admin address answers.
        admin = re.search(r"node admin API\s+(http://\S+)/metrics", banner)
        assert admin is not None, banner
        assert httpx.get(f"{admin[1]}/healthz", timeout=5).status_code == 200
        client_env = {**env, "CHRONOS_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{kafka_port}"}
        sent = subprocess.run(
            chronos(
                "send",
                "--topic",
                "hello",
                "--value",
                "hi there",
                "--delay",
                "1s",
                "--header",
                "who=cli",
            ),
            capture_output=True,
            text=True,
            env=client_env,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
        assert '"deliver_at_ms"' in sent.stdout
        tail = subprocess.run(
            chronos("tail", "--topic", "hello", "--count", "1", "--timeout", "20"),
            capture_output=True,
            text=True,
            env=client_env,
            timeout=60,
        )
        assert tail.returncode == 0, tail.stderr
        assert "value='hi there'" in tail.stdout
        bad = subprocess.run(
            chronos("send", "--topic", "bad topic", "--value", "x", "--delay", "1s"),
            capture_output=True,
            text=True,
            env=client_env,
            timeout=60,
        )
        assert bad.returncode == 2 and "topic" in bad.stderr
        cron = ("send", "--topic", "daily", "--value", "x", "--delay", "0", "--cron", "0 9 * * *")
        daily = subprocess.run(
            chronos(*cron, "--zone", "Asia/Kolkata", "--times", "3"),
            capture_output=True,
            text=True,
            env=client_env,
            timeout=60,
        )
        assert daily.returncode == 0, daily.stderr
        first = datetime.fromisoformat(json.loads(daily.stdout)["deliver_at"])
        assert first.astimezone(ZoneInfo("Asia/Kolkata")).time() == dtime(9, 0)
        untimed = subprocess.run(
            chronos(*cron), capture_output=True, text=True, env=client_env, timeout=60
        )
        assert untimed.returncode == 2 and "--times" in untimed.stderr
    finally:
        dev.send_signal(signal.SIGTERM)
        dev.wait(30)
    assert dev.returncode == 0, log.read_text()[-2000:]
    assert not store.exists(), "chronos dev left its temporary store behind"


def test_an_unreachable_kafka_gives_one_clear_error_and_nothing_on_stdout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
    env["CHRONOS_KAFKA__BOOTSTRAP_SERVERS"] = f"127.0.0.1:{free_port()}"  # nobody listens
    env["CHRONOS_PROXY__ACK_TIMEOUT_S"] = "5"
    sent = subprocess.run(
        chronos("send", "--topic", "t", "--value", "v", "--delay", "1s"),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert sent.returncode == 1, sent.stderr
    assert sent.stdout == "", "stdout is for results only"
    lines = sent.stderr.strip().splitlines()
    assert len(lines) == 2, lines  # a hint while waiting, then the error: not a log flood
    assert lines[0].startswith("chronos: waiting for Kafka at 127.0.0.1:"), lines
    assert lines[1].startswith("chronos: Kafka did not acknowledge within 5.0 s"), lines


def test_topics_create_makes_target_topics_and_refuses_internal_ones(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "chronos.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\n[topics]\nnamespace = "{namespace}"\n'
    )
    orders = f"{namespace}-orders"
    argv = ["topics", "create", orders, "--partitions", "3", "--config", str(config)]
    assert chronos_main(argv) == 0
    assert chronos_main(argv) == 0  # exists already: fine
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert len(admin.list_topics(orders, timeout=10).topics[orders].partitions) == 3
    internal = ["topics", "create", f"{namespace}.inner", "--config", str(config)]
    assert chronos_main(internal) == 2
    assert "internal topic" in capsys.readouterr().err


def test_dev_demo_delivers_every_message_on_time_and_exits(tmp_path: Path) -> None:
    """``chronos dev --demo`` (the README's first look): its own embedded broker, 300 messages
    over 0-5 s, every one delivered and none early, then a clean exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
    env["CHRONOS_PROXY__PORT"] = str(free_port())
    demo = subprocess.run(
        chronos("dev", "--demo", "--kafka-port", str(free_port())),
        capture_output=True,
        text=True,
        env=env,
        timeout=150,
    )
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert re.search(r"delivered 301/301, early 0", demo.stdout), demo.stdout
