"""Settings: TOML file, CHRONOS_* environment overrides, strict keys, Kafka configs."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TypedDict

import pytest
from pydantic import ValidationError as PydanticValidationError

from chronos.delivery.policies import Policies
from chronos.errors import ConfigError
from chronos.settings import (
    COMPACT_DELETE_DEFAULTS,
    PROTECTED_KAFKA_KEYS,
    ChronosSettings,
    DeleteSettings,
    KafkaSettings,
    RebuildSettings,
    load_settings,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("CHRONOS_"):
            monkeypatch.delenv(name)


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "chronos.toml"
    path.write_text(text)
    return path


def test_defaults_without_file() -> None:
    loaded = load_settings()
    assert isinstance(loaded, ChronosSettings)
    assert loaded.node.ingest_threads == 1
    assert loaded.topics.names.inner == "chronos.inner"


def test_load_from_toml(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        """
[kafka]
bootstrap_servers = "broker:9093"
[kafka.producer_config]
"linger.ms" = 50
[topics]
namespace = "prod"
[node]
node_id = "n7"
ingest_threads = 4
data_dir = "/var/lib/chronos"
[limits]
max_delay_s = 60
""",
    )
    loaded = load_settings(path)
    assert loaded.kafka.bootstrap_servers == "broker:9093"
    assert loaded.kafka.producer_config == {"linger.ms": 50}
    assert loaded.topics.names.inner == "prod.inner"
    assert loaded.node.node_id == "n7"
    assert loaded.node.ingest_threads == 4
    assert loaded.node.data_dir == Path("/var/lib/chronos")
    assert loaded.limits.max_delay_s == 60
    assert loaded.node.sender_threads == 1  # untouched default


def test_env_overrides_file_and_keeps_other_file_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _toml(tmp_path, '[node]\nnode_id = "n7"\ningest_threads = 4\n')
    monkeypatch.setenv("CHRONOS_NODE__INGEST_THREADS", "9")
    loaded = load_settings(path)
    assert loaded.node.ingest_threads == 9
    assert loaded.node.node_id == "n7"


def test_env_without_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOS_NODE__INGEST_THREADS", "5")
    monkeypatch.setenv("CHRONOS_KAFKA__BOOTSTRAP_SERVERS", "b:1")
    loaded = load_settings()
    assert loaded.node.ingest_threads == 5
    assert loaded.kafka.bootstrap_servers == "b:1"


def test_overrides_beat_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOS_NODE__INGEST_THREADS", "5")
    loaded = load_settings(node={"ingest_threads": 3})
    assert loaded.node.ingest_threads == 3


def test_unknown_key_in_file_section(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[node]\ningest_thread = 4\n")
    with pytest.raises(ConfigError, match=r"node\.ingest_thread"):
        load_settings(path)


def test_unknown_section_in_file(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[nodes]\ningest_threads = 4\n")
    with pytest.raises(ConfigError, match="nodes"):
        load_settings(path)


def test_unknown_key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOS_NODE__INGEST_THREAD", "4")
    with pytest.raises(ConfigError, match=r"node\.ingest_thread"):
        load_settings()


def test_unknown_top_level_env_key_is_rejected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BUG (contract): load_settings promises "a typo never silently falls back to a default",
    but a mistyped variable with a single underscore is ignored without error."""
    monkeypatch.setenv("CHRONOS_NODE_INGEST_THREADS", "4")
    with pytest.raises(ConfigError, match="(?i)node_ingest_threads"):
        load_settings()


#: Where the repository reads a ``CHRONOS_*`` variable: ``environ.get("X")``,
#: ``environ["X"]``, ``getenv("X")`` in Python, ``${X`` in shell.
_READS = re.compile(
    r"""(?:environ(?:\.get)?\(?|getenv\()\s*\[?["'](CHRONOS_[A-Z0-9_]+)["']|\$\{(CHRONOS_[A-Z0-9_]+)"""
)
REPO = Path(__file__).resolve().parents[2]


