"""Ask the nodes where a message is: the status half of the front door.

A message's status lives in the nodes' stores, not in Kafka, so the proxy and the client ask a
node's admin API (``GET /v1/messages/{id}``). Which node: the first of ``proxy.status_nodes``
that is ready (ingest caught up, and for a replica a complete store) and delivering (alone,
master, or a cluster node, which asks the id's owner), else the first one ready: a backup knows
every state too, only not the partition and offset of a delivery. A node that does not answer
is skipped; none ready is an error, never a guess.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from chronos.errors import ChronosError

#: Roles that answer from the delivering store (a cluster node asks the id's owner).
_DELIVERING = ("alone", "master", "cluster")


class StatusUnavailable(ChronosError):
    """No node could answer (none configured, none reachable, or none caught up)."""


class StatusSource:
    """The nodes a status question goes to.

    Parameters:
        nodes: admin API base URLs, e.g. ``http://10.0.0.5:9400``.
        timeout_s: per request.
        token: the bearer token to present (``proxy.status_token``), None without auth.
    """

    def __init__(
        self, nodes: Sequence[str], timeout_s: float = 2.0, token: str | None = None
    ) -> None:
        self._nodes = [node.rstrip("/") for node in nodes]
        self._timeout_s = timeout_s
        self._headers = {} if token is None else {"Authorization": f"Bearer {token}"}

    def status(self, message_id: str) -> dict[str, Any]:
        """The message's status (``chronos/schedule/lookup.py``) as a ready node answers it,
        with the answering node's ``node`` and ``role``."""
        if not self._nodes:
            raise StatusUnavailable(
                "no node to ask: set proxy.status_nodes to the nodes' admin API URLs"
            )
        node, readiness = self._pick()
        answer = self._get(f"{node}/v1/messages/{urllib.parse.quote(message_id, safe='')}")
        if isinstance(answer, str):
            raise StatusUnavailable(f"{node} {answer}")
        answer["answered_by"] = {"node": readiness.get("node"), "role": readiness.get("role")}
        return answer

    def _pick(self) -> tuple[str, dict[str, Any]]:
        ready: list[tuple[str, dict[str, Any]]] = []
        seen: list[str] = []
        for node in self._nodes:
            readiness = self._get(f"{node}/readyz", accept_503=True)
            if isinstance(readiness, str):
                seen.append(f"{node}: {readiness}")
                continue
            if not readiness.get("ok"):
                seen.append(f"{node}: not ready ({readiness.get('role')})")
                continue
            if readiness.get("role") in _DELIVERING:
                return node, readiness
            ready.append((node, readiness))
        if ready:
            return ready[0]
        raise StatusUnavailable("no node is ready to answer: " + "; ".join(seen))

    def _get(self, url: str, accept_503: bool = False) -> dict[str, Any] | str:
        """The JSON answer, or why there is none (a refusal names its status: a 401 is a
        wrong proxy.status_token, not a node that is down)."""
        try:
            request = urllib.request.Request(url, headers=self._headers)
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                body: dict[str, Any] = json.load(response)
                return body
        except urllib.error.HTTPError as exc:
            try:
                body = json.load(exc)
            except ValueError:
                body = {}
            if not isinstance(body, dict):
                body = {}
            if accept_503 and exc.code == 503:
                return body
            return f"answered {exc.code}: {body.get('error', exc.reason)}"
        except (OSError, ValueError) as exc:
            return f"gave no answer ({exc})"
