"""Request and response bodies of the HTTP API (they generate the OpenAPI spec)."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, model_validator

from chronos.errors import ValidationError
from chronos.repeat import CatchUp, Repeat, RepeatKind
from chronos.settings import (
    MAX_BACKOFF_MS,
    MAX_POLICY_AGE_S,
    MAX_RATE,
    MIN_RATE,
    LimitSettings,
    TopicPolicy,
)
from chronos.validation import MAX_MULTIPLIER
from proxy.client import DelayRequest


class _Body(BaseModel):
    """Strict: ``false`` or ``"5"`` is not a number here, as the schema says."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _first_unknown_key_only(cls, data: Any) -> Any:
        """Keep one unknown key of many: the refusal names the first one either way, and a
        body of 200,000 unknown keys made 200,000 errors, 15.6 s on the event loop while
        every other request waited (issue 62)."""
        if not isinstance(data, dict) or len(data) <= len(cls.model_fields):
            return data
        known = cls.model_fields
        unknown = next((key for key in data if key not in known), None)
        if unknown is None:
            return data
        kept = {key: value for key, value in data.items() if key in known}
        kept[unknown] = data[unknown]
        return kept


def _iso_8601(value: object) -> object:
    """A JSON body carries a time as a string, and strict pydantic refuses a string for a
    datetime once the body is parsed: so the string is parsed here, and anything but a string
    (a number, a bool) stays refused as the schema says."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValueError("must be an ISO-8601 date-time string, e.g. 2026-11-25T18:00:00Z")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an ISO-8601 date-time, e.g. 2026-11-25T18:00:00Z"
        ) from None


def _whole_number(value: object) -> object:
    """JSON Schema counts ``1958.0`` as an integer (a number whose fraction is zero), strict
    pydantic does not: a whole float is taken as its integer; ``true``, ``"5"`` or ``1.5`` stay
    refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: An integer in a request body, as JSON Schema defines one.
JsonInt = Annotated[int, BeforeValidator(_whole_number)]

#: ``deliver_at`` in a request body: an ISO-8601 string (RFC 3339 ``date-time`` in the schema).
IsoDatetime = Annotated[datetime, BeforeValidator(_iso_8601)]


#: Most headers of one message, refused before any of them is validated: a body of 1,000,000
#: small headers took 14.4 s of the event loop to refuse (issue 62, found by a review).
MAX_HEADERS = 1_000


class HeaderIn(_Body):
    """One record header; ``value`` null for a null header value."""

    name: str = Field(description="Header name (must not start with 'chronos-').")
    value: str | None = Field(None, description="Header value, in the request's encoding.")


class RepeatIn(_Body):
    """Repeat schedule: fixed interval, exponential backoff, or cron in a time zone."""

    kind: Literal["fixed", "exponential", "cron"]
    interval_ms: JsonInt | None = Field(
        None,
        description="Fixed and exponential (required): gap between occurrences (exponential: "
        "the first gap).",
    )
    times: JsonInt = Field(description="Total occurrences, the first included.")
    multiplier: JsonInt = Field(2, description="Exponential only: growth factor of the gap.")
    max_interval_ms: JsonInt | None = Field(
        None, description="Exponential only: cap of the gap (default: the configured maximum)."
    )
    catch_up: Literal["all", "latest"] = Field(
        "all",
        description=(
            "Occurrences that fell due while nothing delivered them (failover, outage): each "
            "delivered once (all, within the node's catch-up window) or only the latest."
        ),
    )
    cron: str | None = Field(
        None,
        description="Cron only (required): 5 fields (minute hour day month weekday) or 6 with "
        "seconds first, e.g. '0 9 * * 1-5'. A local time skipped by a daylight-saving change "
        "fires when the clocks jump; one repeated fires once, at its first instant.",
    )
    zone: str = Field("UTC", description="Cron only: IANA time zone, e.g. Europe/Berlin.")
    until_ms: JsonInt | None = Field(
        None, description="Cron only: no occurrence after this epoch ms."
    )

    def to_repeat(self, limits: LimitSettings) -> Repeat:
        """The repeat; the exponential-only fields are checked for a fixed one too, so that
        what the schema refuses is refused whatever the kind."""
        lo, hi = limits.repeat_min_interval_ms, limits.repeat_max_interval_ms
        if not 2 <= self.multiplier <= MAX_MULTIPLIER:
            raise ValidationError("repeat.multiplier", f"must be 2..{MAX_MULTIPLIER}")
        if self.max_interval_ms is not None and not lo <= self.max_interval_ms <= hi:
            raise ValidationError("repeat.max_interval_ms", f"must be {lo}..{hi} ms")
        catch_up = CatchUp.LATEST if self.catch_up == "latest" else CatchUp.ALL
        if self.kind == "cron":
            if self.cron is None:
                raise ValidationError("repeat.cron", "is required for a cron repeat")
            return Repeat.calendar(
                self.cron, self.zone, times=self.times, until_ms=self.until_ms or 0,
                catch_up=catch_up,
            )  # fmt: skip
        if self.interval_ms is None:
            raise ValidationError("repeat.interval_ms", f"is required for a {self.kind} repeat")
        if self.kind == "fixed":
            return Repeat(RepeatKind.FIXED, self.interval_ms, self.times, catch_up=catch_up)
        return Repeat(
            RepeatKind.EXPONENTIAL,
            self.interval_ms,
            self.times,
            self.multiplier,
            self.max_interval_ms or hi,
            catch_up,
        )


