"""An ASGI application served by uvicorn on a thread of this process (the proxy, a node's
admin API): started, stopped and joined like any component."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import time
from typing import Any

import uvicorn

from chronos.errors import ConfigError
from chronos.settings import SecuritySettings
from chronos.web.connections import (
    ACCEPT_QUEUE,
    HeadWaits,
    LoopErrors,
    accept_batch,
    bounded_protocol,
    effective_max_connections,
)
from chronos.web.guard import Guard, GuardSettings, Router
from chronos.web.memory import FreedBodies, glibc_malloc_trim
from chronos.web.refusals import Refusals
from chronos.web.tokens import TokenBook, TokenFileError


class ThreadedServer:
    """uvicorn on a daemon thread.

    Parameters:
        name: the thread's and component's name.
        app: the ASGI application.
        host: listen address.
        port: listen port (0: any free one; ``port`` says which once started).
    """

    def __init__(
        self,
        *,
        name: str,
        app: Any,
        host: str,
        port: int,
        security: SecuritySettings | None = None,
        router: Router | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        self.name = name
        tls: dict[str, Any] = {}
        #: What this surface refused (counted and logged, ``chronos/web/refusals.py``).
        self.refusals = refusals or Refusals(name)
        #: The tokens file in force; None without authentication.
        self.book: TokenBook | None = None
        #: Hands back the memory of bodies the guard cut off (``chronos/web/memory.py``).
        self.freed = FreedBodies(glibc_malloc_trim())
        if security is not None and router is not None:
            guarded = guard_settings(security, name, host)
            self.book = guarded.book
            app = Guard(app, guarded, router, self.refusals, self.freed)
        if security is not None and security.tls_certfile is not None:
            tls = {"ssl_certfile": security.tls_certfile, "ssl_keyfile": security.tls_keyfile}
        self.tls = bool(tls)
        bounds = security or SecuritySettings()
        self.waits = HeadWaits(
            bounds.header_timeout_s, effective_max_connections(bounds.max_connections)
        )
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            **tls,
            http=bounded_protocol(self.waits),
            # Connections the loop accepts in one turn (the kernel's queue is set apart:
            # _PacedServer): the accepted stay below the open-files limit in any burst.
            backlog=accept_batch(self.waits.max_connections, listeners(host, port)),
            log_level="warning",
            # uvicorn's own logging config writes plain text past chronos' handler; without
            # it, its lines reach the root logger in chronos' format (JSON in json mode).
            log_config=None,
            access_log=False,
            lifespan="off",
        )
        self.server = _PacedServer(config)
        self._thread = threading.Thread(target=self.serve, name=name, daemon=True)

    def serve(self) -> None:
        """Serve until stopped, on an event loop whose exhausted accepts are logged once a
        minute (``chronos.web.connections.LoopErrors``). In the main thread, uvicorn also
        takes SIGINT/SIGTERM as a stop."""
        with asyncio.Runner() as runner:
            runner.get_loop().set_exception_handler(LoopErrors(self.name))
            runner.run(self.server.serve())

    @property
    def started(self) -> bool:
        """True once the socket is listening."""
        return bool(self.server.started)

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the one chosen for 0)."""
        for server in getattr(self.server, "servers", []):
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self.server.config.port)

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
        self.server.should_exit = True

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()


class _PacedServer(uvicorn.Server):
    """uvicorn's server, listening with a queue of ``ACCEPT_QUEUE`` connections while its event
    loop accepts at most ``config.backlog`` of them a turn (asyncio gives both the one
    number: ``chronos.web.connections.accept_batch``)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        for server in getattr(self, "servers", []):
            for listening in server.sockets:
                # listen() again on the same socket (a duplicate descriptor of it) only
                # lengthens its queue; the loop's reader keeps its batch.
                with socket.fromfd(listening.fileno(), listening.family, listening.type) as dup:
                    dup.listen(ACCEPT_QUEUE)


def listeners(host: str, port: int) -> int:
    """How many sockets asyncio listens on for ``host`` (a name with an IPv4 and an IPv6
    address: two; what it cannot resolve here: one)."""
    try:
        found = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError:
        return 1
    return max(1, len({(family, address) for family, _, _, _, address in found}))


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def guard_settings(security: SecuritySettings, name: str, host: str) -> GuardSettings:
    """The guard of one surface; ConfigError when it would listen beyond loopback with no
    tokens, or when the tokens file cannot be used."""
    book = None
    if security.tokens_file is None:
        if not is_loopback(host):
            raise ConfigError(
                f"{name} listens on {host} without authentication: set security.tokens_file "
                "(see `chronos token`), or listen on 127.0.0.1"
            )
    else:
        try:
            book = TokenBook(security.tokens_file)
        except (OSError, TokenFileError) as exc:
            raise ConfigError(f"security.tokens_file: {exc}") from exc
    return GuardSettings(
        book, security.max_body_bytes, security.body_timeout_s, security.max_bodies_bytes
    )
