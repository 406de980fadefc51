"""``KafkaClients.admin`` hands out a client a broker answered: librdkafka's first ListOffsets
on a client asked before its connection was up waited 1-3 s (``scripts/cold_admin_check.py``
measures it on a real broker). These check the wiring: the question is asked, and a broker
away costs its wait, not an error."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import chronos.kafka.clients as clients_module
from chronos.kafka.clients import ADMIN_METADATA_WAIT_S, KafkaClients
from chronos.settings import KafkaSettings


class _FakeAdmin:
    """Records what it is asked; answers DescribeCluster as told."""

    made: list[_FakeAdmin] = []
    answer: BaseException | None = None

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.asked: list[tuple[str, float]] = []
        _FakeAdmin.made.append(self)

    def describe_cluster(self, request_timeout: float) -> Future[object]:
        self.asked.append(("describe_cluster", request_timeout))
        future: Future[object] = Future()
        if _FakeAdmin.answer is None:
            future.set_result(object())
        else:
            future.set_exception(_FakeAdmin.answer)
        return future


@pytest.fixture
def fake_admin(monkeypatch: pytest.MonkeyPatch) -> type[_FakeAdmin]:
    _FakeAdmin.made, _FakeAdmin.answer = [], None
    monkeypatch.setattr(clients_module, "AdminClient", _FakeAdmin)
    return _FakeAdmin


def _clients() -> KafkaClients:
    return KafkaClients(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "test")


def test_a_new_admin_client_is_handed_out_after_a_broker_answered(
    fake_admin: type[_FakeAdmin],
) -> None:
    client: Any = _clients().admin()
    assert fake_admin.made == [client]
    assert client.asked == [("describe_cluster", ADMIN_METADATA_WAIT_S)]


@pytest.mark.parametrize(
    "failure", [KafkaException(KafkaError(KafkaError._TRANSPORT)), TimeoutError()]
)
def test_a_broker_away_still_gives_a_client(
    fake_admin: type[_FakeAdmin], failure: BaseException
) -> None:
    fake_admin.answer = failure
    client: Any = _clients().admin()
    assert fake_admin.made == [client]
    assert len(client.asked) == 1
