"""Ingest recovers without loss: a failed batch is re-read, a new store re-reads the topic."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from chronos.bench.sampler import process_tree
from chronos.bench.stack import BenchStack, TopicLayout
from chronos.node.watermark import IngestWatermark
from chronos.schedule.ledger import ApplyOutcome, Ledger
from proxy.client import DelayClient, DelayRequest
from tests.integration.harness import Inbox, make_settings, running_node, wait_until


@pytest.mark.parametrize("decoder", ["process", "thread"])
def test_a_batch_that_fails_to_store_is_read_again(
    kafka_bootstrap: str,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    decoder: str,
) -> None:
    settings = make_settings(
        kafka_bootstrap, namespace, tmp_path / "store", node={"ingest_decoder": decoder}
    )
    topic = f"{namespace}-retry"
    failures = {"left": 3}
    real_apply = Ledger.apply_decoded

    def flaky_apply(self: Ledger, items: Sequence[object], *args: object) -> ApplyOutcome:
        if items and failures["left"] > 0:
            failures["left"] -= 1
            raise OSError("injected store failure")
        return real_apply(self, items, *args)  # type: ignore[arg-type]

    with running_node(settings), Inbox(settings, [topic]) as inbox:
        monkeypatch.setattr(Ledger, "apply_decoded", flaky_apply)
        with DelayClient(settings) as client:
            ids = {
                r.id
                for r in client.send_batch(
                    [DelayRequest(topic, f"m{i}", delay=0.3) for i in range(50)]
                )
            }
        assert inbox.wait_for(ids, timeout_s=60), "records of a failed batch were skipped"
    assert failures["left"] == 0


def _decoders(parent: int) -> list[int]:
    """Pids of the decoder processes of the node running in ``parent``."""
    return [pid for pid in process_tree(parent)[1:] if _DECODER in _cmdline(pid)]


_DECODER = "chronos.node.decoder_process"


def test_a_killed_decoder_process_is_replaced_and_nothing_is_lost(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-decoder"
    writing, release, read_on = threading.Event(), threading.Event(), threading.Event()
    real_apply, real_read = Ledger.apply_decoded, IngestWatermark.read

    def held_apply(self: Ledger, items: Sequence[object], *args: object) -> ApplyOutcome:
        if items and not release.is_set():
            writing.set()
            release.wait(120)  # meanwhile the children read on, past what is being written
        return real_apply(self, items, *args)  # type: ignore[arg-type]

    def noted_read(self: IngestWatermark, *args: Any) -> None:
        """The receiver took a batch off a child's pipe: once a write is held, one read but
        not applied."""
        if writing.is_set():
            read_on.set()
        real_read(self, *args)

    def send(prefix: str) -> set[str]:
        requests = [DelayRequest(topic, f"{prefix}{i}", delay=1) for i in range(300)]
        return {r.id for r in client.send_batch(requests)}

    with running_node(settings), Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        killed = _decoders(os.getpid())
        assert len(killed) == settings.node.ingest_threads
        monkeypatch.setattr(Ledger, "apply_decoded", held_apply)
        monkeypatch.setattr(IngestWatermark, "read", noted_read)
        ids = send("m")
        assert writing.wait(60), "no batch reached the store"
        ids |= send("n")  # read by the children while the store write is held
        assert read_on.wait(60), "the children read nothing past the held write"
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        release.set()
        assert inbox.wait_for(ids, timeout_s=60), "records were lost with the decoder process"
        # The node may apply what the killed children had already written to their pipes,
        # and so deliver everything, before it reads their end: replacements come then.
        wait_until(
            lambda: len(_decoders(os.getpid())) == len(killed), 60, "replacement decoders run"
        )
        replacements = _decoders(os.getpid())
        assert not set(replacements) & set(killed)


def test_a_new_store_reads_the_inner_topic_from_the_beginning(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    first = make_settings(kafka_bootstrap, namespace, tmp_path / "store-1")
    topic = f"{namespace}-wiped"
    with running_node(first) as node, DelayClient(first) as client:
        assert node.context is not None
        ids = {
            r.id
            for r in client.send_batch([DelayRequest(topic, f"m{i}", delay=3) for i in range(20)])
        }
        # Ingested (the store's offsets pass every record), nothing due yet.
        ledger = node.context.ledger
        wait_until(lambda: sum(ledger.inner_offsets([0, 1, 2, 3]).values()) >= 20, 60, "ingested")
    # The store is lost; the node id (and so its consumer group) stays the same.
    second = make_settings(kafka_bootstrap, namespace, tmp_path / "store-2")
    with Inbox(second, [topic]) as inbox, running_node(second):
        assert inbox.wait_for(ids, timeout_s=60), "pending messages were lost with the store"


def test_decoder_processes_exit_with_a_killed_node(kafka_bootstrap: str) -> None:
    with BenchStack(
        bootstrap=kafka_bootstrap, node_settings="ingest_threads = 2", layout=TopicLayout(2)
    ) as stack:
        stack.start_node()
        children = process_tree(stack.node.pid)[1:]
        assert len(_decoders(stack.node.pid)) == len(children) == 2  # one per ingest thread
        stack.node.kill()
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in children if _alive(pid)], "orphaned child processes"


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return cmdline.read().replace(b"\0", b" ").decode(errors="replace")


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
