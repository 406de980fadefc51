"""A burst of connections past the open-files limit, against a server built as chronos builds
one (``chronos.serving.ThreadedServer``) in a child process with a low open-files limit: the
connections it accepts stay below the limit (``chronos.web.connections.accept_batch``), so
``accept()`` never runs out of descriptors and a whole request is still served.

The burst does not depend on the machine's speed: the child's event loop is held (a request
whose handler blocks it) while every connection of the burst completes its handshake into the
kernel's accept queue, then released, so it finds the whole burst waiting at once."""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

import pytest
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from chronos.serving import ThreadedServer
from chronos.settings import SecuritySettings
from chronos.web import connections
from chronos.web.connections import ACCEPT_QUEUE, accept_batch, effective_max_connections

#: The child's open-files limit: the cap is half of it (256), a batch 64.
_NOFILE = 512
#: More connections than the child can hold descriptors for, all waiting at once.
_BURST = 600


def _child(nofile: int) -> None:
    """The flooded server: prints its port and cap, then ``blocked`` when ``GET /block`` holds
    its event loop; a line on stdin releases it, the next asks for its counts."""
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    release = threading.Event()

    async def hello(_request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    async def block(_request: Request) -> PlainTextResponse:
        print("blocked", flush=True)
        release.wait(120)  # on the event loop's thread: nothing is accepted meanwhile
        return PlainTextResponse("released")

    server = ThreadedServer(
        name="flooded",
        app=Starlette(routes=[Route("/", hello), Route("/block", block)]),
        host="127.0.0.1",
        port=0,
        security=SecuritySettings(header_timeout_s=600),
    )
    server.start()
    assert server.wait_started(30)
    print(server.port, server.waits.max_connections, flush=True)
    sys.stdin.readline()
    release.set()
    sys.stdin.readline()
    print(json.dumps({"evicted": server.waits.evicted}), flush=True)
    server.stop()
    server.join(30)


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(60)
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


def _room_for_the_burst() -> None:
    """This process holds the burst's sockets; the kernel's queue must hold them all."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _BURST + 200
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"open-files hard limit {hard} < {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    try:
        somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    except OSError:
        pytest.skip("no /proc/sys/net/core/somaxconn (Linux only)")
    if somaxconn < _BURST + 2:
        pytest.skip(f"net.core.somaxconn {somaxconn} cannot queue a burst of {_BURST}")


def test_a_burst_past_the_open_files_limit_never_exhausts_accept(tmp_path: Path) -> None:
    """600 connections wait at once for a server limited to 512 open files (cap 256): it
    takes them a batch a turn, sheds the oldest without a head, serves the request that came
    last, and ``accept()`` never fails. Mutant caught (the code before issue 62's fix):
    uvicorn's backlog of 2,048 accepted ~500 in one turn, then ``accept_exhausted``."""
    _room_for_the_burst()
    log = tmp_path / "child.log"
    with log.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", __name__, str(_NOFILE)],  # this tree's chronos
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert child.stdin is not None and child.stdout is not None
    try:
        port, cap = map(int, child.stdout.readline().split())
        assert cap == _NOFILE // 2
        with ExitStack() as stack:
            blocker = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
            blocker.sendall(b"GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
            assert child.stdout.readline() == "blocked\n"
            # Each handshake completes into the kernel's queue at once (a timeout, not a
            # hang, if the queue were shorter: its SYN would wait for the loop).
            burst = [
                stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
                for _ in range(_BURST)
            ]
            normal = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
            normal.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            child.stdin.write("release\n")
            child.stdin.flush()
            answer = _answer(normal)
            assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"hello"), answer
            assert _answer(burst[0]).startswith(b"HTTP/1.1 408 ")  # the oldest made room
            child.stdin.write("counts\n")
            child.stdin.flush()
            counts = json.loads(child.stdout.readline())
        assert counts["evicted"] >= _BURST + 2 - cap
        child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=30)
    errors = log.read_text()
    assert "accept_exhausted" not in errors, errors
    assert "out of system resource" not in errors, errors


def test_three_batches_above_the_cap_leave_a_quarter_of_the_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The arithmetic of ``accept_batch``: while the loop accepts, the cap and three batches
    per listener are open at most; they leave a quarter of the room above the cap."""
    for limit in (64, 1_024, 2_100, 4_096, 65_536):
        monkeypatch.setattr(connections, "open_files_limit", lambda limit=limit: limit)
        cap = effective_max_connections(1_024)
        for listeners in (1, 2):
            batch = accept_batch(cap, listeners)
            assert 1 <= batch <= ACCEPT_QUEUE
            assert cap + 3 * listeners * batch <= cap + 3 * (limit - cap) / 4
    monkeypatch.setattr(connections, "open_files_limit", lambda: resource.RLIM_INFINITY)
    assert accept_batch(1_024) == ACCEPT_QUEUE


if __name__ == "__main__":
    _child(int(sys.argv[1]))
