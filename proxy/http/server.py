"""Running the HTTP service with uvicorn, in the foreground or on a background thread."""

from __future__ import annotations

import threading

import uvicorn

from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from proxy.http.app import create_app


class ProxyServer:
    """The HTTP proxy as a component (start/stop/join), or ``serve_forever`` in the foreground.

    Parameters:
        settings: the settings tree (proxy.host/port, Kafka, limits).
    """

    def __init__(self, settings: ChronosSettings) -> None:
        self.name = "proxy"
        self.client = DelayClient(settings)
        config = uvicorn.Config(
            create_app(self.client, settings),
            host=settings.proxy.host,
            port=settings.proxy.port,
            log_level="warning",
            # uvicorn's own logging config writes plain text past chronos' handler; without
            # it, its lines reach the root logger in chronos' format (JSON in json mode).
            log_config=None,
            access_log=False,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="proxy", daemon=True)

    @property
    def started(self) -> bool:
        """True once the socket is listening."""
        return bool(self._server.started)

    @property
    def port(self) -> int:
        """The bound port (useful when configured as 0)."""
        servers = getattr(self._server, "servers", [])
        for server in servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self._server.config.port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.should_exit = True

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        self.client.close()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def serve_forever(self) -> None:
        """Run in the calling thread until SIGINT/SIGTERM (uvicorn installs the handlers)."""
        try:
            self._server.run()
        finally:
            self.client.close()
