"""Connection bounds of the HTTP surfaces, over real sockets: a request head that does not come
in time gets 408 and a closed connection, and past ``max_connections`` the oldest connections
without a request head make room for a client sending a whole request."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from chronos.serving import ThreadedServer
from chronos.settings import SecuritySettings


async def _hello(_request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


def _server(security: SecuritySettings) -> Iterator[ThreadedServer]:
    server = ThreadedServer(
        name="test-http",
        app=Starlette(routes=[Route("/", _hello)]),
        host="127.0.0.1",
        port=0,
        security=security,
    )
    server.start()
    try:
        assert server.wait_started(10)
        yield server
    finally:
        server.stop()
        server.join(10)


@pytest.fixture
def quick_heads() -> Iterator[ThreadedServer]:
    """A head deadline short enough to wait out, long enough that a loaded machine still sends
    a whole request within it (the tests wait it out once each)."""
    yield from _server(SecuritySettings(header_timeout_s=2.0))


@pytest.fixture
def few_connections() -> Iterator[ThreadedServer]:
    yield from _server(SecuritySettings(header_timeout_s=600, max_connections=16))


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(30)
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


def test_an_idle_connection_and_a_trickled_head_get_408(quick_heads: ThreadedServer) -> None:
    """Mutant caught: no deadline on the request head (the socket is held until the client
    goes): ``recv`` would time out instead of reading a 408 and the close."""
    with (
        socket.create_connection(("127.0.0.1", quick_heads.port)) as idle,
        socket.create_connection(("127.0.0.1", quick_heads.port)) as slow,
    ):
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        for sock in (idle, slow):
            assert _answer(sock).startswith(b"HTTP/1.1 408 ")
    assert quick_heads.waits.timed_out == 2
    with httpx.Client(base_url=f"http://127.0.0.1:{quick_heads.port}") as http:
        assert http.get("/").text == "hello"  # a whole request is served as before


def test_a_keep_alive_connection_gets_a_deadline_for_its_next_head(
    quick_heads: ThreadedServer,
) -> None:
    with socket.create_connection(("127.0.0.1", quick_heads.port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(30)
        first = b""
        while not first.endswith(b"hello"):
            chunk = sock.recv(4096)
            assert chunk, f"closed after {first!r}"
            first += chunk
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET / HTTP/1.1\r\n")  # the second head never ends
        assert _answer(sock).startswith(b"HTTP/1.1 408 ")


def test_past_max_connections_the_oldest_waiting_make_room(
    few_connections: ThreadedServer,
) -> None:
    """40 sockets that never send a head, then a normal request: it is answered, and the
    oldest idle ones were closed (the head deadline is 10 minutes: only making room closes
    them). Mutant caught: the new connection refused instead of an idle one."""
    port = few_connections.port
    with ExitStack() as stack:
        idle = [
            stack.enter_context(socket.create_connection(("127.0.0.1", port))) for _ in range(40)
        ]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            assert http.get("/").text == "hello"
        closed = [sock for sock in idle[:24] if _answer(sock).startswith(b"HTTP/1.1 408 ")]
    assert len(closed) == 24
    assert few_connections.waits.evicted >= 25
    assert few_connections.waits.timed_out == 0


@pytest.fixture
def default_heads() -> Iterator[ThreadedServer]:
    yield from _server(SecuritySettings())


def test_a_request_head_over_the_limit_gets_431_not_a_reset(
    default_heads: ThreadedServer,
) -> None:
    """A 1 MB header: the client sends it all and reads 431. Mutant caught: uvicorn's own
    handling (a 400 and a close with the rest unread: the client saw a connection reset)."""
    with socket.create_connection(("127.0.0.1", default_heads.port)) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000 + b"\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        assert _answer(sock).startswith(b"HTTP/1.1 431 ")
    with httpx.Client(base_url=f"http://127.0.0.1:{default_heads.port}") as http:
        assert http.get("/", headers={"x-fine": "a" * 4_000}).text == "hello"


def test_a_head_and_a_large_body_in_one_read_are_not_a_large_head(
    default_heads: ThreadedServer,
) -> None:
    """A normal POST whose first read holds its head and 64 KiB of body: served. Mutant
    caught: every byte before the head was parsed counted as head (a 431 for big bodies)."""
    body = b"a" * 65_536
    head = b"POST / HTTP/1.1\r\nHost: x\r\ncontent-length: %d\r\n\r\n" % len(body)
    with socket.create_connection(("127.0.0.1", default_heads.port)) as sock:
        sock.sendall(head + body)
        sock.settimeout(30)
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 405 "), answer[:100]  # the app has GET / only
