"""Fixtures for integration tests: one broker per session, fresh names per test.

One broker per session because starting one costs ~0.1-1 s (more with Docker); fresh topic and
group names per test give isolation without restarting it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.broker import is_tansu, kafka_broker
from tests.integration.harness import Group

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under this directory ``integration`` so ``-m "not integration"`` works;
    when the session's broker is Tansu, keep only the ``embedded`` ones (what ``chronos dev``'s
    broker must prove) and skip any of them marked ``kafka_only``, with its reason.

    Why a subset on Tansu: the whole suite runs on Apache Kafka, the broker users run; Tansu is
    the embedded default of ``chronos dev``, so its pass proves what that default promises (the
    wire format, a node alone's delivery, restart and cancel), not transactions, sizes,
    compaction, groups or clusters, which are Apache Kafka's (issue 60: both passes in 30
    minutes).

    This hook sees the whole session's items, hence the path check.
    """
    tansu = is_tansu()
    left_out: list[pytest.Item] = []
    kept: list[pytest.Item] = []
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)
            if tansu and item.get_closest_marker("embedded") is None:
                left_out.append(item)
                continue
        marker = item.get_closest_marker("kafka_only")
        if marker is not None and tansu:
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            item.add_marker(pytest.mark.skip(reason=f"Tansu cannot pass this: {reason}"))
        kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """Bootstrap servers of the session's broker.

    Output capture is suspended while it starts so the chosen path (docker, subprocess, existing
    cluster) is visible in the test output, not only on failure.
    """
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with contextlib.ExitStack() as stack:
        uncaptured = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
        with uncaptured:
            bootstrap = stack.enter_context(kafka_broker())
        yield bootstrap


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    """An AdminClient on the session broker (stateless, so one is shared)."""
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


@pytest.fixture
def namespace() -> str:
    """A unique prefix for this test's topics and consumer groups, e.g. ``t1a2b3c4d5e``.

    Starts with a letter and uses only [a-z0-9] so it is valid in topic and group names.
    """
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for every pipeline test (starting one takes ~5-10 s)."""
    from chronos.pipeline.session import spark_session

    session = spark_session("local[2]", app_name="chronos-tests")
    session.conf.set("spark.sql.shuffle.partitions", "4")
    yield session
    session.stop()


@pytest.fixture
def group(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> Iterator[Group]:
    """A replica group of this test's namespace (nodes started by the test), every node
    stopped at the end. A module that needs other settings defines its own ``group``."""
    g = Group(kafka_bootstrap, namespace, tmp_path)
    try:
        yield g
    finally:
        g.stop_all()
