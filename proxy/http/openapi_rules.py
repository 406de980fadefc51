"""The proxy's OpenAPI document, with the rules the server enforces written into it.

FastAPI derives the schema from the request models, which keep their fields loose so that the
server can answer a broken request with a message naming the field and the rule (pydantic's
own "String should match pattern" says neither). The rules themselves live in
``chronos/validation.py`` and in the settings (``limits``, ``proxy.batch_max``); this module
states the same rules in the schema, so that a client generated from it validates as the server
does, and a schema-driven fuzzer (tests/integration/test_schema_fuzz.py) can hold the server to
them: whatever the schema calls invalid must be refused.

Rules that depend on the clock (no due time more than ``limits.max_delay_s`` ahead, a repeat's
last occurrence within it) or on two fields at once (``base64`` payloads, the message's total
size), and a cron expression's grammar and its zone's name beyond their shape, cannot be
written in JSON Schema; the descriptions state them and the server answers 422 or 413.
"""

from __future__ import annotations

import re
from typing import Any

from chronos.cron import EXPRESSION_SHAPE
from chronos.names import HEADER_PREFIX
from chronos.settings import ChronosSettings
from chronos.validation import ID_CHARS, MAX_MULTIPLIER, TOPIC_CHARS

JsonObject = dict[str, Any]

#: The ``chronos-`` prefix in any letter case, as ``validate_message`` compares it.
_RESERVED_HEADER = "".join(
    f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in HEADER_PREFIX
)
_ID_PATTERN = f"^{ID_CHARS}+$"
_DUE_FIELDS = ("delay_ms", "deliver_at_ms", "deliver_at")

_GUARD_RESPONSES: dict[str, str] = {
    "400": (
        "The request's framing is ambiguous: both Content-Length and Transfer-Encoding (the "
        "connection is closed), or not HTTP/1.1 at all."
    ),
    "401": "No bearer token, or one the tokens file does not hold (WWW-Authenticate: Bearer).",
    "403": "The token may not call this operation, or may not send to a message's topic.",
    "408": "The body did not arrive within security.body_timeout_s.",
    "413": "The body is over security.max_body_bytes, or a message over limits.max_message_bytes.",
    "429": "The token is over its request rate or its pending-message quota (Retry-After).",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds until a request may succeed.",
        "schema": {"type": "integer", "minimum": 1},
    }
}


def topic_pattern(namespace: str) -> str:
    """Kafka's topic names (1-249 of ``[A-Za-z0-9._-]``, not ``.`` or ``..``) that are not
    internal: not ``__...`` (Kafka's) and not ``<namespace>....`` (chronos')."""
    return rf"^(?!__)(?!{re.escape(namespace)}\.)(?!\.\.?$){TOPIC_CHARS}{{1,249}}$"


def state_rules(spec: JsonObject, settings: ChronosSettings) -> JsonObject:
    """``spec`` (as FastAPI generated it) with the server's rules, security scheme and guard
    answers; changed in place and returned."""
    limits = settings.limits
    schemas: JsonObject = spec["components"]["schemas"]
    identifier = {"pattern": _ID_PATTERN, "minLength": 1, "maxLength": limits.max_id_bytes}
    max_delay_ms = limits.max_delay_s * 1000

    schedule = schemas["ScheduleIn"]
    fields = schedule["properties"]
    _constrain(fields["topic"], pattern=topic_pattern(settings.topics.namespace), minLength=1)
    _constrain(fields["id"], **identifier)
    _state_due(schedule, max_delay_ms)
    header = schemas["HeaderIn"]["properties"]["name"]
    _constrain(header, minLength=1, pattern=f"^(?!{_RESERVED_HEADER})[^\\u0000]+$")

    repeat = schemas["RepeatIn"]["properties"]
    lo, hi = limits.repeat_min_interval_ms, limits.repeat_max_interval_ms
    _constrain(repeat["interval_ms"], minimum=lo, maximum=hi)
    _constrain(repeat["times"], minimum=1, maximum=limits.repeat_max_times)
    _constrain(repeat["multiplier"], minimum=2, maximum=MAX_MULTIPLIER)
    _constrain(repeat["max_interval_ms"], minimum=lo, maximum=hi)
    _constrain(repeat["cron"], pattern=EXPRESSION_SHAPE)
    _constrain(repeat["until_ms"], minimum=0)
    schemas["RepeatIn"]["oneOf"] = [
        {
            "properties": {
                "kind": {"enum": ["fixed", "exponential"]},
                "interval_ms": {"not": {"type": "null"}},
            },
            "required": ["interval_ms"],
        },
        {
            "properties": {"kind": {"const": "cron"}, "cron": {"not": {"type": "null"}}},
            "required": ["cron"],
        },
    ]

    schemas["BatchIn"]["properties"]["messages"]["maxItems"] = settings.proxy.batch_max
    _state_due(schemas["RescheduleIn"], max_delay_ms)

    for path, operations in spec["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "message_id":
                    _constrain(parameter["schema"], **identifier)
                if parameter["name"] == "topic" and path.startswith("/v1/policies/"):
                    target = topic_pattern(settings.topics.namespace)[1:-1]
                    _constrain(parameter["schema"], pattern=rf"^(?:\*|{target})$", minLength=1)
            if path == "/healthz":
                operation["security"] = []
                continue
            _add_guard_responses(operation["responses"])
    spec["components"]["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "A token of security.tokens_file (`chronos token` makes one); "
            "not needed when the proxy runs without tokens on loopback.",
        }
    }
    spec["security"] = [{"bearer": []}]
    return spec


def _constrain(field: JsonObject, **rules: object) -> None:
    """Add ``rules`` to a field, or to the non-null branch of an optional one."""
    branches = field.get("anyOf")
    target = field if branches is None else next(b for b in branches if b.get("type") != "null")
    target.update(rules)


def _state_due(model: JsonObject, max_delay_ms: int) -> None:
    """Exactly one due field holds a value (the others absent or null), and none lies before
    1970 or, as a delay, beyond the horizon."""
    fields = model["properties"]
    _constrain(fields["delay_ms"], minimum=0, maximum=max_delay_ms)
    _constrain(fields["deliver_at_ms"], minimum=0)
    _constrain(fields["deliver_at"], pattern=r"^(19[7-9]\d|[2-9]\d{3})-")
    model["oneOf"] = [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
        for name in _DUE_FIELDS
    ]
    model["description"] = (
        model.get("description", "")
        + f" The due time must not lie more than limits.max_delay_s ({max_delay_ms // 1000} s) "
        "ahead; a deliver_at needs a timezone offset."
    ).strip()


def _add_guard_responses(responses: JsonObject) -> None:
    for status, description in _GUARD_RESPONSES.items():
        answer = responses.setdefault(
            status,
            {
                "description": description,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}
                },
            },
        )
        if status == "429":
            answer["headers"] = _RETRY_AFTER
