"""The admin API served with uvicorn on a thread of the node: /healthz, /readyz, /metrics.

Probes answer 200 or 503 with a JSON body naming each check; /metrics is Prometheus' text
format. Nothing here writes: the API reads the node as it is (``view.NodeView``).
"""

from __future__ import annotations

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chronos.admin.prometheus import ChronosCollector
from chronos.admin.view import NodeView, Report
from chronos.serving import ThreadedServer

log = structlog.get_logger(__name__)


def create_app(view: NodeView) -> Starlette:
    """The admin application over ``view``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ChronosCollector(view))

    def answer(report: Report) -> JSONResponse:
        return JSONResponse(report.as_json(), status_code=200 if report.ok else 503)

    async def healthz(_request: Request) -> JSONResponse:
        return answer(view.health())

    async def readyz(_request: Request) -> JSONResponse:
        return answer(view.readiness())

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ]
    )


class AdminServer(ThreadedServer):
    """The admin API as a component (start/stop/join).

    Parameters:
        view: the node it reports on.
        host: listen address.
        port: listen port (0: any free one; ``port`` says which once started).
    """

    def __init__(self, view: NodeView, host: str, port: int) -> None:
        super().__init__("admin", create_app(view), host, port)
