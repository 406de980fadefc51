"""``admin.server.serve_admin``: what every node's start calls (node alone, cluster node,
cluster member). A port it cannot take ends the start with a clear error."""

from __future__ import annotations

import socket
from typing import cast

import pytest

from chronos.admin.server import serve_admin
from chronos.admin.view import NodeView
from chronos.errors import ConfigError
from chronos.settings import ChronosSettings


def test_a_port_already_taken_is_a_clear_error() -> None:
    """Mutant caught: the start going on with no admin API listening."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = ChronosSettings(admin={"host": "127.0.0.1", "port": port})
        with pytest.raises(ConfigError, match=f"could not listen on 127.0.0.1:{port}"):
            serve_admin(cast(NodeView, object()), settings)


def test_a_free_port_is_served_and_said() -> None:
    server = serve_admin(cast(NodeView, object()), ChronosSettings(admin={"port": 0}))
    try:
        assert server.port
        with socket.create_connection(("127.0.0.1", server.port), timeout=10):
            pass
    finally:
        server.stop()
        server.join(10.0)
