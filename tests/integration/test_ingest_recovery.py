"""Ingest recovers without loss: a failed batch is re-read, a new store re-reads the topic."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from chronos.node.ledger import ApplyOutcome, Ledger
from proxy.client import DelayClient, DelayRequest
from tests.integration.harness import Inbox, make_settings, running_node


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
        assert inbox.wait_for(ids, timeout_s=20), "records of a failed batch were skipped"
    assert failures["left"] == 0


def _decoders() -> list[multiprocessing.process.BaseProcess]:
    return [p for p in multiprocessing.active_children() if p.name.startswith("chronos-decoder")]


def test_a_killed_decoder_process_is_replaced_and_nothing_is_lost(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-decoder"
    with running_node(settings), Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        killed = _decoders()
        assert len(killed) == settings.node.ingest_threads
        ids = {
            r.id
            for r in client.send_batch([DelayRequest(topic, f"a{i}", delay=1) for i in range(100)])
        }
        for process in killed:
            os.kill(process.pid or 0, signal.SIGKILL)
        ids |= {
            r.id
            for r in client.send_batch([DelayRequest(topic, f"b{i}", delay=1) for i in range(100)])
        }
        assert inbox.wait_for(ids, timeout_s=30), "records were lost with the decoder process"
        replacements = _decoders()
        assert len(replacements) == len(killed)
        assert not {p.pid for p in replacements} & {p.pid for p in killed}


def test_a_new_store_reads_the_inner_topic_from_the_beginning(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    first = make_settings(kafka_bootstrap, namespace, tmp_path / "store-1")
    topic = f"{namespace}-wiped"
    with running_node(first), DelayClient(first) as client:
        ids = {
            r.id
            for r in client.send_batch([DelayRequest(topic, f"m{i}", delay=3) for i in range(20)])
        }
        time.sleep(1.0)  # ingested, offsets committed, nothing due yet
    # The store is lost; the node id (and so its consumer group) stays the same.
    second = make_settings(kafka_bootstrap, namespace, tmp_path / "store-2")
    with Inbox(second, [topic]) as inbox, running_node(second):
        assert inbox.wait_for(ids, timeout_s=15), "pending messages were lost with the store"
