"""The guard in front of an HTTP surface: who is calling, may they, and is the request bounded.

An ASGI middleware, so it acts before the framework reads or parses anything: a request
without a valid token, or for an operation its token lacks, is refused (401/403) without its
body being read; a request over its token's rate gets 429 with ``Retry-After``; a body over
``max_body_bytes`` gets 413 from its ``Content-Length`` alone, or, sent chunked, as soon as
the bytes read pass the limit, so a 1 GB upload costs neither the time nor the memory to read
it (uvicorn stops reading a socket whose body is not consumed). A body that trickles in slower
than ``body_timeout_s`` allows gets 408.

Topic rights need the parsed body: the proxy checks them per message with the token this
guard leaves in the request's state (``token_of``).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from chronos.token_bucket import TokenBucket
from chronos.web.memory import FreedBodies
from chronos.web.refusals import Refusals
from chronos.web.tokens import Operation, Token, TokenBook

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
#: The operation a request calls (None: open to anyone, e.g. health probes).
Router = Callable[[str, str], Operation | None]

_STATE_KEY = "chronos_token"


@dataclass(frozen=True)
class GuardSettings:
    """What the guard enforces (``security`` settings).

    Parameters:
        book: the tokens; None when this surface runs without authentication.
        max_body_bytes: the largest request body read.
        body_timeout_s: longest time to receive a whole body.
        max_bodies_bytes: the most bytes of request bodies held at once, all requests
            together: each may take ``max_body_bytes``, and a thousand at once would take
            gigabytes (the rest get 503 with Retry-After).
    """

    book: TokenBook | None
    max_body_bytes: int
    body_timeout_s: float
    max_bodies_bytes: int = 256 * 2**20


class RateLimiter:
    """One token bucket per token name: ``rate`` requests (or messages) a second, bursts of up
    to a second's worth. A token whose rate changed (its file re-read) keeps what it had saved,
    up to the new second's worth."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._buckets: dict[str, TokenBucket] = {}

    def wait_s(self, name: str, rate: float, cost: float = 1.0) -> float:
        """0 when ``cost`` (requests, or messages) may go now, and takes it; else seconds
        until it may (``math.inf``: never, it is over a second's worth)."""
        if rate <= 0:
            return 0.0
        now = self._monotonic()
        capacity = max(1.0, rate)
        if cost > capacity:
            return math.inf
        with self._lock:
            bucket = self._buckets.get(name)
            if bucket is None:
                bucket = self._buckets[name] = TokenBucket(rate, capacity, now)
            elif bucket.rate != rate:
                bucket.set_rate(rate, capacity, now)
            return 0.0 if bucket.take(now, cost) else bucket.wait_s(now, cost)


def token_of(scope_state: Any) -> Token | None:
    """The token a guarded request came with (``request.state``), None without auth."""
    return getattr(scope_state, _STATE_KEY, None)


def token_of_scope(scope: Scope) -> Token | None:
    """The token the guard found for a request, from its ASGI scope."""
    state = scope.get("state")
    return state.get(_STATE_KEY) if isinstance(state, dict) else None


