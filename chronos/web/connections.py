"""Connection bounds of the HTTP surfaces (the proxy, a node's admin API), below the ASGI app.

uvicorn bounds a request's body (the guard's 408) and an idle keep-alive connection after a
response, but not the wait for a request's head: a socket that never sends one, or sends it a
byte every few seconds, is held for ever, and enough of them exhaust the process' open files
(then asyncio logs one traceback per refused accept, thousands a second). Here:

* a request head must be complete within ``header_timeout_s`` of the connection opening (or of
  the previous response on a kept-alive one); else ``408`` and the connection is closed;
* at most ``max_connections`` are held: past it, the connection that has waited longest for a
  request head is closed to make room, so a client sending a whole request is always served;
* a request head over uvicorn's limit (``h11_max_incomplete_event_size``, 16 KiB) gets ``431``;
  the rest the client sends is read and dropped until it stops or the head deadline passes, so
  it reads the answer instead of a connection reset;
* the event loop takes at most ``accept_batch`` connections off the listening socket in one
  turn, so the connections accepted before the cap can shed their way down stay within the
  open-files limit (the arithmetic is ``accept_batch``'s), while the kernel's accept queue
  still holds ``ACCEPT_QUEUE`` waiting connections, which take no descriptor of the process;
* an exhausted accept (which the above keeps from happening) is logged once a minute with a
  count, not once per attempt.
"""

from __future__ import annotations

import asyncio
import functools
import re
import resource
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import h11
import structlog
from uvicorn.protocols.http.h11_impl import H11Protocol

log = structlog.get_logger(__name__)

#: h11's limit of a request head when uvicorn is given none (16 KiB).
_DEFAULT_MAX_HEAD = 16 * 1024
#: The blank line that ends a request head (h11 also takes bare line feeds).
_HEAD_END = re.compile(rb"\r?\n\r?\n")


def _raw_response(status: bytes, error: str) -> bytes:
    """A whole HTTP/1.1 answer in the API's error shape, closing the connection."""
    body = b'{"error": "%s", "field": null}' % error.encode()
    return (
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n%s" % (status, len(body), body)
    )


_TIMEOUT_RESPONSE = _raw_response(b"408 Request Timeout", "no whole request head came in time")
_TOO_LARGE_RESPONSE = _raw_response(
    b"431 Request Header Fields Too Large", "the request head is over its limit"
)


