"""The admin API served with uvicorn on a thread of the node.

* ``/healthz``, ``/readyz``: 200 or 503 with a JSON body naming each check.
* ``/metrics``: Prometheus' text format.
* ``/v1/messages/{id}``: where a message is (``schedule/lookup.py``); 200 for every state,
  ``unknown`` included, so a caller tells "not known here" from "this node is down".
* ``/v1/messages``: pending (or delivered) messages by slot range, topic and state, one page
  per call with a cursor.
* ``/v1/forecast``: pending messages per bucket over a horizon, from counts per minute.
* ``/v1/overview``: what the dashboard draws; ``/dashboard``: the page.
* ``/openapi.json``: this API's OpenAPI document (``openapi.py``).

Nothing here writes: the API reads the node as it is (``view.NodeView``). Handlers that read
the store are plain functions, which Starlette runs on its thread pool, off the event loop.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from importlib.resources import files
from typing import cast

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from chronos import __version__
from chronos.admin.openapi import FAR, LIST_STATES, MAX_BUCKETS, MAX_HORIZON_S, document
from chronos.admin.prometheus import ChronosCollector
from chronos.admin.view import NodeView, Report, ScheduleReader
from chronos.errors import ConfigError, NotReady
from chronos.listing import ListState, PageQuery
from chronos.metrics import BOUNDS_MS
from chronos.serving import ThreadedServer
from chronos.settings import ChronosSettings, SecuritySettings
from chronos.web.token_gauge import TokensFileGauge
from chronos.web.tokens import Operation

log = structlog.get_logger(__name__)


def create_app(view: NodeView, collectors: Sequence[Collector] = ()) -> Starlette:
    """The admin application over ``view``; ``collectors``: more series for ``/metrics`` (a
    cluster node's per partition)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ChronosCollector(view))
    for collector in collectors:
        registry.register(collector)

    def answer(report: Report) -> JSONResponse:
        return JSONResponse(report.as_json(), status_code=200 if report.ok else 503)

    async def healthz(_request: Request) -> JSONResponse:
        return answer(view.health())

    async def readyz(_request: Request) -> JSONResponse:
        return answer(view.readiness())

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    def lookup_of(request: Request) -> ScheduleReader:
        """``?scope=local``: this node's stores only (another cluster node asking)."""
        return view.local_lookup if request.query_params.get("scope") == "local" else view.lookup

    def message(request: Request) -> JSONResponse:
        try:
            answer = lookup_of(request).status(request.path_params["id"])
        except NotReady as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        return JSONResponse(answer.as_json())

    def messages(request: Request) -> JSONResponse:
        q = request.query_params
        try:
            state = q.get("state", "pending")
            if state not in LIST_STATES:
                raise ValueError(f"state must be one of {', '.join(LIST_STATES)}")
            cursor = q.get("cursor")
            if cursor is not None:
                bytes.fromhex(cursor)
            query = PageQuery(
                from_ms=_int(q, "from_ms", 0, hi=FAR),
                to_ms=_int(q, "to_ms", FAR, hi=FAR),
                topic=q.get("topic"),
                state=cast("ListState", state),
                cursor=cursor,
                limit=_int(q, "limit", 100, lo=1, hi=FAR),
            )
            page = lookup_of(request).page(query)
        except ValueError as exc:
            return _bad(str(exc))
        return JSONResponse(page.as_json())

    def forecast(request: Request) -> JSONResponse:
        q = request.query_params
        try:
            horizon = _int(q, "horizon_s", 3_600, lo=60, hi=MAX_HORIZON_S)
            bucket = _int(q, "bucket_s", 60, lo=60, hi=MAX_HORIZON_S)
            if horizon // bucket > MAX_BUCKETS:
                raise ValueError(
                    f"horizon_s must be 60..{MAX_HORIZON_S} with at most {MAX_BUCKETS} buckets"
                )
            repeats = _flag(q, "repeats")
            answer = lookup_of(request).forecast(view.gauges().now_ms, horizon, bucket, repeats)
        except ValueError as exc:
            return _bad(str(exc))
        except NotReady as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        return JSONResponse(answer.as_json())

    def overview(_request: Request) -> JSONResponse:
        return JSONResponse(_overview(view))

    def policies(_request: Request) -> JSONResponse:
        return JSONResponse(view.policies())

    page = files("chronos.admin").joinpath("dashboard.html").read_text(encoding="utf-8")
    page_headers = dashboard_headers(page)

    async def dashboard(_request: Request) -> HTMLResponse:
        return HTMLResponse(page, headers=page_headers)

    description = document(__version__)

    async def openapi(_request: Request) -> JSONResponse:
        return JSONResponse(description)

    app = Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
            Route("/v1/messages/{id:path}", message),
            Route("/v1/messages", messages),
            Route("/v1/forecast", forecast),
            Route("/v1/overview", overview),
            Route("/v1/policies", policies),
            Route("/dashboard", dashboard),
            Route("/openapi.json", openapi),
        ]
    )
    # A trailing slash is a 404, not a redirect to the request's Host header.
    app.router.redirect_slashes = False
    return app