class ScheduleIn(_Body):
    """Schedule one message. Give exactly one of delay_ms, deliver_at_ms, deliver_at."""

    topic: str = Field(description="Target topic.")
    value: str | None = Field(None, description="Record value in `encoding`; null for none.")
    key: str | None = Field(None, description="Record key in `encoding`; null for none.")
    headers: list[HeaderIn] = Field(
        default_factory=list,
        max_length=MAX_HEADERS,
        description=f"Record headers (at most {MAX_HEADERS}).",
    )
    encoding: Literal["utf8", "base64"] = Field(
        "utf8", description="How value, key and header values are written in this JSON."
    )
    delay_ms: JsonInt | None = Field(None, description="Deliver this many ms from now.")
    deliver_at_ms: JsonInt | None = Field(
        None, description="Deliver at this epoch ms (past = now)."
    )
    deliver_at: IsoDatetime | None = Field(
        None, description="Deliver at this ISO-8601 time, with its offset (Z or +hh:mm)."
    )
    id: str | None = Field(None, description="Idempotency key; generated when absent.")
    repeat: RepeatIn | None = None

    def _decode(self, text: str | None, field: str) -> bytes | None:
        if text is None:
            return None
        if self.encoding == "utf8":
            try:
                return text.encode()
            except UnicodeEncodeError as exc:  # JSON's "\ud800" escape: a lone surrogate
                raise ValidationError(field, f"is not UTF-8 text: {exc.reason}") from exc
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValidationError(field, "is not valid base64") from exc

    def to_request(self, limits: LimitSettings) -> DelayRequest:
        """The client-library request this body stands for."""
        given = [v is not None for v in (self.delay_ms, self.deliver_at_ms, self.deliver_at)]
        if sum(given) != 1:
            raise ValidationError(
                "delay_ms", "give exactly one of delay_ms, deliver_at_ms, deliver_at"
            )
        deliver_at: datetime | int | None = self.deliver_at_ms
        if self.deliver_at is not None:
            if self.deliver_at.tzinfo is None:
                raise ValidationError("deliver_at", "must include a timezone offset (e.g. Z)")
            deliver_at = self.deliver_at
        return DelayRequest(
            topic=self.topic,
            value=self._decode(self.value, "value"),
            key=self._decode(self.key, "key"),
            headers=[
                (h.name, self._decode(h.value, f"headers[{i}].value"))
                for i, h in enumerate(self.headers)
            ],
            delay=None if self.delay_ms is None else self.delay_ms / 1000.0,
            deliver_at=deliver_at,
            id=self.id,
            repeat=None if self.repeat is None else self.repeat.to_repeat(limits),
        )


class BatchIn(_Body):
    """Schedule several messages; validated all or nothing."""

    messages: list[ScheduleIn] = Field(min_length=1)


def batch_model(batch_max: int) -> type[BatchIn]:
    """``BatchIn`` with at most ``batch_max`` messages (``proxy.batch_max``), refused before
    any of them is validated: counted after validation, a batch of 230,000 messages took
    7.7 s on the event loop to refuse (issue 62)."""
    return create_model(
        "BatchIn",
        __base__=BatchIn,
        __doc__=BatchIn.__doc__,
        messages=(list[ScheduleIn], Field(min_length=1, max_length=batch_max)),
    )


