#!/usr/bin/env python3
"""Write the configuration reference, docs/reference/configuration.md, from the settings models
(a unit test keeps it current, so it cannot drift from chronos/settings.py)."""

from __future__ import annotations

import enum
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from chronos.settings import ChronosSettings, TopicPolicy

TARGET = Path(__file__).resolve().parents[1] / "docs" / "reference" / "configuration.md"

_HEAD = """# Configuration reference

Generated from the settings models (`chronos/settings.py`) by
`scripts/export_config_reference.py`; `tests/unit/test_docs.py` fails when it is stale. How the
sources combine, and what each section is for: [Configuration](../configuration.md).

Each key is set in the TOML file (`[section]`, then `key = value`) or in the environment as
`CHRONOS_<SECTION>__<KEY>` (e.g. `CHRONOS_KAFKA__BOOTSTRAP_SERVERS=broker:9092`). Unknown keys
are errors.
"""


def _type(annotation: Any) -> str:
    """A short, stable name of a field's type."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in typing.get_args(annotation))
    if origin in (types.UnionType, typing.Union):
        return " \\| ".join(_type(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if isinstance(value, SecretStr):
        return "(secret)" if value.get_secret_value() else '""'
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        value = str(value)
    return "`" + json.dumps(value, default=str) + "`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(model: type[BaseModel]) -> list[str]:
    rows = ["| key | type | default | what |", "| --- | --- | --- | --- |"]
    for name, info in model.model_fields.items():
        described = _cell(info.description or "")
        rows.append(f"| `{name}` | {_type(info.annotation)} | {_default(info)} | {described} |")
    return rows


def _summary(model: type[BaseModel]) -> str:
    """The first paragraph of a model's docstring."""
    doc = (model.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.split())


def reference() -> str:
    """The reference as Markdown: one table per section, and one for a topic's policy."""
    lines = [_HEAD]
    for section, info in ChronosSettings.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel), section
        lines += [f"## `{section}`", "", _summary(model), "", *_table(model), ""]
    lines += [
        "## `delivery.topics.<topic>`",
        "",
        _summary(TopicPolicy),
        "",
        *_table(TopicPolicy),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(reference())
    print(f"wrote {TARGET}", file=sys.stderr)