def _variables_read() -> set[str]:
    found: set[str] = set()
    for folder in ("chronos", "proxy", "tests", "scripts", "docker", ".ci"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".sh") or path.name == "run":
                for match in _READS.finditer(path.read_text(errors="replace")):
                    found.add(match.group(1) or match.group(2))
    return found


def test_every_variable_a_tool_reads_leaves_chronos_commands_working(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 60: ``CHRONOS_KAFKA_LIBS`` (documented in ``devstack/kafka.py``) made every
    ``chronos`` command fail ("names no setting"). Every ``CHRONOS_*`` variable the repository
    reads that is not a setting must be let through the check of the environment."""
    names = _variables_read()
    assert {"CHRONOS_KAFKA_LIBS", "CHRONOS_KAFKA_VERSION", "CHRONOS_TEST_BROKER"} <= names
    for name in sorted(n for n in names if "__" not in n):
        monkeypatch.setenv(name, "x")
    load_settings()


def test_invalid_value_in_env_names_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOS_NODE__INGEST_THREADS", "0")
    with pytest.raises(ConfigError, match=r"node\.ingest_threads"):
        load_settings()


def test_invalid_value_in_file_names_key(tmp_path: Path) -> None:
    path = _toml(tmp_path, '[store]\ncompression = "gzip"\n')
    with pytest.raises(ConfigError, match=r"store\.compression"):
        load_settings(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml")


def test_malformed_toml(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[node\ningest_threads = \n")
    with pytest.raises(ConfigError):
        load_settings(path)


def test_settings_are_frozen() -> None:
    loaded = load_settings()
    with pytest.raises(PydanticValidationError, match="frozen"):
        loaded.node.ingest_threads = 7  # type: ignore[misc]


# --- Kafka configs --------------------------------------------------------------------------


def test_producer_config_is_durable() -> None:
    config = KafkaSettings(bootstrap_servers="k:9092").producer()
    assert config["bootstrap.servers"] == "k:9092"
    assert config["acks"] == "all"
    assert config["enable.idempotence"] is True
    assert config["partitioner"] == "murmur2_random"


def test_every_client_reconnects_within_a_second_unless_configured(tmp_path: Path) -> None:
    """librdkafka's 10 s reconnect backoff brought clients back up to 15 s after a broker
    restart; the user's ``client_config`` still decides."""
    kafka = KafkaSettings()
    for config in (kafka.admin(), kafka.producer(), kafka.consumer("g")):
        assert config["reconnect.backoff.max.ms"] == 1000
    path = _toml(tmp_path, '[kafka.client_config]\n"reconnect.backoff.max.ms" = 2000\n')
    assert load_settings(path).kafka.consumer("g")["reconnect.backoff.max.ms"] == 2000


#: librdkafka options passed as keyword overrides: their names are not Python identifiers.
ProducerOverrides = TypedDict("ProducerOverrides", {"linger.ms": int, "transactional.id": str})


def test_librdkafka_passthrough(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        """
[kafka]
sasl_password = "s3cret"
[kafka.client_config]
"security.protocol" = "SASL_SSL"
"sasl.mechanism" = "PLAIN"
[kafka.producer_config]
"linger.ms" = 25
"compression.type" = "zstd"
[kafka.consumer_config]
"fetch.min.bytes" = 1024
"fetch.max.bytes" = 1048576
""",
    )
    kafka = load_settings(path).kafka
    overrides: ProducerOverrides = {"linger.ms": 5, "transactional.id": "tx-1"}
    producer = kafka.producer(**overrides)
    assert producer["security.protocol"] == "SASL_SSL"
    assert producer["sasl.password"] == "s3cret"
    assert producer["linger.ms"] == 25  # producer_config beats call overrides and defaults
    assert producer["compression.type"] == "zstd"
    assert producer["transactional.id"] == "tx-1"
    assert producer["acks"] == "all"
    assert "fetch.min.bytes" not in producer

    consumer = kafka.consumer("chronos.node.n1", **{"session.timeout.ms": 6000})
    assert consumer["group.id"] == "chronos.node.n1"
    assert consumer["security.protocol"] == "SASL_SSL"
    assert consumer["fetch.min.bytes"] == 1024
    assert consumer["fetch.max.bytes"] == 1048576
    assert consumer["auto.offset.reset"] == "earliest"
    assert consumer["enable.auto.offset.store"] is False
    assert consumer["session.timeout.ms"] == 6000
    assert "linger.ms" not in consumer and "acks" not in consumer

    admin = kafka.admin()
    assert admin["security.protocol"] == "SASL_SSL"
    assert "acks" not in admin and "group.id" not in admin
    assert "s3cret" not in repr(kafka)


@pytest.mark.parametrize(
    ("section", "option", "value"),
    [
        ("producer_config", "acks", "1"),
        ("producer_config", "acks", 0),
        ("client_config", "request.required.acks", 1),
        ("producer_config", "enable.idempotence", False),
        ("client_config", "enable.idempotence", "false"),
        ("producer_config", "transactional.id", "mine"),
    ],
)
def test_settings_that_would_weaken_durability_are_refused(
    tmp_path: Path, section: str, option: str, value: object
) -> None:
    literal = f'"{value}"' if isinstance(value, str) else str(value).lower()
    path = _toml(tmp_path, f'[kafka.{section}]\n"{option}" = {literal}\n')
    with pytest.raises(ConfigError, match=rf"kafka\.{section}.*{option}"):
        load_settings(path)


@pytest.mark.parametrize("key", sorted(PROTECTED_KAFKA_KEYS))
@pytest.mark.parametrize("section", ["client_config", "producer_config", "consumer_config"])
def test_keys_chronos_relies_on_are_refused_in_every_passthrough_table(
    tmp_path: Path, section: str, key: str
) -> None:
    """Set there, they won silently over chronos' own: isolation.level over the progress
    reader's read_committed, group.id over the election's group, message.timeout.ms over the
    proxy's ack timeout."""
    path = _toml(tmp_path, f'[kafka.{section}]\n"{key}" = "x"\n')
    with pytest.raises(
        ConfigError, match=rf"kafka\.{section}.*{re.escape(key)} is chronos' to set"
    ):
        load_settings(path)


@pytest.mark.parametrize("value", ["all", "-1", -1])
def test_durable_acks_may_be_spelled_out(value: object) -> None:
    kafka = KafkaSettings(producer_config={"acks": value, "enable.idempotence": True})
    assert kafka.producer()["acks"] == value


def test_kafka_secrets_are_kept_out_of_the_plain_tables_and_of_reprs() -> None:
    """A password in client_config would sit in a plain dict (and any repr or log of the
    settings); kafka.secrets holds it as a SecretStr and hands it to librdkafka only."""
    for key in ("ssl.key.password", "sasl.oauthbearer.client.secret", "ssl.key.pem"):
        with pytest.raises(PydanticValidationError, match="kafka.secrets"):
            ChronosSettings.model_validate({"kafka": {"client_config": {key: "hunter2"}}})
    settings = ChronosSettings.model_validate(
        {
            "kafka": {
                "secrets": {"ssl.key.password": "hunter2"},
                "sasl_password": "swordfish",
                "client_config": {"ssl.ca.pem": "PUBLIC", "security.protocol": "SASL_SSL"},
            }
        }
    )
    assert "hunter2" not in repr(settings) and "swordfish" not in repr(settings)
    assert "hunter2" not in settings.model_dump_json()
    config = settings.kafka.admin()
    assert config["ssl.key.password"] == "hunter2" and config["sasl.password"] == "swordfish"


def test_compact_mode_has_a_short_idempotency_window_by_default(tmp_path: Path) -> None:
    """In compact mode every id a store remembers is a record each restore reads: the delete
    worker's defaults there are compact mode's own, never the refresh mode's 6 h."""
    config = tmp_path / "c.toml"
    config.write_text('[rebuild]\nmode = "compact"\n')
    compact = load_settings(config)
    assert compact.delete.retention_s == COMPACT_DELETE_DEFAULTS["retention_s"]
    assert compact.delete.interval_s == COMPACT_DELETE_DEFAULTS["interval_s"]
    refresh = load_settings(None)
    assert refresh.delete.retention_s == 6 * 3600.0
    assert refresh.delete.interval_s == 600.0


def test_compact_mode_defaults_yield_to_what_an_operator_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[rebuild]\nmode = "compact"\n[delete]\nretention_s = 7200\n')
    from_file = load_settings(config)
    assert from_file.delete.retention_s == 7200
    assert from_file.delete.interval_s == COMPACT_DELETE_DEFAULTS["interval_s"]
    monkeypatch.setenv("CHRONOS_DELETE__INTERVAL_S", "45")
    monkeypatch.setenv("CHRONOS_REBUILD__MODE", "compact")
    from_env = load_settings(None)
    assert from_env.delete.interval_s == 45
    assert from_env.delete.retention_s == COMPACT_DELETE_DEFAULTS["retention_s"]
    in_code = ChronosSettings(
        rebuild=RebuildSettings(mode="compact"), delete=DeleteSettings(retention_s=5.0)
    )
    assert in_code.delete.retention_s == 5.0
    assert in_code.delete.interval_s == COMPACT_DELETE_DEFAULTS["interval_s"]


def test_a_topic_retry_policy_loads_by_topic_name_with_a_default_for_the_rest(
    tmp_path: Path,
) -> None:
    path = _toml(
        tmp_path,
        '[delivery.topics."pay.ments"]\nmax_attempts = 20\nmax_age_s = 600\n'
        '[delivery.topics."*"]\nbackoff_initial_ms = 500\n',
    )
    policies = Policies(load_settings(path).delivery.topics)
    payments, other = policies.policy_of("pay.ments"), policies.policy_of("orders")
    assert payments is not None and (payments.max_attempts, payments.max_age_s) == (20, 600)
    assert other is not None and other.backoff_initial_ms == 500 and other.max_attempts is None
    assert Policies(load_settings().delivery.topics).policy_of("orders") is None


@pytest.mark.parametrize(
    ("policy", "named"),
    [
        ('[delivery.topics."no spaces"]\nmax_attempts = 1\n', "not a Kafka topic name"),
        ('[delivery.topics."t"]\nbackoff_initial_ms = 500\nbackoff_max_ms = 100\n', "backoff"),
        ('[delivery.topics."t"]\nmax_attempts = 0\n', r"delivery\.topics\.t\.max_attempts"),
        ('[delivery.topics."t"]\nmax_tries = 3\n', r"delivery\.topics\.t\.max_tries"),
    ],
)
def test_a_bad_topic_retry_policy_is_refused_with_its_key(
    tmp_path: Path, policy: str, named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(_toml(tmp_path, policy))


@pytest.mark.parametrize(
    ("group", "named"),
    [
        ({"heartbeat_interval_ms": 3000, "session_timeout_ms": 6000}, "heartbeat_interval_ms"),
        ({"suspect_after_ms": 500, "progress_interval_ms": 250}, "suspect_after_ms"),
    ],
)
def test_group_settings_out_of_proportion_are_refused_with_the_reason(
    group: dict[str, int], named: str
) -> None:
    with pytest.raises(PydanticValidationError, match=f"group.{named}"):
        ChronosSettings.model_validate({"group": group})


def test_group_settings_in_proportion_are_taken() -> None:
    group = {"heartbeat_interval_ms": 2000, "session_timeout_ms": 6000, "suspect_after_ms": 750}
    settings = ChronosSettings.model_validate({"group": group})
    assert settings.group.suspect_after_ms == 3 * settings.group.progress_interval_ms