class ReceiptOut(BaseModel):
    """Kafka acknowledged the request."""

    id: str
    deliver_at_ms: int
    deliver_at: datetime


class BatchOut(BaseModel):
    """Receipts in request order."""

    receipts: list[ReceiptOut]


class RescheduleIn(_Body):
    """Move a pending message. Give exactly one of delay_ms, deliver_at_ms, deliver_at."""

    delay_ms: JsonInt | None = Field(None, description="Deliver this many ms from now.")
    deliver_at_ms: JsonInt | None = Field(
        None, description="Deliver at this epoch ms (past = now)."
    )
    deliver_at: IsoDatetime | None = Field(
        None, description="Deliver at this ISO-8601 time, with its offset (Z or +hh:mm)."
    )

    def due(self) -> tuple[float | None, datetime | int | None]:
        """(delay in seconds, deliver_at) for ``DelayClient.reschedule``."""
        given = [v is not None for v in (self.delay_ms, self.deliver_at_ms, self.deliver_at)]
        if sum(given) != 1:
            raise ValidationError(
                "delay_ms", "give exactly one of delay_ms, deliver_at_ms, deliver_at"
            )
        if self.deliver_at is not None:
            if self.deliver_at.tzinfo is None:
                raise ValidationError("deliver_at", "must include a timezone offset (e.g. Z)")
            return None, self.deliver_at
        return (None if self.delay_ms is None else self.delay_ms / 1000.0), self.deliver_at_ms


class RescheduleOut(BaseModel):
    """Kafka acknowledged the reschedule; the node applies it after the add. A message already
    delivered (or being delivered) is not moved: ``GET /v1/messages/{id}`` shows its due time."""

    id: str
    deliver_at_ms: int
    status: Literal["reschedule_accepted"] = "reschedule_accepted"


class CancelOut(BaseModel):
    """Kafka acknowledged the cancel; the node applies it after the add."""

    id: str
    status: Literal["cancel_accepted"] = "cancel_accepted"


# Bounds inside the type, ahead of its validator: on a ``JsonInt | None`` field they went
# into the JSON schema as ``ge``/``le``, which JSON Schema does not know, so generated clients
# saw no bounds (issue 62); here they are ``minimum``/``maximum``.
_Attempts = Annotated[int, Field(ge=1, le=1_000_000), BeforeValidator(_whole_number)]
_BackoffMs = Annotated[int, Field(ge=1, le=MAX_BACKOFF_MS), BeforeValidator(_whole_number)]
_Burst = Annotated[int, Field(ge=1, le=MAX_RATE), BeforeValidator(_whole_number)]


class PolicyIn(_Body):
    """A target topic's delivery policy, replacing its configured one whole on every node
    (``delivery.topics`` in the configuration reference says what each field does). A field
    left out keeps the default, and a policy of a rate alone leaves retries as without one."""

    max_attempts: _Attempts | None = Field(
        None, description="Dead-letter after this many failed attempts."
    )
    max_age_s: float | None = Field(
        None,
        gt=0,
        le=MAX_POLICY_AGE_S,
        description="Dead-letter a delivery that fails this far past its due time, s.",
    )
    backoff_initial_ms: _BackoffMs | None = Field(
        None, description="First retry delay, ms (default 100)."
    )
    backoff_max_ms: _BackoffMs | None = Field(
        None, description="Longest retry delay, ms (default 10000)."
    )
    rate: float | None = Field(
        None, ge=MIN_RATE, le=MAX_RATE, description="Most messages a second delivered to it."
    )
    burst: _Burst | None = Field(None, description="Messages let out at once (default rate / 10).")

    def to_policy(self) -> TopicPolicy:
        """The policy, with only the fields given set (a node tells them from defaults)."""
        return TopicPolicy.model_validate(self.model_dump(exclude_none=True))


class PolicyOut(BaseModel):
    """The policy written for a topic; null once cleared (its configured one applies)."""

    topic: str
    policy: dict[str, int | float] | None


class ErrorOut(BaseModel):
    """A request error naming the offending field."""

    error: str
    field: str | None = None


class HealthOut(BaseModel):
    """Health of the proxy and its Kafka connection."""

    status: Literal["ok", "unavailable"]
    kafka: bool