_TOTALS = ("ingested", "delivered", "cancelled", "dead_lettered")


def dashboard_headers(page: str) -> dict[str, str]:
    """What keeps the dashboard page to itself: a Content-Security-Policy allowing only its
    own inline script and style (by their SHA-256) and requests to this API, never framed
    (clickjacking), no MIME sniffing, no referrer (its URL fragment holds a token)."""

    def digest(tag: str) -> str:
        body = re.search(rf"<{tag}>(.*?)</{tag}>", page, re.DOTALL)
        assert body is not None, f"the dashboard has no <{tag}>"
        hashed = base64.b64encode(hashlib.sha256(body[1].encode()).digest()).decode()
        return f"'sha256-{hashed}'"

    policy = (
        f"default-src 'none'; script-src {digest('script')}; style-src {digest('style')}; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return {
        "content-security-policy": policy,
        "x-frame-options": "DENY",
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
    }


def _flag(query: Mapping[str, str], name: str) -> bool:
    """``true`` or ``false`` (absent: false); ValueError for anything else."""
    raw = query.get(name, "false").lower()
    if raw not in ("true", "false"):
        raise ValueError(f"{name} must be true or false")
    return raw == "true"


def _int(query: Mapping[str, str], name: str, default: int, lo: int = 0, hi: int = FAR) -> int:
    """A query parameter as an integer in ``lo..hi``: what the store and the arithmetic behind
    each parameter take (a slot is 0..2**62 ms: a larger or negative one is no time)."""
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw[:40]!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be {lo}..{hi}, got {raw[:40]}")
    return value


def _bad(reason: str) -> JSONResponse:
    return JSONResponse({"error": reason}, status_code=400)


def _overview(view: NodeView) -> dict[str, object]:
    """The node at a glance: role, term, lag, totals, delivery lateness, the replicas."""
    g = view.gauges()
    histograms = view.metrics.histograms()
    # Due to acknowledged (alone) or committed (master): what a consumer sees.
    lateness = histograms.get("ack_lateness_ms") or histograms.get("send_lateness_ms")
    return {
        "node": view.readiness().as_json().get("node"),
        "role": g.role,
        "term": g.term,
        "ready": g.ready,
        "now_ms": g.now_ms,
        "seek_ms": g.seek_ms,
        "seek_lag_s": max(0, g.now_ms - g.seek_ms) / 1000.0 if g.seek_ms else 0.0,
        "delivery_lag_s": g.delivery_lag_ms / 1000.0,
        "stored_messages": g.stored_messages,
        # The counters a reader expects are there from the start, 0 until they move.
        "totals": {**dict.fromkeys(_TOTALS, 0), **view.metrics.totals()},
        "lateness": {
            "bounds_s": [bound / 1000.0 for bound in BOUNDS_MS],
            "counts": list(lateness.buckets) if lateness else [0] * (len(BOUNDS_MS) + 1),
        },
        "replicas": view.replicas(),
    }


#: Open to anyone: the probes (a liveness probe carries no secret) and the dashboard's page,
#: which holds no data (its script asks the API with the token given in its address).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/dashboard", "/openapi.json"})


def admin_operation(_method: str, path: str) -> Operation | None:
    """The operation a request calls: ``admin`` for everything but ``OPEN_PATHS``."""
    return None if path in OPEN_PATHS else "admin"


class AdminServer(ThreadedServer):
    """The admin API as a component (start/stop/join).

    Parameters:
        view: the node it reports on.
        host: listen address.
        port: listen port (0: any free one; ``port`` says which once started).
        security: tokens, TLS and request bounds (``chronos/web/``); None: none (tests).
        collectors: more series for ``/metrics``.
    """

    def __init__(
        self,
        view: NodeView,
        host: str,
        port: int,
        security: SecuritySettings | None = None,
        collectors: Sequence[Collector] = (),
    ) -> None:
        tokens = TokensFileGauge("chronos_tokens_file_ok")
        app = create_app(view, [*collectors, tokens])
        super().__init__(
            name="admin", app=app, host=host, port=port, security=security, router=admin_operation
        )
        tokens.book = self.book


#: How long a started admin API may take to listen.
_LISTEN_TIMEOUT_S = 10.0


def serve_admin(
    view: NodeView, settings: ChronosSettings, collectors: Sequence[Collector] = ()
) -> AdminServer:
    """Start the admin API over ``view`` where ``settings.admin`` says, with its security; a
    port it cannot take raises ConfigError (the node's start then ends with nothing running).
    """
    admin = settings.admin
    server = AdminServer(view, admin.host, admin.port, settings.security, collectors)
    server.start()
    if not server.wait_started(_LISTEN_TIMEOUT_S):
        raise ConfigError(
            f"the admin API could not listen on {admin.host}:{admin.port} "
            "(is admin.port taken? 0 picks a free one)"
        )
    log.info("admin_listening", host=admin.host, port=server.port)
    return server
