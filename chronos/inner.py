"""What a node accepts from the inner topic: one function for the node's ingest and the pipeline.

The node dead-letters a record this refuses; the pipeline's audit leaves the same record out of
what was scheduled. Both call :func:`accept_inner`, so they cannot disagree on a record.
"""

from __future__ import annotations

from chronos import wire
from chronos.errors import DecodeError, ValidationError
from chronos.model import DelayMessage, InnerRequest, RescheduleRequest
from chronos.names import TopicNames
from chronos.settings import LimitSettings
from chronos.types import EpochMs, Headers
from chronos.validation import validate_message, validate_reschedule

#: The proxy checked the horizon with its own clock; a node whose clock is a little behind must
#: not dead-letter what the proxy accepted.
HORIZON_SLACK_MS = 3_600_000


def accept_inner(
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None,
    limits: LimitSettings,
    names: TopicNames,
    now_ms: EpochMs,
) -> InnerRequest:
    """Decode one inner record and check it with the proxy's rules, at ``now_ms``.

    The record key must be the message id (the wire format's contract): it is what puts an
    id's add and cancel on one partition, and it keeps the record's key as small as an id.

    Raises DecodeError with the reason a dead letter carries; any failure on the record,
    whatever raised it, becomes one, because bad input must never stop a reader.
    """
    try:
        request = wire.decode(value, headers)
        if isinstance(request, DelayMessage):
            validate_message(request, limits, names, now_ms + HORIZON_SLACK_MS)
        elif isinstance(request, RescheduleRequest):
            validate_reschedule(request.id, request.due_ms, limits, now_ms + HORIZON_SLACK_MS)
        # A refresh is not checked again: the message was accepted when first sent, and a
        # rule tightened since must not dead-letter what is already scheduled.
        if key != request.id.encode():  # after the rules, whose reasons say more
            raise ValidationError(
                "id", "the record key must be the message id (it partitions add and cancel)"
            )
        return request
    except DecodeError:
        raise
    except ValidationError as exc:
        reason = f"invalid {exc.field}: {exc.message}"
    except Exception as exc:  # bad input must never stop ingest, whatever breaks on it
        reason = f"undecodable: {type(exc).__name__}: {exc}"
    raise DecodeError(reason)
