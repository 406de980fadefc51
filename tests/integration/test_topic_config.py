"""The inner topic's deletion settings on a real broker: what ensure_topics creates passes,
a short retention or compaction is refused with the setting named, and `chronos topics fix`
repairs both.

Apache Kafka answers DescribeConfigs with every topic config, defaults included. Tansu 0.6
answers with only the configs set explicitly on the topic, so chronos cannot check its topics
(read_topic_config returns None, check_inner_topic warns and passes): the refusals are
Kafka-only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.errors import ConfigError
from chronos.kafka.admin import ensure_topics
from chronos.kafka.clients import KafkaClients
from chronos.kafka.topic_config import check_inner_topic, fix_inner_topic, read_topic_config
from chronos.settings import ChronosSettings, TopicPolicy
from proxy.client import DelayClient
from tests.broker import is_tansu
from tests.integration.harness import make_settings

KAFKA_ONLY = pytest.mark.kafka_only(
    reason="Tansu 0.6 reports only the configs set explicitly on a topic: none can be checked"
)

#: rebuild.refresh_interval_s's default (one day), twice in ms.
TWO_DAYS_MS = "172800000"


def _settings(bootstrap: str, namespace: str, tmp_path: Path) -> ChronosSettings:
    return make_settings(bootstrap, namespace, tmp_path / "store")


def _create_inner(admin: AdminClient, settings: ChronosSettings, **config: str) -> None:
    """The inner topic as an operator (or an older chronos) may have created it."""
    topic = NewTopic(settings.topics.names.inner, 2, 1, config=config)
    for future in admin.create_topics([topic], request_timeout=30).values():
        future.result(30)


def _read(settings: ChronosSettings) -> dict[str, str] | None:
    admin = KafkaClients(settings.kafka, "test").admin()
    return read_topic_config(admin, settings.topics.names.inner, 30)


def test_the_inner_topic_ensure_topics_creates_passes(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = _settings(kafka_bootstrap, namespace, tmp_path)
    ensure_topics(settings)
    check_inner_topic(settings)  # on Tansu too: it cannot tell, so it warns and passes
    config = _read(settings)
    if is_tansu():
        # What Tansu 0.6 answered: only the configs ensure_topics set, no retention.ms.
        assert config is None
    else:
        assert config is not None
        assert config["cleanup.policy"] == "delete"
        assert config["retention.bytes"] == "-1"
        assert config["retention.ms"] == "604800000"  # Kafka's default, 7 days
        assert config["message.timestamp.type"] == "LogAppendTime"  # the cancel gate's proof


@KAFKA_ONLY
def test_nothing_to_fix_on_the_topic_ensure_topics_creates(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = _settings(kafka_bootstrap, namespace, tmp_path)
    ensure_topics(settings)
    assert fix_inner_topic(settings) == {}


@KAFKA_ONLY
def test_a_short_retention_is_refused_then_fixed(
    admin: AdminClient, kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = _settings(kafka_bootstrap, namespace, tmp_path)
    _create_inner(admin, settings, **{"retention.ms": "20000"})
    ensure_topics(settings)  # an existing topic is left as it is
    with pytest.raises(ConfigError) as refused:
        check_inner_topic(settings)
    message = str(refused.value)
    assert "retention.ms=20000 on the inner topic is shorter than" in message
    assert "cleanup.policy" not in message and "retention.bytes" not in message
    assert "chronos topics fix" in message and "rebuild.check_inner_topic = false" in message

    # An operator's topic keeps producers' times (Kafka's default): fixed too, as advice.
    assert fix_inner_topic(settings) == {
        "retention.ms": TWO_DAYS_MS,
        "message.timestamp.type": "LogAppendTime",
    }
    check_inner_topic(settings)
    assert fix_inner_topic(settings) == {}


@KAFKA_ONLY
def test_compaction_and_a_size_limit_are_refused_then_fixed(
    admin: AdminClient, kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = _settings(kafka_bootstrap, namespace, tmp_path)
    _create_inner(admin, settings, **{"cleanup.policy": "compact", "retention.bytes": "1000000"})
    with pytest.raises(ConfigError) as refused:
        check_inner_topic(settings)
    message = str(refused.value)
    assert "cleanup.policy=compact on the inner topic is not exactly delete" in message
    assert "retention.bytes=1000000 on the inner topic is not -1" in message
    assert "retention.ms" not in message  # Kafka's default 7 days is more than 2 days

    assert fix_inner_topic(settings) == {
        "cleanup.policy": "delete",
        "retention.bytes": "-1",
        "message.timestamp.type": "LogAppendTime",
    }
    check_inner_topic(settings)
    config = _read(settings)
    assert config is not None and config["retention.ms"] == "604800000"  # longer: kept


@KAFKA_ONLY
def test_compact_and_delete_is_refused_and_infinite_retention_kept(
    admin: AdminClient, kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = _settings(kafka_bootstrap, namespace, tmp_path)
    _create_inner(admin, settings, **{"cleanup.policy": "compact,delete", "retention.ms": "-1"})
    with pytest.raises(ConfigError, match=r"cleanup\.policy=compact,delete"):
        check_inner_topic(settings)
    assert fix_inner_topic(settings) == {
        "cleanup.policy": "delete",
        "message.timestamp.type": "LogAppendTime",
    }
    check_inner_topic(settings)
    config = _read(settings)
    assert config is not None and config["retention.ms"] == "-1"


@KAFKA_ONLY
def test_a_missing_inner_topic_is_named(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = _settings(kafka_bootstrap, namespace, tmp_path)
    with pytest.raises(ConfigError, match=rf"topic {namespace}\.inner does not exist"):
        check_inner_topic(settings)


def _chronos(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
    return subprocess.run(
        [sys.executable, "-m", "chronos.cli.main", "topics", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@KAFKA_ONLY
def test_chronos_topics_check_and_fix(
    admin: AdminClient, kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    config = tmp_path / "chronos.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\n'
        f'[topics]\nnamespace = "{namespace}"\n'
        "[rebuild]\nrefresh_interval_s = 3600\n"
    )
    inner = f"{namespace}.inner"
    settings = _settings(kafka_bootstrap, namespace, tmp_path)
    _create_inner(admin, settings, **{"retention.ms": "20000", "cleanup.policy": "compact"})

    refused = _chronos(config, "check")
    assert refused.returncode == 1, refused.stderr
    assert "retention.ms=20000" in refused.stdout and "cleanup.policy=compact" in refused.stdout
    assert "chronos topics fix" in refused.stdout
    assert "advice (chronos topics fix): message.timestamp.type=CreateTime" in refused.stdout

    fixed = _chronos(config, "fix")
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.stdout.splitlines() == [
        f"inner topic {inner}: set cleanup.policy=delete",
        f"inner topic {inner}: set retention.ms=7200000",
        f"inner topic {inner}: set message.timestamp.type=LogAppendTime",
    ]

    ok = _chronos(config, "check")
    assert (ok.returncode, ok.stdout) == (0, f"inner topic {inner}: ok\n"), ok.stderr
    again = _chronos(config, "fix")
    assert (again.returncode, again.stdout) == (0, f"inner topic {inner}: nothing to change\n")


@pytest.mark.embedded
@pytest.mark.skipif(not is_tansu(), reason="what Tansu answers: runs in the Tansu pass")
def test_chronos_topics_check_on_tansu_says_it_cannot_tell(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = _settings(kafka_bootstrap, namespace, tmp_path)
    ensure_topics(settings)
    config = tmp_path / "chronos.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\n[topics]\nnamespace = "{namespace}"\n'
    )
    checked = _chronos(config, "check")
    assert checked.returncode == 0, checked.stderr
    assert "not checked" in checked.stdout
    fixed = _chronos(config, "fix")
    assert fixed.returncode == 2
    assert "does not report the configuration" in fixed.stderr


@KAFKA_ONLY
def test_a_client_setting_a_policy_creates_the_compacted_policy_topic_and_nothing_else(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """``DelayClient.set_policy`` before any node ran: the policy topic is made compacted (a
    broker creating it on demand would not), and the node's own topics are left to the node."""
    settings = _settings(kafka_bootstrap, namespace, tmp_path)
    with DelayClient(settings) as client:
        client.set_policy("orders", TopicPolicy(max_attempts=3))
    admin = KafkaClients(settings.kafka, "test").admin()
    names = settings.topics.names
    made = set(admin.list_topics(timeout=30).topics)
    assert names.policy in made
    assert names.inner not in made and names.dead_letter not in made
    config = read_topic_config(admin, names.policy, 30)
    assert config is not None and config["cleanup.policy"] == "compact"