def open_files_limit() -> int:
    """The process' soft limit of open files."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def effective_max_connections(configured: int) -> int:
    """``configured``, but at most half the open-files limit: the rest stays for Kafka's
    sockets, the store's files and the accept that makes room."""
    limit = open_files_limit()
    if limit == resource.RLIM_INFINITY:
        return configured
    return max(16, min(configured, limit // 2))


#: The kernel's queue of connections not yet accepted (uvicorn's default listen backlog): a
#: burst waits there without taking any of the process' descriptors.
ACCEPT_QUEUE = 2048


def accept_batch(max_connections: int, listeners: int = 1) -> int:
    """How many connections the event loop may accept off one listening socket in one turn
    (the ``backlog`` asyncio's ``create_server`` takes; ``listeners``: the sockets listening).

    asyncio's selector loop, when a listening socket is readable, accepts up to ``backlog``
    sockets in a row before any of them has a protocol: uvicorn's 2,048 took the descriptors of
    a whole flood in one turn, past the open-files limit (issue 62). What one batch costs: a
    socket accepted in turn t gets its transport in turn t+1 and its ``connection_made`` in
    t+2, which closes the connection waiting longest for a request head; that one's
    descriptor is freed in t+3, before t+3's accepts (what a turn schedules runs before the
    next turn's I/O callbacks). So while the loop accepts, at most three batches per listener
    are open beyond the ``max_connections`` held, and with this batch

        max_connections + 3 x listeners x batch <= max_connections + 3/4 (limit - max_connections)

    A quarter of the room above the cap (at least an eighth of the limit, the cap being at
    most half of it) stays for Kafka's sockets, the store's files, the loop's own and the
    connections whose request is in flight (the cap sheds only those waiting for a head).
    Over TLS, ``connection_made`` waits for the handshake: a socket still in one is neither
    counted nor shed (asyncio closes it after 60 s), so this bound is plain HTTP's.
    """
    limit = open_files_limit()
    if limit == resource.RLIM_INFINITY:
        return ACCEPT_QUEUE
    return max(1, min(ACCEPT_QUEUE, (limit - max_connections) // (4 * max(1, listeners))))


@dataclass
class HeadWaits:
    """Connections of one server waiting for a request head, oldest first, and what was shed.

    Shared by the server's protocol instances (all on its one event loop thread)."""

    header_timeout_s: float
    max_connections: int
    waiting: OrderedDict[int, BoundedH11Protocol] = field(default_factory=OrderedDict)
    timed_out: int = 0
    evicted: int = 0
    _logged_at: float = 0.0

    def shed_oldest(self, keep: BoundedH11Protocol) -> bool:
        """Close the connection that has waited longest for a head (not ``keep``)."""
        for key, protocol in self.waiting.items():
            if protocol is not keep:
                del self.waiting[key]
                protocol.refuse()
                self.evicted += 1
                self._report()
                return True
        return False

    def _report(self) -> None:
        now = time.monotonic()
        if now - self._logged_at >= 60.0:
            self._logged_at = now
            log.warning(
                "connections_shed",
                max_connections=self.max_connections,
                evicted=self.evicted,
                timed_out=self.timed_out,
                why="more connections than max_connections: the oldest without a request "
                "head are closed",
            )


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on the request head and a place in ``waits``."""

    def __init__(self, *args: Any, waits: HeadWaits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waits = waits
        self._head_timer: asyncio.TimerHandle | None = None
        config = kwargs["config"]
        self._max_head = config.h11_max_incomplete_event_size or _DEFAULT_MAX_HEAD
        #: Answered 431: what else comes is dropped until the client stops.
        self._discarding = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()
        if len(self.connections) > self._waits.max_connections:
            self._waits.shed_oldest(keep=self)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        waiting = self.conn.their_state is h11.IDLE
        if waiting and self._head_over_limit(data):
            self._too_large()
            return
        super().data_received(data)
        if waiting and self.conn.their_state is not h11.IDLE:
            self._head_arrived()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_arrived()
        super().connection_lost(exc)

    def refuse(self) -> None:
        """408 and close: no request head came in time, or room was needed (a connection
        already answered 431 is just closed)."""
        self._head_arrived()
        if not self.transport.is_closing():
            if not self._discarding:
                self.transport.write(_TIMEOUT_RESPONSE)
            self.transport.close()

    def _head_over_limit(self, data: bytes) -> bool:
        """Whether the request head being received, with ``data``, is over its limit: it does
        not end within it. (The body may follow in the same read: it does not count.)"""
        window = self.conn.trailing_data[0] + data
        if len(window) <= self._max_head:
            return False
        end = _HEAD_END.search(window, 0, self._max_head + 4)
        return end is None

    def _too_large(self) -> None:
        """431, then read and drop the rest until the client stops or the deadline passes:
        closing with unread bytes would reset the connection before the client read why."""
        self._discarding = True
        self.transport.write(_TOO_LARGE_RESPONSE)
        if self.transport.can_write_eof():
            self.transport.write_eof()

    def eof_received(self) -> None:
        if self._discarding:
            self.transport.close()
        super().eof_received()

    def _await_head(self) -> None:
        self._head_arrived()
        self._head_timer = self.loop.call_later(self._waits.header_timeout_s, self._too_slow)
        self._waits.waiting[id(self)] = self

    def _head_arrived(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._waits.waiting.pop(id(self), None)

    def _too_slow(self) -> None:
        self._head_timer = None
        if self._discarding:
            self.transport.close()
        elif self.conn.their_state is h11.IDLE:
            self._waits.timed_out += 1
            self.refuse()


def bounded_protocol(waits: HeadWaits) -> Any:
    """What ``uvicorn.Config(http=...)`` takes: a protocol factory bound to ``waits``."""
    return functools.partial(BoundedH11Protocol, waits=waits)


class LoopErrors:
    """An event loop's exception handler that logs an exhausted accept once a minute with a
    count (asyncio reports it once per attempt, up to the accept batch per loop turn), and
    passes anything else to the loop's default handler. ``accept_batch`` keeps the accepts
    below the open-files limit: this is for descriptors taken by something else."""

    _EXHAUSTED = "socket.accept() out of system resource"

    def __init__(self, surface: str) -> None:
        self._surface = surface
        self._suppressed = 0
        self._logged_at = -60.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != self._EXHAUSTED:
            loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self._logged_at < 60.0:
            self._suppressed += 1
            return
        log.error(
            "accept_exhausted",
            surface=self._surface,
            error=str(context.get("exception")),
            open_files_limit=open_files_limit(),
            repeats_since_last=self._suppressed,
        )
        self._logged_at, self._suppressed = now, 0
