"""Running the HTTP service with uvicorn, in the foreground or on a background thread."""

from __future__ import annotations

from chronos.serving import ThreadedServer
from chronos.settings import ChronosSettings
from chronos.web.refusals import Refusals
from proxy.client import DelayClient
from proxy.http.app import create_app, proxy_operation
from proxy.http.lane import BodyLane
from proxy.http.telemetry import ProxyTelemetry


class ProxyServer(ThreadedServer):
    """The HTTP proxy as a component (start/stop/join), or ``serve_forever`` in the foreground.

    Parameters:
        settings: the settings tree (proxy.host/port, Kafka, limits).
    """

    def __init__(self, settings: ChronosSettings) -> None:
        self.client = DelayClient(settings)
        self.telemetry = ProxyTelemetry(Refusals("proxy"))
        self.lane = BodyLane(settings)
        app = create_app(self.client, settings, self.telemetry, self.lane)
        super().__init__(
            name="proxy",
            app=app,
            host=settings.proxy.host,
            port=settings.proxy.port,
            security=settings.security,
            router=proxy_operation,
            refusals=self.telemetry.refusals,
        )
        self.telemetry.book = self.book

    def start(self) -> None:
        """Serve on a background thread, the body workers started first (warm for the first
        large body)."""
        self.lane.start()
        super().start()

    def join(self, timeout: float) -> None:
        super().join(timeout)
        self.lane.close()
        self.client.close()

    def serve_forever(self) -> None:
        """Run in the calling thread until SIGINT/SIGTERM (uvicorn installs the handlers)."""
        self.lane.start()
        try:
            self.serve()
        finally:
            self.lane.close()
            self.client.close()
