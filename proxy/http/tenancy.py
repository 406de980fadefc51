"""Message ids per tenant: a token limited to some topics owns its ids.

Ids are what the node deduplicates, cancels, reschedules and answers status by, and they are
global: without scoping, tenant B sending an id tenant A had used got 201 and was dropped as a
duplicate, and B's status call learned that A's id existed. So the proxy puts a token's
tenant in front of the ids it sends and asks about: ``<tenant>:<id>`` on the wire. Each
tenant then has its own id space, and another tenant's ids are out of its reach (unknown to
its status, cancel and reschedule). Callers never see the prefix: receipts and status answers
carry the id they gave.

* The tenant is the token's name (``Token.tenant``): tokens sharing a name (a rotation) share
  their ids.
* Tokens with ``topics = ["*"]`` (operators, trusted services), requests without tokens and
  clients producing to the inner topic directly are not scoped: they use the ids as they are
  on the wire, prefixed ones included.
* What changes on the wire: the ``chronos-id`` of a scoped request's records (inner topic,
  delivered records, dead letters) carries the prefix. Nodes treat ids as opaque, so nodes of
  any version agree; proxies do not: a message sent through a proxy that scopes is not found
  by its bare id through one that does not (an older release, or ``proxy.scope_ids = false``),
  and the other way round. Switch every proxy at once, or keep ``scope_ids`` off until then.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from chronos.errors import ValidationError
from chronos.web.tokens import Token

SEPARATOR = ":"


def tenant_of(token: Token | None, scope_ids: bool) -> str | None:
    """The tenant whose id space a request acts in; None: the ids as they are."""
    if not scope_ids or token is None or token.every_topic:
        return None
    return token.tenant


def _random_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def to_wire(
    tenant: str | None,
    message_id: str | None,
    max_id_bytes: int,
    field: str,
    new_id: Callable[[str], str] = _random_id,
) -> str:
    """The id on the wire for ``message_id``, or a fresh one from ``new_id`` (given the
    tenant's prefix: ``DelayClient.new_id``) for None; 422 naming ``field`` when the prefix
    leaves the id no room."""
    prefix = "" if tenant is None else f"{tenant}{SEPARATOR}"
    wire = prefix + message_id if message_id is not None else new_id(prefix)
    if tenant is None:
        return wire
    if len(wire.encode()) > max_id_bytes:
        room = max_id_bytes - len(tenant) - len(SEPARATOR)
        limit = f"longer than {room} bytes"
        raise ValidationError(
            field, f"{limit} (tenant {tenant!r} takes the rest of {max_id_bytes})"
        )
    return wire


def from_wire(tenant: str | None, wire: str) -> str:
    """The id the caller gave, from its id on the wire."""
    if tenant is None:
        return wire
    return wire.removeprefix(f"{tenant}{SEPARATOR}")