class Guard:
    """The middleware (see the module's docstring)."""

    def __init__(
        self,
        app: App,
        settings: GuardSettings,
        router: Router,
        refusals: Refusals,
        freed: FreedBodies,
    ) -> None:
        self._app = app
        #: Hands back the memory of bodies cut off (chronos/web/memory.py).
        self.freed = freed
        self._settings = settings
        self._router = router
        self._rates = RateLimiter()
        self.refusals = refusals
        #: Body bytes of the requests being served, all together (the event loop's thread).
        self._bodies = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if _header(scope, b"transfer-encoding") is not None and _content_length(scope) is not None:
            # Two lengths: a front proxy that reads the other one would see another request
            # in the rest of this body (request smuggling). RFC 9112 6.3 lets a server refuse
            # it, and then it must close the connection.
            self._tell(scope, 400, "two_lengths", _TWO_LENGTHS)
            await _answer(send, 400, _TWO_LENGTHS, {"connection": "close"})
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            status, reason, error, headers = refusal
            self._tell(scope, status, reason, error)
            await _answer(send, status, error, headers)
            return
        limit = self._settings.max_body_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            error = f"request body over {limit} bytes"
            self._tell(scope, 413, "body_too_large", error)
            await _answer(send, 413, error, {"connection": "close"})
            return
        if declared is not None and self._bodies + declared > self._settings.max_bodies_bytes:
            self._tell(scope, 503, "bodies_budget", _BUSY)
            await _answer(send, 503, _BUSY, {"connection": "close", "retry-after": "1"})
            return
        body = _Body()
        try:
            await self._app(scope, *self._bounded(scope, receive, send, limit, body))
        finally:
            self._bodies -= body.held
            if body.cut_off:
                self.freed.released(body.held)

    def _tell(self, scope: Scope, status: int, reason: str, error: str) -> None:
        token = token_of_scope(scope)
        client = scope.get("client")
        self.refusals.refused(
            status,
            reason,
            token=None if token is None else token.name,
            operation=self._router(scope["method"], scope["path"]),
            client=None if not client else str(client[0]),
            detail=error,
        )

    def _refusal(self, scope: Scope) -> tuple[int, str, str, dict[str, str]] | None:
        """(status, reason, error, headers) when the request may not go on; None when it
        may."""
        operation = self._router(scope["method"], scope["path"])
        book = self._settings.book
        if operation is None or book is None:
            return None
        presented = _bearer(scope)
        if presented is None:
            error = "missing bearer token (Authorization: Bearer ...)"
            return 401, "missing_token", error, _CHALLENGE
        token = book.find(presented)
        if token is None:
            return 401, "unknown_token", "unknown bearer token", _CHALLENGE
        scope.setdefault("state", {})[_STATE_KEY] = token
        if not token.may(operation):
            return 403, "operation", f"token {token.name!r} may not call {operation}", {}
        wait = self._rates.wait_s(token.name, token.requests_per_s)
        if wait > 0:
            return (
                429,
                "requests_per_s",
                f"token {token.name!r} is over its {token.requests_per_s:g} requests/s",
                {"retry-after": str(max(1, math.ceil(wait)))},
            )
        return None

    def _bounded(
        self, scope: Scope, receive: Receive, send: Send, limit: int, body: _Body
    ) -> tuple[Receive, Send]:
        """(receive, send) for the application: a body over ``limit`` bytes or slower than
        ``body_timeout_s`` is answered here (413, 408), and the application then reads a
        disconnect and may send nothing more. Answered here, not raised: frameworks turn an
        error while reading a body into a 400 of their own."""
        timeout = self._settings.body_timeout_s
        deadline = time.monotonic() + timeout
        received = 0
        started = answered = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def refuse(
            status: int, reason: str, error: str, headers: dict[str, str] | None = None
        ) -> Message:
            nonlocal answered
            body.cut_off = True
            if not started and not answered:
                self._tell(scope, status, reason, error)
                await _answer(send, status, error, {"connection": "close", **(headers or {})})
            answered = True
            return {"type": "http.disconnect"}

        async def bounded_receive() -> Message:
            nonlocal received
            if answered:
                return {"type": "http.disconnect"}
            left = deadline - time.monotonic()
            try:
                message = await asyncio.wait_for(receive(), timeout=max(left, 0.001))
            except TimeoutError:
                error = f"request body not received within {timeout:g} s"
                return await refuse(408, "body_timeout", error)
            if message["type"] == "http.request":
                size = len(message.get("body", b""))
                received += size
                if received > limit:
                    return await refuse(413, "body_too_large", f"request body over {limit} bytes")
                if self._bodies + size > self._settings.max_bodies_bytes:
                    return await refuse(503, "bodies_budget", _BUSY, {"retry-after": "1"})
                self._bodies += size
                body.held += size
            return message

        return bounded_receive, guarded_send


@dataclass
class _Body:
    """A request's body as the guard saw it."""

    #: Bytes read so far (counted against ``max_bodies_bytes`` until the request ends).
    held: int = 0
    #: Whether the guard cut it off (413, 408, 503 mid-body): the framework's error path then
    #: leaves the chunks read in reference cycles, freed only by a full collection.
    cut_off: bool = False


_CHALLENGE = {"www-authenticate": 'Bearer realm="chronos"'}
_BUSY = "receiving too many request bodies at once (security.max_bodies_bytes); retry"


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def _bearer(scope: Scope) -> str | None:
    value = _header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, credentials = value.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


_TWO_LENGTHS = "a request may not have both Content-Length and Transfer-Encoding (RFC 9112 6.3)"


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    if value is None or not value.isdigit():
        return None
    return int(value)


async def _answer(send: Send, status: int, error: str, headers: dict[str, str]) -> None:
    """The documented error shape, ``{"error", "field"}``."""
    body = json.dumps({"error": error, "field": None}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
