"""The admin API served with uvicorn on a thread of the node: /healthz, /readyz, /metrics.

Probes answer 200 or 503 with a JSON body naming each check; /metrics is Prometheus' text
format. Nothing here writes: the API reads the node as it is (``view.NodeView``).
"""

from __future__ import annotations

import threading
import time

import structlog
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chronos.admin.prometheus import ChronosCollector
from chronos.admin.view import NodeView, Report

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


class AdminServer:
    """The admin API as a component (start/stop/join).

    Parameters:
        view: the node it reports on.
        host: listen address.
        port: listen port (0: any free one; ``port`` says which once started).
    """

    def __init__(self, view: NodeView, host: str, port: int) -> None:
        self.name = "admin"
        config = uvicorn.Config(
            create_app(view),
            host=host,
            port=port,
            log_level="warning",
            # uvicorn's own logging config writes plain text past chronos' handler; without
            # it, its lines reach the root logger in chronos' format (JSON in json mode).
            log_config=None,
            access_log=False,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="admin", daemon=True)

    @property
    def started(self) -> bool:
        """True once the socket is listening."""
        return bool(self._server.started)

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the one chosen for 0)."""
        for server in getattr(self._server, "servers", []):
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self._server.config.port)

    def start(self) -> None:
        self._thread.start()

    def wait_started(self, timeout_s: float) -> bool:
        """Wait until listening (True), or until the server thread ended (False: the port
        was taken, say)."""
        deadline = time.monotonic() + timeout_s
        while not self.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.started

    def stop(self) -> None:
        self._server.should_exit = True

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()
