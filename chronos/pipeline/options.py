"""Settings travel to Spark executors as a data-source option (options are strings only)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from chronos.errors import ConfigError
from chronos.settings import ChronosSettings

SETTINGS_OPTION = "settings"


def settings_to_option(settings: ChronosSettings) -> str:
    """The settings tree as JSON, secrets included (executors need the Kafka password)."""
    data = settings.model_dump(mode="json")
    if settings.kafka.sasl_password is not None:
        data["kafka"]["sasl_password"] = settings.kafka.sasl_password.get_secret_value()
    data["kafka"]["secrets"] = {
        key: value.get_secret_value() for key, value in settings.kafka.secrets.items()
    }
    return json.dumps(data)


def settings_from_options(options: Mapping[str, str]) -> ChronosSettings:
    """The settings a job passed, or defaults with ``bootstrap``/``namespace`` overrides for
    someone using the data source directly."""
    raw = options.get(SETTINGS_OPTION)
    if raw is not None:
        return ChronosSettings.model_validate(json.loads(raw))
    data: dict[str, dict[str, str]] = {}
    if "bootstrap" in options:
        data["kafka"] = {"bootstrap_servers": options["bootstrap"]}
    if "namespace" in options:
        data["topics"] = {"namespace": options["namespace"]}
    return ChronosSettings.model_validate(data)


def int_option(options: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    """An integer option, with a clear error for a bad value."""
    raw = options.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"option {name}={raw!r} is not an integer") from exc
