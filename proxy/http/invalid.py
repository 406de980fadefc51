"""What the API answers about a request body it cannot take: JSON that does not parse, or a
field that breaks the body's model. One place, so that a body read on the event loop (FastAPI)
and one read in a child process (``proxy/http/lane.py``) are answered alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def field_path(loc: Sequence[object]) -> str | None:
    """A pydantic location as the API names fields (``messages[3].topic``); None for the body
    itself."""
    path = ""
    for part in loc:
        if part == "body" and not path:
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or None


def describe_invalid_body(
    error: Mapping[str, Any], content_type: str | None
) -> tuple[int, str, str | None]:
    """(status, message, field) for the first problem FastAPI found in a request body."""
    if error.get("type") == "json_invalid":
        position = next((p for p in error.get("loc", ()) if isinstance(p, int)), None)
        detail = (error.get("ctx") or {}).get("error", "invalid JSON")
        where = "" if position is None else f" at character {position}"
        return 422, f"the body is not valid JSON{where}: {detail}", None
    field = field_path(error.get("loc", ()))
    media = (content_type or "").split(";")[0].strip().lower()
    if field is None and media != "application/json":
        shown = repr(content_type) if content_type else "none"
        return 415, f"send a JSON body with content-type application/json (got {shown})", None
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if error.get("type") == "too_long":  # pydantic says "after validation": it was before
        context = error.get("ctx") or {}
        message = f"at most {context.get('max_length')}, got {context.get('actual_length')}"
    return 422, message, field


def unreadable_cause(cause: BaseException | None) -> str | None:
    """Why parsing a body as JSON failed, for the causes ``unreadable_body`` names."""
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not valid JSON: not UTF-8 at byte {cause.start}"
    if isinstance(cause, RecursionError):
        return "the body is not valid JSON here: nested too deeply"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "the body is not valid JSON here: a number has more than 4,300 digits"
    return None
