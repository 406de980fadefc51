"""The node admin API's OpenAPI document (``chronos/admin/openapi.py``) names every route
the application serves, is open like the probes, and states the bounds the handlers enforce
(issue 62: the admin API had no document)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from starlette.routing import Route

from chronos.admin.openapi import MAX_BUCKETS, MAX_HORIZON_S
from chronos.admin.server import AdminServer, create_app
from chronos.settings import SecuritySettings
from chronos.web.tokens import hash_token, new_token
from tests.unit.test_admin import StubNode
from tests.unit.test_admin import node as node  # noqa: F401  (fixture)

ADMIN = new_token()


def test_the_document_names_every_route_and_nothing_else(node: StubNode) -> None:
    app = create_app(node)
    served = {
        re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
        for route in app.routes
        if isinstance(route, Route)
    }
    with _server(node, None) as http:
        spec = http.get("/openapi.json").json()
    assert set(spec["paths"]) == served
    assert spec["openapi"].startswith("3.1")
    horizon = next(
        p for p in spec["paths"]["/v1/forecast"]["get"]["parameters"] if p["name"] == "horizon_s"
    )
    assert horizon["schema"]["maximum"] == MAX_HORIZON_S


def test_it_is_open_and_its_bounds_are_the_handlers(node: StubNode, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[[tokens]]\nname = "ops"\nsha256 = "{hash_token(ADMIN)}"\noperations = ["admin"]\n'
    )
    with _server(node, SecuritySettings(tokens_file=tokens)) as http:
        assert http.get("/openapi.json").status_code == 200, "open, as the probes"
        assert http.get("/v1/forecast").status_code == 401
        auth = {"authorization": f"Bearer {ADMIN}"}
        over = http.get(f"/v1/forecast?horizon_s={MAX_HORIZON_S + 1}", headers=auth)
        assert over.status_code == 400 and str(MAX_HORIZON_S) in over.json()["error"]
        many = http.get(f"/v1/forecast?horizon_s={MAX_HORIZON_S}&bucket_s=60", headers=auth)
        assert many.status_code == 400 and f"at most {MAX_BUCKETS} buckets" in many.json()["error"]


class _server:
    def __init__(self, node: StubNode, security: SecuritySettings | None) -> None:
        self._server = AdminServer(node, "127.0.0.1", 0, security)

    def __enter__(self) -> httpx.Client:
        self._server.start()
        assert self._server.wait_started(10)
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{self._server.port}", timeout=10)
        return self._http

    def __exit__(self, *exc: object) -> None:
        self._http.close()
        self._server.stop()
        self._server.join(10)
