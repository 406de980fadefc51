"""The other nodes' admin APIs, as a cluster node asks them: status, listing and forecast of
the partitions they deliver (``scope=local``), for answers across the cluster (``lookup.py``).

Where a node answers is what it said on the readiness board (``cluster.admin_url``); the token
presented is ``cluster.peer_token``. A peer that does not answer is reported, never guessed
for.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from chronos.errors import ChronosError
from chronos.settings import ChronosSettings


def admin_url_of(settings: ChronosSettings, port: int) -> str:
    """Where the other nodes reach this node's admin API when ``cluster.admin_url`` is unset:
    its listen address, or this machine's name when it listens on every address."""
    host = settings.admin.host
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    scheme = "https" if settings.security.tls_certfile is not None else "http"
    return f"{scheme}://{host}:{port}"


class PeerUnavailable(ChronosError):
    """A peer could not be asked (no address said, not reachable, or it refused)."""


class Peers:
    """Asks other nodes' admin APIs.

    Parameters:
        admin_url: a node's admin API address as it said it, None when it said none.
        token: the bearer token to present, None without authentication.
        timeout_s: per request.
    """

    def __init__(
        self,
        admin_url: Callable[[str], str | None],
        token: str | None = None,
        timeout_s: float = 2.0,
    ) -> None:
        self._admin_url = admin_url
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self._timeout_s = timeout_s

    def get(self, node: str, path: str, params: Mapping[str, object]) -> dict[str, Any]:
        """``node``'s JSON answer to ``GET path?params`` (always with ``scope=local``)."""
        base = self._admin_url(node)
        if base is None:
            raise PeerUnavailable(f"{node} said no admin API address (cluster.admin_url)")
        query = urllib.parse.urlencode(
            {k: v for k, v in {**params, "scope": "local"}.items() if v is not None}
        )
        url = f"{base.rstrip('/')}{path}?{query}"
        try:
            request = urllib.request.Request(url, headers=self._headers)
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise PeerUnavailable(f"{node} answered {exc.code} ({_error_of(exc)})") from exc
        except (OSError, ValueError) as exc:
            raise PeerUnavailable(f"{node} gave no answer ({exc})") from exc
        if not isinstance(body, dict):
            raise PeerUnavailable(f"{node} answered something else than a JSON object")
        return body


def _error_of(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.load(exc)
    except ValueError:
        return str(exc.reason)
    return str(body.get("error", exc.reason)) if isinstance(body, dict) else str(exc.reason)
