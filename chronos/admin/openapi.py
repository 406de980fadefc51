"""The admin API's OpenAPI document, served at ``/openapi.json`` (open, as the proxy's).

Written out here rather than generated: the admin API is a Starlette application of a few
read-only routes whose parameters are query strings checked by hand (``server.py``); a test
(``tests/unit/test_admin_openapi.py``) holds the document to the application's routes and to
the bounds the handlers enforce.
"""

from __future__ import annotations

from typing import Any

#: Bounds of the query parameters, shared with the handlers that enforce them.
FAR = 1 << 62
MAX_HORIZON_S = 31 * 86_400
MAX_BUCKETS = 10_000
LIST_STATES = ("pending", "delivered", "dead_lettered", "any")

_JSON = "application/json"
_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}},
    "required": ["error"],
}
_OBJECT = {"type": "object", "additionalProperties": True}


def _integer(name: str, description: str, low: int, high: int, default: int) -> dict[str, Any]:
    schema = {"type": "integer", "minimum": low, "maximum": high, "default": default}
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


_SCOPE = {
    "name": "scope",
    "in": "query",
    "required": False,
    "description": "local: this node's stores only (another cluster node asking).",
    "schema": {"type": "string", "enum": ["local"]},
}


def _answers(*statuses: int, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Responses: 200 with ``body`` (a JSON object), and each of ``statuses``."""
    meaning = {
        400: "A query parameter is out of its bounds (the error names it).",
        401: "No bearer token, or one the tokens file does not hold.",
        403: "The token may not call the admin operation.",
        503: "The node cannot answer yet (its store is not complete).",
    }
    out: dict[str, Any] = {
        "200": {"description": "OK", "content": {_JSON: {"schema": body or _OBJECT}}}
    }
    for status in statuses:
        out[str(status)] = {
            "description": meaning[status],
            "content": {_JSON: {"schema": _ERROR}},
        }
    return out


_GUARDED = (401, 403)


def document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the admin API of this ``version``."""
    probe = {
        "description": "200 or 503, with a JSON body naming each check.",
        "content": {_JSON: {"schema": _OBJECT}},
    }
    paths: dict[str, Any] = {
        "/healthz": {"get": {"summary": "Liveness", "security": [], "responses": {
            "200": probe, "503": probe}}},
        "/readyz": {"get": {"summary": "Readiness", "security": [], "responses": {
            "200": probe, "503": probe}}},
        "/metrics": {"get": {"summary": "Prometheus text format", "responses": {
            "200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}},
            **{str(s): _answers(s)[str(s)] for s in _GUARDED}}}},
        "/v1/messages/{id}": {"get": {
            "summary": "Where a message is: 200 for every state, unknown included",
            "parameters": [
                {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                _SCOPE,
            ],
            "responses": _answers(*_GUARDED, 503)}},
        "/v1/messages": {"get": {
            "summary": "Stored messages by slot range, topic and state, a page per call",
            "parameters": [
                _integer("from_ms", "First slot (epoch ms), inclusive.", 0, FAR, 0),
                _integer("to_ms", "Last slot (epoch ms), exclusive.", 0, FAR, FAR),
                {"name": "topic", "in": "query", "required": False, "schema": {"type": "string"}},
                {"name": "state", "in": "query", "required": False,
                 "schema": {"type": "string", "enum": list(LIST_STATES), "default": "pending"}},
                {"name": "cursor", "in": "query", "required": False,
                 "description": "The previous page's cursor (hex).",
                 "schema": {"type": "string", "pattern": "^([0-9a-fA-F]{2})*$"}},
                _integer("limit", "Rows at most (capped at 1,000).", 1, FAR, 100),
                _SCOPE,
            ],
            "responses": _answers(400, *_GUARDED)}},
        "/v1/forecast": {"get": {
            "summary": "Pending messages per bucket over a horizon",
            "parameters": [
                _integer("horizon_s", f"At most {MAX_BUCKETS} buckets.", 60, MAX_HORIZON_S, 3_600),
                _integer("bucket_s", "Bucket width.", 60, MAX_HORIZON_S, 60),
                {"name": "repeats", "in": "query", "required": False,
                 "schema": {"type": "string", "enum": ["true", "false"], "default": "false"}},
                _SCOPE,
            ],
            "responses": _answers(400, *_GUARDED, 503)}},
        "/v1/overview": {"get": {"summary": "What the dashboard draws",
                                 "responses": _answers(*_GUARDED)}},
        "/v1/policies": {"get": {"summary": "Each target topic's delivery policy in force",
                                 "responses": _answers(*_GUARDED)}},
        "/dashboard": {"get": {"summary": "The dashboard page (its data needs a token)",
                               "security": [], "responses": {"200": {
                                   "description": "OK",
                                   "content": {"text/html": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": {"get": {"summary": "This document", "security": [],
                                  "responses": {"200": {"description": "OK",
                                                        "content": {_JSON: {"schema": _OBJECT}}}}}},
    }  # fmt: skip
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "chronos node admin API",
            "version": version,
            "description": "Read-only: a node's health, metrics, messages and forecast.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }
