"""config/chronos.toml documents every setting and loads to the defaults."""

from __future__ import annotations

import re
from pathlib import Path

from chronos.settings import ChronosSettings, load_settings

CONFIG = Path(__file__).resolve().parents[2] / "config" / "chronos.toml"


def test_example_config_loads_to_the_defaults() -> None:
    assert load_settings(CONFIG).model_dump() == ChronosSettings().model_dump()


def test_example_config_names_every_setting() -> None:
    text = CONFIG.read_text()
    for section, field in ChronosSettings.model_fields.items():
        assert f"[{section}]" in text
        assert field.annotation is not None
        for key in field.annotation.model_fields:
            assert re.search(rf"^#? ?{key} = ", text, re.M), f"{section}.{key} missing"
